-- Turns the write hold of owner ARGV[1] on a read-write lock into a read hold in place: the
-- writer record goes and the owner joins the readers in the same step, with its token ARGV[3]
-- and the write hold's remaining lease, so that no writer (nor mutex) queued meanwhile can be
-- granted in between. Then the readers at the head of the queue join it (a run of them, up
-- to the first writer or mutex waiter), each handed over for a claim window of ARGV[2] ms,
-- or, with nobody queued, every waiter is woken on the name's channel. Keys: see layout.lua.
-- Returns 1 when the hold is a read hold now (or was already), 0 when it is gone, -1 when
-- another owner holds the lock.
local owner = ARGV[1]
local writer = redis.call('GET', K_WRITER)
if writer ~= owner then
  local score = redis.call('ZSCORE', K_READERS, owner)
  if score and tonumber(score) > now_ms() then
    return 1
  end
  if writer or redis.call('EXISTS', K_RECORD) == 1 then
    return -1
  end
  return 0
end
local left = math.max(redis.call('PTTL', K_WRITER), 1)
local now = now_ms()
redis.call('DEL', K_WRITER)
local M = machinery()
redis.call('ZADD', K_READERS, M.int(now + left), owner)
redis.call('HSET', K_TOKENS, owner, ARGV[3])
M.keep_for(K_READERS, left)
M.keep_for(K_TOKENS, left)
M.mark_kinds(left)
machinery().pass_on(tonumber(ARGV[2]), true, nil)
return 1
