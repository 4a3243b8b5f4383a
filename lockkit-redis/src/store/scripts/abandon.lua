-- Ends acquisition ARGV[1] (queue member ARGV[4], kind ARGV[5]: see acquire.lua), which will
-- not be taken: it leaves the wait queue, and its hold is freed if it was granted (a try
-- whose reply is still in doubt, or a hand-over from another script). When its outcome is
-- in doubt (ARGV[2] > 0), it is also marked void (KEYS[3], for ARGV[2] ms) so that a delayed
-- try of it can no longer be granted. When that frees capacity, or it was the head of the
-- queue, the waiters now at the head that fit are handed what is free, as by a release
-- (claim window ARGV[3] ms). Keys: see layout.lua.
-- Returns 1 when a grant was freed, 0 otherwise.
local owner, member, kind = ARGV[1], ARGV[4], ARGV[5]
local freed = 0
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', K_VOID, '1', 'PX', ARGV[2])
end
if kind == 'x' or kind == 'c' then
  if redis.call('GET', K_RECORD) == owner then
    redis.call('DEL', K_RECORD)
    freed = 1
    if kind == 'c' then
      machinery().note_vacancy()
    end
  end
elseif kind == 'p' then
  if redis.call('ZREM', K_PERMITS, owner) == 1 then
    redis.call('HDEL', K_TOKENS, owner)
    freed = 1
  end
elseif redis.call('GET', K_WRITER) == owner then
  redis.call('DEL', K_WRITER)
  freed = 1
elseif redis.call('ZREM', K_READERS, owner) == 1 then
  redis.call('HDEL', K_TOKENS, owner)
  freed = 1
end
local was_head = member ~= '' and redis.call('ZRANGE', K_QUEUE, 0, 0)[1] == member
redis.call('ZREM', K_QUEUE, member)
redis.call('ZREM', K_EXPIRY, member)
if freed == 1 or was_head then
  machinery().pass_on(tonumber(ARGV[3]), freed == 1, nil)
end
if kind == 'p' then
  machinery().forget_count()
end
if kind ~= 'x' then
  machinery().forget_kinds()
end
return freed
