-- The contended path of a permit's acquire script (ARGV[8] 'p', ARGV[3] '1': it waits in the
-- queue), before the queue's functions are made: the semaphore has this count (ARGV[9]) and
-- every permit is held, live, by others, no other kind holds the name and the acquisition was
-- not abandoned. Nothing fits, so nothing is handed over either: the try joins the queue (or
-- refreshes its entry) and is refused, as the whole script below would do, in thirteen calls
-- (EXISTS, GET, ZCARD, ZSCORE, TIME, ZRANGE of the first holder, the entry's two ZADD and two
-- PEXPIRE, the PTTL of the marker of the other kinds and of the count, and the fence's GET)
-- and none of the queue's functions. Expired queue entries stay for the next hand-over,
-- which drops them. Anything else (a permit free or expired, this owner a holder already,
-- another kind, a void marker) falls through, having changed nothing, to the whole script.
if ARGV[8] == 'p' and ARGV[3] == '1' and not SHORT
    and redis.call('EXISTS', K_RECORD, K_WRITER, K_READERS, K_VOID) == 0 then
  local total = tonumber(redis.call('GET', K_COUNT))
  if total and total == tonumber(ARGV[9]) and redis.call('ZCARD', K_PERMITS) >= total
      and not redis.call('ZSCORE', K_PERMITS, ARGV[1]) then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local first = redis.call('ZRANGE', K_PERMITS, 0, 0, 'WITHSCORES')
    local left = first[2] and tonumber(first[2]) - now
    if left and left > 0 then
      -- As join() and refuse() in acquire.lua.
      local ttl = tonumber(ARGV[4])
      redis.call('ZADD', K_QUEUE, 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[6])
      redis.call('ZADD', K_EXPIRY, now + ttl, ARGV[6])
      redis.call('PEXPIRE', K_QUEUE, ttl)
      redis.call('PEXPIRE', K_EXPIRY, ttl)
      if redis.call('PTTL', K_KINDS) < ttl then
        redis.call('SET', K_KINDS, '1', 'PX', ttl * 2)
      end
      if redis.call('PTTL', K_COUNT) < ttl then
        redis.call('PEXPIRE', K_COUNT, ttl * 2)
      end
      local fence = tonumber(redis.call('GET', K_FENCE))
      if not fence then
        -- The counter expired: every token issued before is below the server's clock in µs.
        fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
      end
      return {0, left, fence, now}
    end
  end
end
