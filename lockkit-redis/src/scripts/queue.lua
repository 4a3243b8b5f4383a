-- The wait queue of a fair lock, shared by the scripts that touch it (this file is put in
-- front of each of them). The queue is a sorted set of members scored by arrival (µs of
-- server time); a member is "<wake channel>\n<owner id>", the wake channel being the one
-- the waiter's provider listens on. A second sorted set scores each member by the server
-- time (ms) at which it expires: waiters refresh their entry at every try, and the head's
-- expiry is cut to its claim window once the lock is free for it.

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

-- Cuts the expiry of queue member `member` to `limit` (ms) unless it is earlier already:
-- opens the head's claim window, or keeps the one already open. (ZADD's LT flag would do it
-- in one call, from Redis 6.2 on.)
local function open_window(expiry, member, limit)
  local current = tonumber(redis.call('ZSCORE', expiry, member))
  if current and current > limit then
    redis.call('ZADD', expiry, 'XX', limit, member)
  end
end

-- The lock is free: opens the head's claim window and tells it that it is its turn, and
-- tells the next two that it is another's turn (they look again once the window may have
-- closed unclaimed, which is how a dead head is skipped). With nobody queued, wakes every
-- waiter on the lock's channel instead. Returns the head, if any.
local function wake_queue(queue, expiry, channel, claim_ms)
  local first = redis.call('ZRANGE', queue, 0, 2)
  if #first == 0 then
    redis.call('PUBLISH', channel, '')
    return nil
  end
  open_window(expiry, first[1], now_ms() + claim_ms)
  for i, member in ipairs(first) do
    local cut = string.find(member, '\n', 1, true)
    if cut then
      local kind = (i == 1) and 'turn:' or 'next:'
      redis.call('PUBLISH', string.sub(member, 1, cut - 1), kind .. member)
    end
  end
  return first[1]
end
