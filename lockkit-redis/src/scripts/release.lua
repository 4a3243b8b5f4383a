-- Frees lock KEYS[1] if owner ARGV[1] holds it, and wakes the head of its wait queue (KEYS[3],
-- KEYS[4]) with a claim window of ARGV[2] ms, or every waiter on channel KEYS[2] when nobody
-- is queued (see queue.lua).
-- Returns 1 when released, 0 when the record is gone, -1 when another owner holds it.
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  wake_queue(KEYS[3], KEYS[4], KEYS[2], tonumber(ARGV[2]))
  return 1
elseif owner then
  return -1
end
return 0
