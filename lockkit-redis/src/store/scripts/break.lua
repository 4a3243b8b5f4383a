-- Breaks every hold of a name, whatever its holders do (an operator freeing a lock whose
-- holder is stuck): the mutex or leader record, the writer record, every reader and permit
-- holder, with their tokens and the holders' own entries in the wait queue, if any; then hands
-- the name over to the waiters at the head of the queue with a claim window of ARGV[1] ms, or
-- wakes every waiter on the name's channel when nobody is queued, as a release does. A broken
-- leader's term ends in the election's journal. Keys: see layout.lua (all thirteen).
-- Returns what inspect.lua returns, for the holds it broke: {waiters, permit count, since,
-- then for each holder: kind, owner, ms left, token}. The fence counter is left as it is, so
-- the next grant's token is greater than every broken one; the broken holders learn of it at
-- their next renewal (or at once from a keyspace event), which finds their record gone.
local claim_ms = tonumber(ARGV[1])
local now = now_ms()
local out = {0, tonumber(redis.call('GET', K_COUNT) or '0'), 0}
local fence = redis.call('GET', K_FENCE) or '0'
local owners = {}
local function add(kind, owner, left, token)
  out[#out + 1] = kind
  out[#out + 1] = owner
  out[#out + 1] = left
  out[#out + 1] = token
  owners[#owners + 1] = owner
end

out[3] = machinery().leader_since()
for _, exclusive in ipairs({{'x', K_RECORD}, {'w', K_WRITER}}) do
  local holder = redis.call('GET', exclusive[2])
  if holder then
    add(exclusive[1], holder, redis.call('PTTL', exclusive[2]), fence)
    redis.call('DEL', exclusive[2])
  end
end
for _, shared in ipairs({{'r', K_READERS}, {'p', K_PERMITS}}) do
  local members = redis.call('ZRANGE', shared[2], 0, -1, 'WITHSCORES')
  for i = 1, #members, 2 do
    local left = tonumber(members[i + 1]) - now
    if left > 0 then
      add(shared[1], members[i], left, redis.call('HGET', K_TOKENS, members[i]) or '0')
    end
    redis.call('HDEL', K_TOKENS, members[i])
  end
  redis.call('DEL', shared[2])
end
if #owners == 0 then
  return out
end

-- The holders' own entries in the queue (a member ends with its owner id, see queue.lua).
local tails = {}
for _, owner in ipairs(owners) do
  tails['\n' .. owner] = true
end
for _, member in ipairs(redis.call('ZRANGE', K_QUEUE, 0, -1)) do
  local cut = string.find(member, '\n[^\n]*$')
  if cut and tails[string.sub(member, cut)] then
    redis.call('ZREM', K_QUEUE, member)
    redis.call('ZREM', K_EXPIRY, member)
  end
end

machinery().note_vacancy()
machinery().pass_on(claim_ms, true, nil)
machinery().forget_count()
machinery().forget_kinds()
return out
