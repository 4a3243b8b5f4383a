-- The lean paths of the acquire script for a reader (ARGV[8] 'r') and a permit (ARGV[8] 'p',
-- ARGV[9] the permit count), before the queue's functions are made: nobody queued, no
-- holder that excludes this kind, the acquisition not abandoned, no expired holder to purge
-- and this owner not holding already (ZADD NX). They grant as machinery().grant does, with
-- one TIME for the holder's expiry and its token; the holders' set, the tokens and the
-- marker of the other kinds (and the permit count) are made to live 2 × the lease as
-- keep_for and mark_kinds do: unconditionally when the set was empty (nothing else lives
-- in them that they must outlive; the first holder's grant is EXISTS, TIME, ZADD, the
-- fence's SET, HSET, two PEXPIRE and the marker's SET), after a ZRANGE of the first holder
-- and a PTTL of each otherwise. Anything else falls through, having changed nothing, to the
-- whole script below.
local SHARED_KIND = ARGV[8]
if (SHARED_KIND == 'r' or SHARED_KIND == 'p') and not SHORT then
  -- Who keeps this kind out: the mutex, a writer, and readers for a permit, permit holders
  -- and a semaphore's count (the name is in use as a semaphore) for a reader; asked with the
  -- holders' set itself, so that one EXISTS says whether the set is fresh too: 0, nothing in
  -- the way and nobody holds; 1, either the set alone (the ZRANGE below finds a holder) or
  -- something in the way (it finds none, and this falls through).
  local set, out
  if SHARED_KIND == 'r' then
    set = K_READERS
    out = redis.call('EXISTS', K_READERS, K_RECORD, K_WRITER, K_PERMITS, K_COUNT, K_QUEUE, K_VOID)
  else
    set = K_PERMITS
    out = redis.call('EXISTS', K_PERMITS, K_RECORD, K_WRITER, K_READERS, K_QUEUE, K_VOID)
  end
  local fresh = out == 0
  if fresh or out == 1 then
    local t = redis.call('TIME')
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local now = math.floor(now_us / 1000)
    local lease = tonumber(ARGV[2])
    local room = fresh
    if not fresh then
      local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
      room = first[2] ~= nil and tonumber(first[2]) > now
      if room and SHARED_KIND == 'p' then
        -- Live permit holders only: one more fits when the semaphore has this count and a
        -- permit is free.
        local total = tonumber(redis.call('GET', K_COUNT))
        room = total == tonumber(ARGV[9]) and redis.call('ZCARD', K_PERMITS) < total
      end
    end
    if room and redis.call('ZADD', set, 'NX', string.format('%d', now + lease), ARGV[1]) == 1 then
      local token, text = raise_fence(K_FENCE, now_us, ARGV[7])
      redis.call('HSET', K_TOKENS, ARGV[1], text)
      -- The keys of this kind live 2 × the lease, `keep` ms: a string made once (a number is
      -- made into one by the server at each call that takes it).
      local keep = string.format('%d', lease * 2)
      if fresh then
        redis.call('PEXPIRE', set, keep)
        redis.call('PEXPIRE', K_TOKENS, keep)
        redis.call('SET', K_KINDS, '1', 'PX', keep)
        if SHARED_KIND == 'p' then
          redis.call('SET', K_COUNT, ARGV[9], 'PX', keep)
        end
      else
        for _, key in ipairs({set, K_TOKENS, SHARED_KIND == 'p' and K_COUNT or nil}) do
          if redis.call('PTTL', key) < lease then
            redis.call('PEXPIRE', key, keep)
          end
        end
        if redis.call('PTTL', K_KINDS) < lease then
          redis.call('SET', K_KINDS, '1', 'PX', keep)
        end
      end
      return token
    end
  end
end
