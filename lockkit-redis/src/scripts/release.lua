-- Frees lock KEYS[1] if owner ARGV[1] holds it, and hands it over to the head of its wait
-- queue (KEYS[3], KEYS[4]) with a claim window of ARGV[2] ms and a token from the fence
-- counter KEYS[2], or wakes every waiter on channel KEYS[5] when nobody is queued (see
-- queue.lua).
-- Returns 1 when released, 0 when the record is gone, -1 when another owner holds it.
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  pass_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], tonumber(ARGV[2]))
  return 1
elseif owner then
  return -1
end
return 0
