-- Extends the hold of owner ARGV[1] on a read-write lock to ARGV[2] ms: its writer record
-- KEYS[1], or, after a downgrade, its entry in the readers KEYS[2] (whose tokens are in
-- KEYS[3]), which a reader whose lease ran out no longer has; and the marker of the other
-- kinds KEYS[4] (see layout.lua) with it; a writer's fence counter KEYS[5] (whose value is
-- its token) to ARGV[3] ms. A lease of 0 only checks.
-- Returns 1 when renewed, 0 when the hold is gone, -1 when another owner holds the lock.
local owner, lease = ARGV[1], tonumber(ARGV[2])

-- Keeps the marker of the other kinds for the lease at least.
local function mark()
  if redis.call('PTTL', KEYS[4]) < lease then
    redis.call('SET', KEYS[4], '1', 'PX', lease * 2)
  end
end

local writer = redis.call('GET', KEYS[1])
if writer == owner then
  if lease > 0 then
    redis.call('PEXPIRE', KEYS[1], lease)
    mark()
    if KEYS[5] and ARGV[3] then
      redis.call('PEXPIRE', KEYS[5], ARGV[3])
    end
  end
  return 1
end
local score = redis.call('ZSCORE', KEYS[2], owner)
if score then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(score) <= now then
    redis.call('ZREM', KEYS[2], owner)
    redis.call('HDEL', KEYS[3], owner)
    return 0
  end
  if lease > 0 then
    redis.call('ZADD', KEYS[2], 'XX', string.format('%d', now + lease), owner)
    for i = 2, 3 do
      if redis.call('PTTL', KEYS[i]) < lease then
        redis.call('PEXPIRE', KEYS[i], lease * 2)
      end
    end
    mark()
  end
  return 1
end
if writer then
  return -1
end
return 0
