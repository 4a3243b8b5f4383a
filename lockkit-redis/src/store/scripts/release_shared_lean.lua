-- The lean path of the release script for a reader (ARGV[3] 'r') or a permit holder ('p')
-- while nobody waits and no other kind holds the name (a writer; readers for a permit,
-- permit holders and a count for a reader), before the queue's functions are made: ZSCORE of
-- the owner and ZCARD of its kind's holders (cheaper together than a ZRANGE of the first two
-- with their scores); when the owner is the only one, one DEL of everything of its kind (its
-- set, the tokens, the marker of the other kinds, the permit count); otherwise ZREM, HDEL
-- (the holders that stay keep the rest alive); then PUBLISH (which wakes the waiters of an
-- unfair lock) and TIME, to say whether the hold was still live. An owner that holds nothing
-- falls through, having changed nothing, to the whole script below.
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
    if redis.call('ZCARD', set) == 1 then
      -- The last holder: its set, the tokens hash (which holds the tokens of this kind's
      -- holders only: the other kind has none, as the EXISTS above said), the marker of the
      -- other kinds and the permit count go in one DEL.
      if ARGV[3] == 'p' then
        redis.call('DEL', set, K_TOKENS, K_KINDS, K_COUNT)
      else
        redis.call('DEL', set, K_TOKENS, K_KINDS)
      end
    else
      redis.call('ZREM', set, ARGV[1])
      redis.call('HDEL', K_TOKENS, ARGV[1])
    end
    redis.call('PUBLISH', K_CHANNEL, '')
    local t = redis.call('TIME')
    if tonumber(score) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
      return 1
    end
    return 0
  end
end
