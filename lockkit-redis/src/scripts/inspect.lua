-- Reads lock KEYS[1]: {owner, pttl, token, waiters}, with the token from the fence counter
-- KEYS[2] and the number of live entries in the wait queue KEYS[3] (expiry times in KEYS[4]);
-- owner is '' when the lock is free. While a hold lives nobody else can increment the
-- counter, so its value is the holder's token.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiters = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
local owner = redis.call('GET', KEYS[1])
if not owner then
  return {'', -2, '0', waiters}
end
return {owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0', waiters}
