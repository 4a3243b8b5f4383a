-- Frees lock KEYS[1] if owner ARGV[1] holds it, and wakes the waiters on channel KEYS[2].
-- Returns 1 when released, 0 when the record is gone, -1 when another owner holds it.
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
elseif owner then
  return -1
end
return 0
