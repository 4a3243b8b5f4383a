-- Ends acquisition ARGV[1] of lock KEYS[1], which will not be granted: it leaves the wait
-- queue (KEYS[4], KEYS[5]). When its outcome is in doubt (ARGV[2] > 0), it is also marked
-- void (KEYS[3], for ARGV[2] ms) so that a delayed try of it can no longer be granted, and
-- the lock is freed if a try was granted already. When that leaves the lock free for
-- others, the waiters on channel KEYS[2] are woken as by a release (see release.lua), the
-- next head of the queue getting its claim window of ARGV[3] ms.
-- Returns 1 when a granted try was freed, 0 otherwise.
local freed = 0
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    freed = 1
  end
end
local was_head = redis.call('ZRANGE', KEYS[4], 0, 0)[1] == ARGV[1]
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
if freed == 1 or (was_head and redis.call('EXISTS', KEYS[1]) == 0) then
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if head then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[5], 'XX', 'LT', now + tonumber(ARGV[3]), head)
    redis.call('PUBLISH', KEYS[2], head)
  elseif freed == 1 then
    redis.call('PUBLISH', KEYS[2], '')
  end
end
return freed
