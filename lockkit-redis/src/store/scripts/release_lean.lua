-- The lean path of the release script: a mutex (no kind argument) released by its owner
-- while nobody waits and no other kind uses the name: GET, EXISTS, DEL, PUBLISH (which wakes
-- the waiters of an unfair lock), before the queue's functions are made. Anything else falls
-- through, having changed nothing, to the whole script below.
if ARGV[3] == nil and redis.call('GET', K_RECORD) == ARGV[1] and redis.call('EXISTS', K_QUEUE, K_KINDS) == 0 then
  redis.call('DEL', K_RECORD)
  redis.call('PUBLISH', K_CHANNEL, '')
  return 1
end
