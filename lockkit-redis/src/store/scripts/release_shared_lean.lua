-- The lean path of the release script for a reader (ARGV[3] 'r') or a permit holder ('p')
-- while nobody waits and no other kind holds the name (a writer; readers for a permit,
-- permit holders and a count for a reader): ZSCORE, ZREM, HDEL, PUBLISH (which wakes the
-- waiters of an unfair lock), the marker of the other kinds (and the permit count) dropped
-- with the last holder, and TIME to say whether the hold was still live, before the queue's
-- functions are made. An owner that holds nothing falls through, having changed nothing, to
-- the whole script below.
if (ARGV[3] == 'r' or ARGV[3] == 'p') and not SHORT then
  local set, out
  if ARGV[3] == 'r' then
    set = K_READERS
    out = redis.call('EXISTS', K_QUEUE, K_WRITER, K_PERMITS, K_COUNT)
  else
    set = K_PERMITS
    out = redis.call('EXISTS', K_QUEUE, K_WRITER, K_READERS)
  end
  local score = out == 0 and redis.call('ZSCORE', set, ARGV[1])
  if score then
    redis.call('ZREM', set, ARGV[1])
    redis.call('HDEL', K_TOKENS, ARGV[1])
    redis.call('PUBLISH', K_CHANNEL, '')
    if redis.call('EXISTS', set) == 0 then
      if ARGV[3] == 'p' then
        redis.call('DEL', K_KINDS, K_COUNT)
      else
        redis.call('DEL', K_KINDS)
      end
    end
    local t = redis.call('TIME')
    if tonumber(score) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
      return 1
    end
    return 0
  end
end
