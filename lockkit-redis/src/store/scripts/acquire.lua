-- Grants a hold of kind ARGV[8] on a name to owner ARGV[1] for ARGV[2] ms (keys: see
-- layout.lua; KEYS[3] is the void marker of this acquisition).
-- ARGV: [1] the owner id, [2] the lease in ms, [3] '1' when this acquisition waits in the
--       queue of a fair lock (it joins the queue, or refreshes its entry, whenever it is not
--       granted), '0' otherwise, [4] how long a queue entry lives without a refresh (ms),
--       [5] how long a hand-over to the head of the queue lasts unless confirmed (ms),
--       [6] this acquisition's queue member, [7] how long the fence counter outlives the
--       grant (ms; see next_token in queue.lua), [8] the kind (none for a mutex): 'x' mutex,
--       'r' read, 'w' write, 'p' permit, 'c' candidate of an election (its identity is in its
--       owner id; see queue.lua), [9] the semaphore's permit count (permits only).
-- Returns {1, token, 0, 0} when granted; {-1, 0, 0, 0} when this acquisition was abandoned
-- and must not be granted any more; {-3, 0, 0, 0}, having changed nothing, when a mutex was
-- asked with the short layout (see layout.lua) of a name that other kinds use;
-- {-2, what, count, 0} when the name is in use as another kind (what = 1: as a semaphore of
-- `count` permits; 3: as a lock) or as a semaphore of another count (what = 2, with the
-- count in use); and {0, ms, fence, now} otherwise, ms
-- being how long the holds that keep this one out last at most, and, for a queued
-- acquisition, fence the fence counter's value (or, when the counter expired, the server time
-- in µs, above every token issued before it) and now the server time in ms: a hand-over
-- that reaches the waiter later with a greater token was made after this reply, and the time
-- between the two is known in server time (see lock.rs).
--
-- While the queue has entries, free capacity belongs to its head: nobody else may take it.
-- The uncontended mutex path is acquire_lean.lua, which runs before this; what comes here
-- is every other case.

FENCE_TTL = ARGV[7]
local owner, member, kind = ARGV[1], ARGV[6], ARGV[8] or 'x'
local permits = tonumber(ARGV[9]) or 0
local joins = ARGV[3] == '1'

-- The mutex among mutexes: nobody queued, no other kind in use (the marker of the other
-- kinds outlives all of them).
local alone = kind == 'x' and redis.call('EXISTS', K_QUEUE, K_KINDS) == 0
if alone and redis.call('SET', K_RECORD, owner, 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', K_VOID) == 1 then
    -- A delayed try of an abandoned acquisition: undo, grant nothing.
    redis.call('DEL', K_RECORD)
    return {-1, 0, 0, 0}
  end
  return {1, next_token(K_FENCE), 0, 0}
end

-- Joins the queue at its back, or keeps the place already held, and (re)starts the entry's
-- expiry. The queue keys themselves expire with the last entry's lifetime, so that entries
-- of dead waiters on a lock nobody asks for again do not stay forever; so does a
-- semaphore's permit count while permits are waited for. Returns false, and joins nothing,
-- when this acquisition was abandoned (a delayed try).
local function join(now)
  if redis.call('EXISTS', K_VOID) == 1 then
    return false
  end
  local t = redis.call('TIME')
  local ttl = tonumber(ARGV[4])
  redis.call('ZADD', K_QUEUE, 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), member)
  redis.call('ZADD', K_EXPIRY, now + ttl, member)
  redis.call('PEXPIRE', K_QUEUE, ttl)
  redis.call('PEXPIRE', K_EXPIRY, ttl)
  if kind ~= 'x' then
    machinery().mark_kinds(ttl)
  end
  if kind == 'p' then
    if redis.call('EXISTS', K_COUNT) == 0 then
      redis.call('SET', K_COUNT, permits)
    end
    machinery().keep_for(K_COUNT, ttl)
  end
  return true
end

local function leave()
  redis.call('ZREM', K_QUEUE, member)
  redis.call('ZREM', K_EXPIRY, member)
end

-- Not granted: joins (or stays in) the queue when this acquisition waits in it, and says
-- how long the holds in the way last at most.
local function refuse(left, now)
  if not joins then
    return {0, left, 0, 0}
  end
  now = now or now_ms()
  if not join(now) then
    return {-1, 0, 0, 0}
  end
  local fence = tonumber(redis.call('GET', K_FENCE))
  if not fence then
    -- The counter expired: every token issued before is below the server's clock in µs.
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return {0, left, fence, now}
end

-- The token of an exclusive hold this acquisition has: the fence counter's value, kept for
-- FENCE_TTL more. Should the counter have expired since the grant (a retention shorter than
-- the time a lost reply took to be asked again), the hold gets the next token, which is
-- above every token issued before, its own included, and which the counter then keeps.
local function held_token()
  local token = tonumber(redis.call('GET', K_FENCE))
  if not token then
    return next_token(K_FENCE)
  end
  redis.call('PEXPIRE', K_FENCE, FENCE_TTL)
  return token
end

-- An earlier try of this very mutex acquisition was granted and its reply lost, or the lock
-- was handed over to it. The hold is ours, so nobody can have incremented the counter since:
-- its value is our token.
local function regrant_mutex()
  redis.call('PEXPIRE', K_RECORD, ARGV[2])
  leave()
  return {1, held_token(), 0, 0}
end

if alone then
  -- Held: by this very acquisition (a lost reply), or by another mutex.
  if redis.call('GET', K_RECORD) == owner then
    return regrant_mutex()
  end
  return refuse(redis.call('PTTL', K_RECORD))
end

if kind == 'x' and redis.call('EXISTS', K_KINDS) == 0 then
  -- Waiters queued, and no other kind uses the name (so they are all mutex waiters): the
  -- mutex's own queue logic.
  prune(K_QUEUE, K_EXPIRY, now_ms())
  local head = redis.call('ZRANGE', K_QUEUE, 0, 0)[1]
  if head and head ~= member then
    local holder = redis.call('GET', K_RECORD)
    if holder == owner then
      return regrant_mutex()
    end
    if not holder then
      -- Free, and the head's: hand it over now (its holder's lease ran out, or a head before
      -- it let its hand-over expire). The head then holds it for a claim window at most.
      pass_on_mutex(K_RECORD, K_FENCE, K_QUEUE, K_EXPIRY, K_CHANNEL, tonumber(ARGV[5]))
    end
    return refuse(redis.call('PTTL', K_RECORD))
  end
  if redis.call('SET', K_RECORD, owner, 'NX', 'PX', ARGV[2]) then
    if redis.call('EXISTS', K_VOID) == 1 then
      redis.call('DEL', K_RECORD)
      return {-1, 0, 0, 0}
    end
    if head then
      leave()
    end
    return {1, next_token(K_FENCE), 0, 0}
  end
  if redis.call('GET', K_RECORD) == owner then
    return regrant_mutex()
  end
  return refuse(redis.call('PTTL', K_RECORD))
end

if SHORT then
  -- Other kinds use the name: ask for all the keys (nothing was changed).
  return {-3, 0, 0, 0}
end

-- Every other case: another kind in use, or waiters queued.
local M = machinery()
local lease = tonumber(ARGV[2])
local now = now_ms()
M.prune(now)
local s = M.holders(now)
local shared_set = K_READERS
if kind == 'p' then
  shared_set = K_PERMITS
elseif kind == 'x' and not s.writer and s.readers == 0 and s.permits == 0 and not s.total then
  -- Nothing of another kind is left: the mutex's short paths may serve the name again.
  M.forget_kinds()
end

-- Whether this acquisition holds already: an earlier try of it was granted and its reply
-- lost, or a hand-over made it the holder.
local function mine()
  if kind == 'x' or kind == 'c' then
    return s.record == owner
  elseif kind == 'w' then
    return s.writer == owner
  end
  local score = redis.call('ZSCORE', shared_set, owner)
  return score and tonumber(score) > now
end

-- Extends this acquisition's hold to a full lease, and returns it as granted. An exclusive
-- hold is ours alone, so nobody can have incremented the counter since: its value is our
-- token; readers and permits have theirs in the tokens hash.
local function regrant()
  local token
  if kind == 'x' or kind == 'w' or kind == 'c' then
    local key = K_RECORD
    if kind == 'w' then
      key = K_WRITER
    end
    redis.call('PEXPIRE', key, lease)
    token = held_token()
    if kind == 'w' then
      M.mark_kinds(lease)
    end
  else
    M.mark_kinds(lease)
    redis.call('ZADD', shared_set, 'XX', M.int(now + lease), owner)
    M.keep_for(shared_set, lease)
    M.keep_for(K_TOKENS, lease)
    if kind == 'p' then
      M.keep_for(K_COUNT, lease)
    end
    token = redis.call('HGET', K_TOKENS, owner)
  end
  leave()
  return {1, tonumber(token), 0, 0}
end

-- How long the holds that keep this acquisition out last at most (-2: none known).
local function left()
  if kind == 'p' then
    local first = redis.call('ZRANGE', K_PERMITS, 0, 0, 'WITHSCORES')
    if first[2] then
      return tonumber(first[2]) - now
    end
    return -2
  end
  local ms = math.max(redis.call('PTTL', K_RECORD), redis.call('PTTL', K_WRITER))
  local last = redis.call('ZRANGE', K_READERS, -1, -1, 'WITHSCORES')
  if last[2] then
    ms = math.max(ms, tonumber(last[2]) - now)
  end
  return ms
end

if mine() then
  return regrant()
end

-- One name, one kind: a semaphore of one count, or locks (mutexes and read-write locks,
-- which exclude each other).
if kind == 'p' then
  if s.record or s.writer or s.readers > 0 or (not s.total and redis.call('EXISTS', K_QUEUE) == 1) then
    leave()
    return {-2, 3, 0, 0}
  end
  if s.total and s.total ~= permits then
    leave()
    return {-2, 2, s.total, 0}
  end
elseif s.total then
  leave()
  return {-2, 1, s.total, 0}
end

if redis.call('EXISTS', K_QUEUE) == 1 then
  -- Free capacity is the head's: hand it over now (a holder's lease ran out, or a head before
  -- it let its hand-over expire). When that reaches this very acquisition, it takes it.
  if M.pass_on(tonumber(ARGV[5]), false, s) > 0 and mine() then
    return regrant()
  end
  if redis.call('EXISTS', K_QUEUE) == 1 then
    return refuse(left(), now)
  end
end

if M.fits(kind, permits, s) then
  if redis.call('EXISTS', K_VOID) == 1 then
    -- A delayed try of an abandoned acquisition: grant nothing.
    return {-1, 0, 0, 0}
  end
  return {1, M.grant(kind, permits, owner, lease, s), 0, 0}
end
return refuse(left(), now)
