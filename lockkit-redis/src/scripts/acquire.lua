-- Grants lock KEYS[1] to owner ARGV[1] for ARGV[2] ms.
-- KEYS: [1] the lock record, [2] its fence counter, [3] the void marker of this acquisition,
--       [4] the wait queue, [5] its entries' expiry times (see queue.lua), [6] the lock's
--       channel.
-- ARGV: [1] the owner id, [2] the lease in ms, [3] '1' when this acquisition waits in the
--       queue of a fair lock (it joins the queue, or refreshes its entry, whenever it is not
--       granted), '0' otherwise, [4] how long a queue entry lives without a refresh (ms),
--       [5] how long a hand-over to the head of the queue lasts unless confirmed (ms),
--       [6] this acquisition's queue member.
-- Returns {1, token, 0, 0} when granted; {-1, 0, 0, 0} when this acquisition was abandoned
-- and must not be granted any more; and {0, ms, fence, now} otherwise, ms being how long the
-- holder's lease lasts at most, and, for a queued acquisition, fence the fence counter's
-- value and now the server time in ms: a hand-over that reaches the waiter later with a
-- greater token was made after this reply, and the time between the two is known in server
-- time (see lock.rs).
--
-- While the queue has entries, a free lock belongs to its head: nobody else may take it.
-- The uncontended path makes four calls (EXISTS, SET, EXISTS, INCR).

local owner, member = ARGV[1], ARGV[6]
local joins = ARGV[3] == '1'

-- Joins the queue at its back, or keeps the place already held, and (re)starts the entry's
-- expiry. The queue keys themselves expire with the last entry's lifetime, so that entries
-- of dead waiters on a lock nobody asks for again do not stay forever. Returns false, and
-- joins nothing, when this acquisition was abandoned (a delayed try).
local function join()
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return false
  end
  local t = redis.call('TIME')
  local ttl = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[4], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), member)
  redis.call('ZADD', KEYS[5], now_ms() + ttl, member)
  redis.call('PEXPIRE', KEYS[4], ttl)
  redis.call('PEXPIRE', KEYS[5], ttl)
  return true
end

local function leave()
  redis.call('ZREM', KEYS[4], member)
  redis.call('ZREM', KEYS[5], member)
end

-- Not granted: joins (or stays in) the queue when this acquisition waits in it, and says
-- how long the current hold lasts at most.
local function refuse(left)
  if not joins then
    return {0, left, 0, 0}
  end
  if not join() then
    return {-1, 0, 0, 0}
  end
  return {0, left, tonumber(redis.call('GET', KEYS[2]) or '0'), now_ms()}
end

-- An earlier try of this very acquisition was granted and its reply lost, or the lock was
-- handed over to it. The hold is ours, so nobody can have incremented the counter since: its
-- value is our token.
local function regrant()
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  leave()
  return {1, tonumber(redis.call('GET', KEYS[2])), 0, 0}
end

local queued = redis.call('EXISTS', KEYS[4]) == 1
if queued then
  prune(KEYS[4], KEYS[5], now_ms())
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if head and head ~= member then
    local holder = redis.call('GET', KEYS[1])
    if holder == owner then
      return regrant()
    end
    if not holder then
      -- Free, and the head's: hand it over now (its holder's lease ran out, or a head before
      -- it let its hand-over expire). The head then holds it for a claim window at most.
      pass_on(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[5]))
    end
    return refuse(redis.call('PTTL', KEYS[1]))
  end
  queued = head ~= nil
end

if redis.call('SET', KEYS[1], owner, 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    -- A delayed try of an abandoned acquisition: undo, grant nothing.
    redis.call('DEL', KEYS[1])
    return {-1, 0, 0, 0}
  end
  if queued then
    leave()
  end
  return {1, next_token(KEYS[2]), 0, 0}
end
if redis.call('GET', KEYS[1]) == owner then
  return regrant()
end
return refuse(redis.call('PTTL', KEYS[1]))
