-- Grants lock KEYS[1] to owner ARGV[1] for ARGV[2] ms.
-- KEYS: [1] the lock record, [2] its fence counter, [3] the void marker of this acquisition,
--       [4] the wait queue, [5] its entries' expiry times (see queue.lua), [6] the lock's
--       channel.
-- ARGV: [1] the owner id, [2] the lease in ms, [3] '1' when this acquisition waits in the
--       queue of a fair lock (it joins the queue, or refreshes its entry, whenever it is not
--       granted), '0' otherwise, [4] how long a queue entry lives without a refresh (ms),
--       [5] how long the head of the queue has to claim the lock once it is free (ms),
--       [6] this acquisition's queue member.
-- Returns {1, token} when granted, {-1, 0} when this acquisition was abandoned and must not
-- be granted any more, and {0, ms} otherwise, ms being how long the holder's lease, or the
-- head's claim window, lasts at most.
--
-- While the queue has entries, a free lock belongs to its head: nobody else may take it.
-- The uncontended path makes four calls (EXISTS, SET, EXISTS, INCR).

local owner, member = ARGV[1], ARGV[6]
local joins = ARGV[3] == '1'

-- Joins the queue at its back, or keeps the place already held, and (re)starts the entry's
-- expiry. The queue keys themselves expire with the last entry's lifetime, so that entries
-- of dead waiters on a lock nobody asks for again do not stay forever.
local function join()
  local t = redis.call('TIME')
  local ttl = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[4], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), member)
  redis.call('ZADD', KEYS[5], now_ms() + ttl, member)
  redis.call('PEXPIRE', KEYS[4], ttl)
  redis.call('PEXPIRE', KEYS[5], ttl)
end

local function leave()
  redis.call('ZREM', KEYS[4], member)
  redis.call('ZREM', KEYS[5], member)
end

-- An earlier try of this very acquisition was granted and its reply lost. The hold is ours,
-- so nobody can have incremented the counter since: its value is our token.
local function regrant()
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  leave()
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end

local queued = redis.call('EXISTS', KEYS[4]) == 1
if queued then
  local now = now_ms()
  local pruned = prune(KEYS[4], KEYS[5], now)
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if head and head ~= member then
    local holder = redis.call('GET', KEYS[1])
    if holder == owner then
      return regrant()
    end
    if joins then
      join()
    end
    if holder then
      return {0, redis.call('PTTL', KEYS[1])}
    end
    if pruned > 0 then
      -- The head changed under a free lock (its predecessor's window closed): its turn.
      wake_queue(KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[5]))
    else
      -- Free, and the head's to take: open its claim window (or keep the one already open).
      open_window(KEYS[5], head, now + tonumber(ARGV[5]))
    end
    return {0, math.max(0, tonumber(redis.call('ZSCORE', KEYS[5], head)) - now)}
  end
  queued = head ~= nil
end

if redis.call('SET', KEYS[1], owner, 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    -- A delayed try of an abandoned acquisition: undo, grant nothing.
    redis.call('DEL', KEYS[1])
    return {-1, 0}
  end
  if queued then
    leave()
  end
  local token = redis.call('INCR', KEYS[2])
  if token == 1 then
    -- A new counter (a new lock, or a server restarted without persistence) starts from
    -- the server clock in microseconds, so tokens keep increasing across such a restart
    -- as long as the server clock does not step back: no lock is granted twice in one
    -- microsecond.
    local now = redis.call('TIME')
    redis.call('SET', KEYS[2], now[1] .. string.rep('0', 6 - #now[2]) .. now[2])
    token = redis.call('INCR', KEYS[2])
  end
  return {1, token}
end
if redis.call('GET', KEYS[1]) == owner then
  return regrant()
end
if joins then
  join()
end
return {0, redis.call('PTTL', KEYS[1])}
