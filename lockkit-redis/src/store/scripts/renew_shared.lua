-- Keeps the marker of the other kinds `marker` (see layout.lua) for `lease` ms at least.
local function keep_marker(marker, lease)
  if redis.call('PTTL', marker) < lease then
    redis.call('SET', marker, '1', 'PX', lease * 2)
  end
end

-- Renews a shared hold (a reader's or a permit's): owner `owner`'s entry in the sorted set of
-- holders `holders` (scored by lease end, server ms; tokens in the hash `tokens`), extended
-- to `lease` ms from now, and every key of `keep` (the holders' own keys) kept for the lease
-- at least, as the marker of the other kinds `marker` (see layout.lua). A lease of 0 only
-- checks. Returns 1 when renewed, 0 when the entry's lease ran out (it is removed then), nil
-- when the owner has no entry.
local function renew_shared(holders, tokens, owner, lease, keep, marker)
  local score = redis.call('ZSCORE', holders, owner)
  if not score then
    return nil
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(score) <= now then
    redis.call('ZREM', holders, owner)
    redis.call('HDEL', tokens, owner)
    return 0
  end
  if lease > 0 then
    redis.call('ZADD', holders, 'XX', string.format('%d', now + lease), owner)
    for _, key in ipairs(keep) do
      if redis.call('PTTL', key) < lease then
        redis.call('PEXPIRE', key, lease * 2)
      end
    end
    keep_marker(marker, lease)
  end
  return 1
end

