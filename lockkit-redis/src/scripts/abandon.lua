-- Gives up acquisition ARGV[1] of lock KEYS[1], whose outcome is unknown: marks it void
-- (KEYS[3], for ARGV[2] ms) so that a delayed try of it can no longer be granted, and frees
-- the lock if a try was granted already, waking the waiters on channel KEYS[2].
-- Returns 1 when a granted try was freed, 0 otherwise.
redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
end
return 0
