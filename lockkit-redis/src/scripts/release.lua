-- Frees lock KEYS[1] if owner ARGV[1] holds it, and wakes the waiters on channel KEYS[2].
-- KEYS: [3] the wait queue, [4] its entries' expiry times (see acquire.lua).
-- ARGV: [1] the owner id, [2] how long the head of the queue has to claim the lock (ms).
-- With waiters queued, the message names the head, whose claim window opens now, and only
-- it is woken to try; otherwise the message is empty and wakes every waiter.
-- Returns 1 when released, 0 when the record is gone, -1 when another owner holds it.
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[4], 'XX', 'LT', now + tonumber(ARGV[2]), head)
    redis.call('PUBLISH', KEYS[2], head)
  else
    redis.call('PUBLISH', KEYS[2], '')
  end
  return 1
elseif owner then
  return -1
end
return 0
