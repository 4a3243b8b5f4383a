-- Functions shared by the scripts that grant a lock or touch its wait queue (this file is put
-- in front of each of them: acquire, release, abandon, downgrade, inspect, after layout.lua,
-- which names their keys K_RECORD, K_FENCE, ...).
--
-- Kinds of hold: 'x' a mutex, 'r' a reader, 'w' a writer, 'p' a permit, 'c' a candidate of
-- an election (the leader holds the mutex record, its owner id carrying its identity, and
-- every grant and end of a leadership is written in the election's journal, K[13]). A mutex
-- (or a leader) excludes readers and writers as a writer does; a name in use as a semaphore refuses every other
-- kind, and a semaphore in use with another permit count, as a conflict.
--
-- The wait queue of a fair lock is a sorted set of members scored by arrival (µs of server
-- time). A mutex waiter's member is "<wake channel>\n<owner id>", the wake channel being the
-- one its provider listens on; the other kinds' are "<wake channel>\n<kind>\n<owner id>", the
-- kind being 'r', 'w' or 'p' followed by the permit count ("p3"); owner ids have no newline.
-- A second sorted set scores each member by the server time (ms) at which it expires:
-- waiters refresh their entry at every try.
--
-- Capacity freed while waiters are queued is handed over: the script that frees it (a
-- release, an abandoned acquisition that was granted, a downgrade, or a try that finds a
-- holder's lease ran out) grants it at once to the waiters at the head of the queue that fit
-- (one mutex or writer; a run of readers up to the first writer or mutex; as many permit
-- waiters as permits are free), each for a claim window only, and tells each so. A live
-- waiter confirms its grant by extending it to its lease; a dead one's grant expires with
-- the window, and the next waiter's turn comes.

-- A Lua function costs a closure at every call of a script, and one more object for each
-- local it captures, so the mutex's paths, which run on every lock and unlock, see only the
-- small functions below, which take their keys as arguments, as they did before the other
-- kinds existed; the rest of the queue's machinery (holders, fits, grant, pass_on, ...) is
-- made by machinery(), once per call of a script that needs it.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops expired entries of queue `queue` (expiry times in `expiry`; at most 100 per call);
-- returns how many.
local function prune(queue, expiry, now)
  local expired = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then
    redis.call('ZREM', queue, unpack(expired))
    redis.call('ZREM', expiry, unpack(expired))
  end
  return #expired
end

-- Issues the next fencing token of a name from its counter `fence`, for a grant of any kind:
-- max(counter + 1, server time in µs), which the counter then holds. The clock term keeps
-- tokens from going back when the counter itself went back: a new name, a server restarted
-- without persistence, or a replica promoted after a failover that missed the last grants
-- of its old primary (as long as the server clock, and the promoted server's clock, is not
-- behind the last grant's time; see "Fencing tokens and server restarts" in lib.rs). The
-- counter term keeps tokens increasing when grants come faster than the clock's
-- microseconds. One TIME and raise_fence (fence.lua) per grant. The counter expires FENCE_TTL ms
-- after the grant in the scripts that know the retention (acquire; every renewal of an
-- exclusive hold extends it); a hand-over from another script keeps the counter's expiry as
-- it was (the head's confirmation, an acquire call, extends it within a claim window).
local function next_token(fence)
  local t = redis.call('TIME')
  return (raise_fence(fence, tonumber(t[1]) * 1000000 + tonumber(t[2]), FENCE_TTL))
end

-- The mutex's hand-over, for a name that no other kind uses (the marker of the other kinds
-- is absent, so only mutex waiters can be queued): the free mutex `lock` goes to the head of
-- the queue (expired entries dropped first), which leaves the queue and is granted the lock
-- for `claim_ms`, and its wake channel gets
-- "grant:<token>:<server ms of the grant>:<claim_ms>:<member>" (the window is the caller's
-- setting, which the head may not share). The next two waiters get "next:<member>": they look
-- again once the grant may have expired unclaimed, which is how a dead head is skipped. With
-- nobody queued, every waiter is woken on the lock's channel instead. `first` is the queue's
-- first three members when the caller read them already. (machinery().pass_on does the same
-- for every kind.)
local function pass_on_mutex(lock, fence, queue, expiry, channel, claim_ms, first)
  first = first or redis.call('ZRANGE', queue, 0, 2)
  if #first > 0 and prune(queue, expiry, now_ms()) > 0 then
    -- Skip the waiters whose entries expired (dead, or gone without a word).
    first = redis.call('ZRANGE', queue, 0, 2)
  end
  if #first == 0 then
    redis.call('PUBLISH', channel, '')
    return
  end
  for i, member in ipairs(first) do
    local cut = string.find(member, '\n', 1, true)
    if i == 1 then
      if cut and string.find(member, '\n', cut + 1, true) then
        -- Another kind's waiter, which the marker says is not there: it takes its turn at
        -- its next try.
        return
      end
      redis.call('ZREM', queue, member)
      redis.call('ZREM', expiry, member)
      if cut then
        redis.call('SET', lock, string.sub(member, cut + 1), 'PX', claim_ms)
        local token = next_token(fence)
        redis.call('PUBLISH', string.sub(member, 1, cut - 1), string.format('grant:%d:%d:%d:', token, now_ms(), claim_ms) .. member)
      end
    elseif cut then
      redis.call('PUBLISH', string.sub(member, 1, cut - 1), 'next:' .. member)
    end
  end
end

local made
local function machinery()
  if made then
    return made
  end
  local M = {}
  local K = layout()
  local K_RECORD, K_FENCE, K_QUEUE, K_EXPIRY, K_CHANNEL = K[1], K[2], K[4], K[5], K[6]
  local K_KINDS, K_WRITER, K_READERS, K_PERMITS, K_TOKENS, K_COUNT = K[7], K[8], K[9], K[10], K[11], K[12]
  local K_TERMS = K[13]
  local SHORT = #K == 7

  -- How many waiters one call hands over at most; the waiters after them are told to look
  -- again, and their tries hand over the rest.
  local MAX_RUN = 100

  -- A whole number as Redis must store it: Lua's default format keeps 14 digits, tokens
  -- have 16.
  function M.int(n)
    return string.format('%d', n)
  end

  -- Drops expired queue entries (at most 100 per call); returns how many.
  function M.prune(now)
    return prune(K_QUEUE, K_EXPIRY, now)
  end

  -- Makes `key` live for `ms` more at least (twice that when it has to be extended), so
  -- that a set of holders outlives the latest expiry of its members and goes with the last
  -- of them.
  function M.keep_for(key, ms)
    if redis.call('PTTL', key) < ms then
      redis.call('PEXPIRE', key, ms * 2)
    end
  end

  -- Keeps the marker of the other kinds (see layout.lua) for `ms` more at least: every
  -- script that makes or extends a writer, reader, permit or waiter of another kind than the
  -- mutex calls it with that hold's or entry's lifetime, so that the marker outlives them.
  function M.mark_kinds(ms)
    if redis.call('PTTL', K_KINDS) < ms then
      redis.call('SET', K_KINDS, '1', 'PX', ms * 2)
    end
  end

  -- Drops the marker of the other kinds once no writer, reader, permit, permit count nor
  -- waiter of any kind is left: the mutex's scripts take their short paths again.
  function M.forget_kinds()
    if redis.call('EXISTS', K_WRITER, K_READERS, K_PERMITS, K_COUNT, K_QUEUE) == 0 then
      redis.call('DEL', K_KINDS)
    end
  end

  -- The number of holders of sorted set `set`, its expired holders (at most 100 per call)
  -- and their tokens dropped first.
  local function shared_count(set, now)
    local n = redis.call('ZCARD', set)
    if n > 0 then
      local expired = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'LIMIT', 0, 100)
      if #expired > 0 then
        redis.call('ZREM', set, unpack(expired))
        redis.call('HDEL', K_TOKENS, unpack(expired))
        n = redis.call('ZCARD', set)
      end
    end
    return n
  end

  -- Forgets the semaphore's permit count once nobody holds or waits for a permit.
  function M.forget_count()
    if redis.call('ZCARD', K_PERMITS) == 0 and redis.call('EXISTS', K_QUEUE) == 0 then
      redis.call('DEL', K_COUNT)
    end
  end

  -- Who holds the name at server time `now`, expired readers and permits purged: the mutex
  -- and writer records' owners (false when free), the numbers of readers and permit holders,
  -- and the semaphore's permit count while it is in use (nil otherwise).
  function M.holders(now)
    if SHORT then
      -- A mutex script that knows the name is used by mutexes alone.
      return { now = now, record = redis.call('GET', K_RECORD), writer = false, readers = 0, permits = 0 }
    end
    local exclusive = redis.call('MGET', K_RECORD, K_WRITER)
    local s = {
      now = now,
      record = exclusive[1],
      writer = exclusive[2],
      readers = shared_count(K_READERS, now),
      permits = shared_count(K_PERMITS, now),
    }
    local count = redis.call('GET', K_COUNT)
    if count then
      if s.permits == 0 and redis.call('EXISTS', K_QUEUE) == 0 then
        redis.call('DEL', K_COUNT)
      else
        s.total = tonumber(count)
      end
    end
    return s
  end

  -- Whether a hold of `kind` (of a semaphore of `permits`) fits beside the holders `s`.
  function M.fits(kind, permits, s)
    if s.record or s.writer then
      return false
    end
    if kind == 'r' then
      return s.permits == 0
    end
    if kind == 'p' then
      return s.readers == 0 and s.permits < (s.total or permits)
    end
    return s.readers == 0 and s.permits == 0
  end

  -- How many entries the journal of an election keeps, about (XADD MAXLEN ~).
  local JOURNAL_LEN = 1000

  -- The last entry of the election's journal as a table of its fields (k: 'e' elected or
  -- 'v' vacant; t: the term; o: the leader's owner id and s: the server ms of the grant, for
  -- 'e'), with its id; nil when the journal is empty or gone.
  function M.last_entry()
    local last = redis.call('XREVRANGE', K_TERMS, '+', '-', 'COUNT', 1)[1]
    if not last then
      return nil
    end
    local entry = { id = last[1] }
    for i = 1, #last[2], 2 do
      entry[last[2][i]] = last[2][i + 1]
    end
    return entry
  end

  -- The server ms at which the holder of the mutex record was granted it, when the
  -- election's journal names that holder as its leader; 0 otherwise (no record, no journal,
  -- or a journal naming another).
  function M.leader_since()
    local record = redis.call('GET', K_RECORD)
    if not (record and K_TERMS) then
      return 0
    end
    local last = M.last_entry()
    if last and last.k == 'e' and last.o == record then
      return tonumber(last.s)
    end
    return 0
  end

  -- Appends an entry to the journal (capped) and publishes its id on the journal's channel.
  local function append(...)
    local id = redis.call('XADD', K_TERMS, 'MAXLEN', '~', JOURNAL_LEN, '*', ...)
    redis.call('PUBLISH', K_TERMS, id)
  end

  -- Writes in the journal that the leader of its last entry no longer leads, once: when that
  -- entry names a leader whose record is gone (released, abandoned, expired, deleted, or
  -- taken by another since). Returns whether it did.
  function M.note_vacancy()
    if not K_TERMS then
      return false
    end
    local last = M.last_entry()
    if last and last.k == 'e' and redis.call('GET', K_RECORD) ~= last.o then
      append('k', 'v', 't', last.t)
      return true
    end
    return false
  end

  -- Writes in the journal that candidate `owner` leads for term `token` from server ms
  -- `now` (the vacancy of the previous leader first, if it was not written yet).
  function M.elected(owner, token, now)
    local last = M.last_entry()
    if last and last.k == 'e' then
      append('k', 'v', 't', last.t)
    end
    append('k', 'e', 't', M.int(token), 'o', owner, 's', M.int(now))
  end

  -- Grants a hold of `kind` to `owner` for `ms` and returns its token; `s` follows.
  function M.grant(kind, permits, owner, ms, s)
    local token = next_token(K_FENCE)
    if kind == 'x' or kind == 'c' then
      redis.call('SET', K_RECORD, owner, 'PX', ms)
      s.record = owner
      if kind == 'c' then
        M.elected(owner, token, s.now)
      end
      return token
    end
    M.mark_kinds(ms)
    if kind == 'w' then
      redis.call('SET', K_WRITER, owner, 'PX', ms)
      s.writer = owner
    else
      local set = K_READERS
      if kind == 'p' then
        set = K_PERMITS
        if not s.total then
          redis.call('SET', K_COUNT, permits)
          s.total = permits
        end
        M.keep_for(K_COUNT, ms)
        s.permits = s.permits + 1
      else
        s.readers = s.readers + 1
      end
      redis.call('ZADD', set, M.int(s.now + ms), owner)
      redis.call('HSET', K_TOKENS, owner, M.int(token))
      M.keep_for(set, ms)
      M.keep_for(K_TOKENS, ms)
    end
    return token
  end

  -- The parts of queue member `member`: its wake channel, kind, permit count (0 but for
  -- permits) and owner id; nil for a member that is none of these.
  local function parse_member(member)
    local cut = string.find(member, '\n', 1, true)
    if not cut then
      return nil
    end
    local rest = string.sub(member, cut + 1)
    local second = string.find(rest, '\n', 1, true)
    if not second then
      return string.sub(member, 1, cut - 1), 'x', 0, rest
    end
    local kind, permits = string.sub(rest, 1, 1), tonumber(string.sub(rest, 2, second - 1)) or 0
    return string.sub(member, 1, cut - 1), kind, permits, string.sub(rest, second + 1)
  end

  -- What pass_on (below) does when nobody is queued: wakes every waiter on the name's
  -- channel if a hold was `freed`. Returns 0 (nobody granted).
  local function wake_unqueued(freed)
    if freed then
      redis.call('PUBLISH', K_CHANNEL, '')
    end
    return 0
  end

  -- pass_on (below) for a queue headed by `head`.
  function M.hand_over(head, claim_ms, freed, s)
    local now = (s and s.now) or now_ms()
    if M.prune(now) > 0 then
      -- Skip the waiters whose entries expired (dead, or gone without a word).
      head = redis.call('ZRANGE', K_QUEUE, 0, 0)[1]
      if not head then
        return wake_unqueued(freed)
      end
    end
    s = s or M.holders(now)
    local granted = 0
    while head and granted < MAX_RUN do
      local channel, kind, permits, owner = parse_member(head)
      if channel and (not M.fits(kind, permits, s) or (SHORT and kind ~= 'x')) then
        -- (A mutex script with the short layout hands over to mutex waiters only; another
        -- kind's waiter, which the marker says is not there, takes its turn at its next try.)
        break
      end
      redis.call('ZREM', K_QUEUE, head)
      redis.call('ZREM', K_EXPIRY, head)
      if channel then
        local token = M.grant(kind, permits, owner, claim_ms, s)
        redis.call('PUBLISH', channel, string.format('grant:%d:%d:%d:', token, s.now, claim_ms) .. head)
        granted = granted + 1
        if kind == 'x' or kind == 'w' or kind == 'c' then
          break
        end
      end
      head = redis.call('ZRANGE', K_QUEUE, 0, 0)[1]
    end
    if granted > 0 then
      for _, member in ipairs(redis.call('ZRANGE', K_QUEUE, 0, 1)) do
        local cut = string.find(member, '\n', 1, true)
        if cut then
          redis.call('PUBLISH', string.sub(member, 1, cut - 1), 'next:' .. member)
        end
      end
    end
    return granted
  end


  -- Hands the name over to the waiters at the head of its queue (expired entries dropped
  -- first) that fit beside its holders (`s`, or read now when nil): they leave the queue and
  -- are granted their hold for `claim_ms` each, and each one's wake channel gets
  -- "grant:<token>:<server ms of the grant>:<claim_ms>:<member>" (the window is the caller's
  -- setting, which the waiter may not share). Then the next two waiters get "next:<member>":
  -- they look again once the grants may have expired unclaimed, which is how a dead waiter
  -- is skipped. With nobody queued and `freed` (a hold was freed), every waiter is woken on
  -- the name's channel instead. Returns how many waiters were granted.
  function M.pass_on(claim_ms, freed, s)
    local head = redis.call('ZRANGE', K_QUEUE, 0, 0)[1]
    if not head then
      return wake_unqueued(freed)
    end
    return M.hand_over(head, claim_ms, freed, s)
  end

  made = M
  return M
end
