-- Functions shared by the scripts that grant a lock or touch its wait queue (this file is put
-- in front of each of them).
--
-- The wait queue of a fair lock is a sorted set of members scored by arrival (µs of server
-- time); a member is "<wake channel>\n<owner id>", the wake channel being the one the
-- waiter's provider listens on. A second sorted set scores each member by the server time
-- (ms) at which it expires: waiters refresh their entry at every try.
--
-- A free lock with waiters is handed over: the script that frees it (a release, or an
-- abandoned acquisition that was granted) grants it to the head of the queue at once, for a
-- claim window only, and tells the head so. A live head confirms the grant by extending it
-- to its lease; a dead head's grant expires with the window, and the next waiter's turn comes.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops expired entries (at most 100 per call); returns how many.
local function prune(queue, expiry, now)
  local expired = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then
    redis.call('ZREM', queue, unpack(expired))
    redis.call('ZREM', expiry, unpack(expired))
  end
  return #expired
end

-- Issues the next fencing token of a lock from its counter `fence`. A new counter (a new
-- lock, or a server restarted without persistence) starts from the server clock in
-- microseconds, so tokens keep increasing across such a restart as long as the server clock
-- does not step back: no lock is granted twice in one microsecond.
local function next_token(fence)
  local token = redis.call('INCR', fence)
  if token == 1 then
    local t = redis.call('TIME')
    redis.call('SET', fence, t[1] .. string.rep('0', 6 - #t[2]) .. t[2])
    token = redis.call('INCR', fence)
  end
  return token
end

-- The free lock `lock` goes to the head of its queue (expired entries dropped first): the
-- head leaves the queue and is granted the lock for `claim_ms`, and its wake channel gets
-- "grant:<token>:<server ms of the grant>:<claim_ms>:<member>" (the window is the
-- releaser's setting, which the head may not share). The next two waiters get
-- "next:<member>": they look again once the grant may have expired unclaimed, which is how a
-- dead head is skipped. With nobody queued, every waiter is woken on the lock's channel
-- instead. Returns the head, if any.
local function pass_on(lock, fence, queue, expiry, channel, claim_ms)
  local first = redis.call('ZRANGE', queue, 0, 2)
  if #first > 0 and prune(queue, expiry, now_ms()) > 0 then
    -- Skip the waiters whose entries expired (dead, or gone without a word).
    first = redis.call('ZRANGE', queue, 0, 2)
  end
  if #first == 0 then
    redis.call('PUBLISH', channel, '')
    return nil
  end
  for i, member in ipairs(first) do
    local cut = string.find(member, '\n', 1, true)
    if i == 1 then
      redis.call('ZREM', queue, member)
      redis.call('ZREM', expiry, member)
      if cut then
        redis.call('SET', lock, string.sub(member, cut + 1), 'PX', claim_ms)
        local token = next_token(fence)
        -- Formatted with %d: Lua's default number format keeps 14 digits, and tokens have 16.
        local note = string.format('grant:%d:%d:%d:', token, now_ms(), claim_ms)
        redis.call('PUBLISH', string.sub(member, 1, cut - 1), note .. member)
      end
    elseif cut then
      redis.call('PUBLISH', string.sub(member, 1, cut - 1), 'next:' .. member)
    end
  end
  return first[1]
end
