-- Reads the holders of a name and its queue (keys: see layout.lua):
-- {waiters, permit count, since, then for each holder: kind, owner, ms left, token}, kind
-- being 'x' (mutex, or a leader, whose owner id says so), 'w' (writer), 'r' (reader) or 'p'
-- (permit), since the server ms at which the holder of the mutex record was granted it when
-- the election's journal says (0 otherwise), waiters the number of live entries in
-- the wait queue, and the permit count 0 unless the name is a semaphore in use. While an
-- exclusive hold lives nobody else can increment the fence counter, so its value is that
-- holder's token; readers and permit holders have theirs in the tokens hash. Holders whose
-- lease ran out are left out (at most 1000 readers and 1000 permits are listed).
local now = now_ms()
local out = {redis.call('ZCOUNT', K_EXPIRY, '(' .. now, '+inf'), tonumber(redis.call('GET', K_COUNT) or '0'), 0}
out[3] = machinery().leader_since()
local fence = redis.call('GET', K_FENCE) or '0'
local function add(kind, owner, left, token)
  out[#out + 1] = kind
  out[#out + 1] = owner
  out[#out + 1] = left
  out[#out + 1] = token
end
for _, exclusive in ipairs({{'x', K_RECORD}, {'w', K_WRITER}}) do
  local holder = redis.call('GET', exclusive[2])
  if holder then
    add(exclusive[1], holder, redis.call('PTTL', exclusive[2]), fence)
  end
end
for _, shared in ipairs({{'r', K_READERS}, {'p', K_PERMITS}}) do
  local members = redis.call('ZRANGEBYSCORE', shared[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1000)
  for i = 1, #members, 2 do
    add(shared[1], members[i], tonumber(members[i + 1]) - now, redis.call('HGET', K_TOKENS, members[i]) or '0')
  end
end
return out
