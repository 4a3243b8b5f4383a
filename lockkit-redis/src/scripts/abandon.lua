-- Ends acquisition ARGV[1] (queue member ARGV[4]) of lock KEYS[1], which will not be taken:
-- it leaves the wait queue (KEYS[4], KEYS[5]), and the lock is freed if it was granted (a
-- try whose reply is still in doubt, or a hand-over from a release). When its outcome is in
-- doubt (ARGV[2] > 0), it is also marked void (KEYS[3], for ARGV[2] ms) so that a delayed try
-- of it can no longer be granted. When that leaves the lock free for others, it is handed
-- over as by a release (fence counter KEYS[2], channel KEYS[6], claim window ARGV[3] ms).
-- Returns 1 when a grant was freed, 0 otherwise.
local freed = 0
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  freed = 1
end
local was_head = redis.call('ZRANGE', KEYS[4], 0, 0)[1] == ARGV[4]
redis.call('ZREM', KEYS[4], ARGV[4])
redis.call('ZREM', KEYS[5], ARGV[4])
if freed == 1 or (was_head and redis.call('EXISTS', KEYS[1]) == 0) then
  pass_on(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[3]))
end
return freed
