-- Reads the holder of lock KEYS[1]: {owner, pttl, token} with the token from the fence
-- counter KEYS[2], or an empty array when the lock is free. While a hold lives nobody else
-- can increment the counter, so its value is the holder's token.
local owner = redis.call('GET', KEYS[1])
if not owner then
  return {}
end
return {owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0'}
