-- Extends the permit of owner ARGV[1] to ARGV[2] ms: its entry in the permit holders KEYS[1]
-- (whose tokens are in KEYS[2], and the semaphore's permit count in KEYS[3]), which a holder
-- whose lease ran out no longer has; and the marker of the other kinds KEYS[4] (see
-- layout.lua) with it. A lease of 0 only checks.
-- Returns 1 when renewed, 0 when the permit is gone.
local owner, lease = ARGV[1], tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], owner)
if not score then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(score) <= now then
  redis.call('ZREM', KEYS[1], owner)
  redis.call('HDEL', KEYS[2], owner)
  return 0
end
if lease > 0 then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + lease), owner)
  for i = 1, 3 do
    if redis.call('PTTL', KEYS[i]) < lease then
      redis.call('PEXPIRE', KEYS[i], lease * 2)
    end
  end
  if redis.call('PTTL', KEYS[4]) < lease then
    redis.call('SET', KEYS[4], '1', 'PX', lease * 2)
  end
end
return 1
