-- Frees the hold of owner ARGV[1], of kind ARGV[3] ('x' mutex; 'c' a leader; 'r' or 'w' read-write lock,
-- whose hold may be a write or, after a downgrade, a read; 'p' permit), and hands what it
-- freed over to the waiters at the head of the queue with a claim window of ARGV[2] ms, or
-- wakes every waiter on the name's channel when nobody is queued (keys: see layout.lua).
-- Returns 1 when released, 0 when the hold is gone (its record deleted, or its lease run
-- out), -1 when another owner holds the lock, and -3, having changed nothing, when a mutex
-- was released with the short layout (see layout.lua) while other kinds use the name and
-- waiters are queued.
local owner, claim_ms, kind = ARGV[1], tonumber(ARGV[2]), ARGV[3] or 'x'

if kind == 'c' then
  -- A leader resigns: the vacancy goes in the election's journal before the next candidate's
  -- term (a hand-over writes it).
  local holder = redis.call('GET', K_RECORD)
  if holder == owner then
    redis.call('DEL', K_RECORD)
    machinery().note_vacancy()
    machinery().pass_on(claim_ms, true, nil)
    machinery().forget_kinds()
    return 1
  end
  machinery().note_vacancy()
  if holder then
    return -1
  end
  return 0
end

if kind == 'x' then
  local holder = redis.call('GET', K_RECORD)
  if holder == owner then
    -- Nobody queued (the uncontended path: GET, EXISTS, DEL, PUBLISH), mutex waiters only,
    -- or waiters of any kind, whose hand-over needs all the keys.
    local found = redis.call('EXISTS', K_QUEUE, K_KINDS)
    if found == 2 and SHORT then
      -- Waiters queued, and other kinds use the name: ask for all the keys (nothing was
      -- changed).
      return -3
    end
    -- One of the two: the queue's first members tell which.
    local first = found == 1 and redis.call('ZRANGE', K_QUEUE, 0, 2)
    redis.call('DEL', K_RECORD)
    if found == 2 then
      machinery().pass_on(claim_ms, true, nil)
    elseif first and #first > 0 then
      pass_on_mutex(K_RECORD, K_FENCE, K_QUEUE, K_EXPIRY, K_CHANNEL, claim_ms, first)
    else
      redis.call('PUBLISH', K_CHANNEL, '')
    end
    return 1
  elseif holder then
    return -1
  end
  return 0
end

-- Removes a reader or permit holder from `set`: nil when it is not there, 1 when its hold
-- was live, 0 when its lease had run out already.
local function leave_shared(set)
  local score = redis.call('ZSCORE', set, owner)
  if not score then
    return nil
  end
  redis.call('ZREM', set, owner)
  redis.call('HDEL', K_TOKENS, owner)
  local live = tonumber(score) > now_ms()
  machinery().pass_on(claim_ms, true, nil)
  if live then
    return 1
  end
  return 0
end

if kind == 'p' then
  local released = leave_shared(K_PERMITS) or 0
  machinery().forget_count()
  machinery().forget_kinds()
  return released
end

local writer = redis.call('GET', K_WRITER)
if writer == owner then
  redis.call('DEL', K_WRITER)
  machinery().pass_on(claim_ms, true, nil)
  machinery().forget_kinds()
  return 1
end
local released = leave_shared(K_READERS)
if released then
  machinery().forget_kinds()
  return released
end
if writer or redis.call('EXISTS', K_RECORD) == 1 then
  return -1
end
return 0
