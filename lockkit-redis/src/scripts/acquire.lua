-- Grants lock KEYS[1] to owner ARGV[1] for ARGV[2] ms.
-- KEYS: [1] the lock record, [2] its fence counter, [3] the void marker of this acquisition,
--       [4] the wait queue (owner ids scored by arrival, in microseconds of server time),
--       [5] the queue entries' expiry times (owner ids scored by milliseconds of server time).
-- ARGV: [1] the owner id, [2] the lease in ms, [3] '1' when this acquisition waits in the
--       queue of a fair lock (it joins the queue, or refreshes its entry, whenever it is not
--       granted), '0' otherwise, [4] how long a queue entry lives without a refresh (ms),
--       [5] how long the head of the queue has to claim the lock once it is free (ms).
-- Returns {1, token} when granted, {-1, 0} when this acquisition was abandoned and must not
-- be granted any more, and {0, ms} otherwise, ms being how long the holder's lease, or the
-- head's claim window, lasts at most.
--
-- While the queue has entries, a free lock belongs to its head: nobody else may take it.
-- Entries of waiters that stopped refreshing them (their process died) expire; the head
-- whose claim window closed is dropped and the next one's window opens. The uncontended
-- path makes four calls (EXISTS, SET, EXISTS, INCR).

local owner = ARGV[1]
local joins = ARGV[3] == '1'
local now_ms

local function clock()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end

-- Joins the queue at its back, or keeps the place already held, and (re)starts the entry's
-- expiry. The queue keys themselves expire with the last entry's lifetime, so that entries
-- of dead waiters on a lock nobody asks for again do not stay forever.
local function join()
  local t = redis.call('TIME')
  local ttl = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[4], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), owner)
  redis.call('ZADD', KEYS[5], clock() + ttl, owner)
  redis.call('PEXPIRE', KEYS[4], ttl)
  redis.call('PEXPIRE', KEYS[5], ttl)
end

local function leave()
  redis.call('ZREM', KEYS[4], owner)
  redis.call('ZREM', KEYS[5], owner)
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
  local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', clock(), 'LIMIT', 0, 100)
  if #expired > 0 then
    redis.call('ZREM', KEYS[4], unpack(expired))
    redis.call('ZREM', KEYS[5], unpack(expired))
  end
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if head and head ~= owner then
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
    -- Free, and the head's to take: open its claim window (or keep the one already open).
    redis.call('ZADD', KEYS[5], 'XX', 'LT', clock() + tonumber(ARGV[5]), head)
    return {0, math.max(0, tonumber(redis.call('ZSCORE', KEYS[5], head)) - clock())}
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
