-- The contended path of a permit's release script (ARGV[3] 'p'), before the queue's functions
-- are made: waiters are queued, the first of them a permit waiter, none of the queue's
-- entries expired, every permit held and live (the owner's among them), and no other kind
-- holds the name. The freed permit goes to the head as machinery().hand_over would give it:
-- the head leaves the queue and holds the permit for the claim window ARGV[2], its wake
-- channel gets "grant:<token>:<server ms>:<claim_ms>:<member>" and the next two waiters
-- "next:<member>". Nothing else fits (one permit was freed), nothing is left to forget (the
-- queue and the holders stay), so the release takes its calls only and none of the queue's
-- functions. Anything else falls through, having changed nothing, to the whole script.
if ARGV[3] == 'p' and not SHORT then
  local head = redis.call('ZRANGE', K_QUEUE, 0, 0)[1]
  local cut = head and string.find(head, '\n', 1, true)
  local second = cut and string.find(head, '\n', cut + 1, true)
  if second and string.sub(head, cut + 1, cut + 1) == 'p'
      and redis.call('EXISTS', K_RECORD, K_WRITER, K_READERS) == 0 then
    local score = redis.call('ZSCORE', K_PERMITS, ARGV[1])
    local t = redis.call('TIME')
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local now = math.floor(now_us / 1000)
    local first = score and tonumber(score) > now and redis.call('ZRANGE', K_PERMITS, 0, 0, 'WITHSCORES')
    if first and tonumber(first[2]) > now
        and #redis.call('ZRANGEBYSCORE', K_EXPIRY, '-inf', now, 'LIMIT', 0, 1) == 0
        and redis.call('ZCARD', K_PERMITS) == tonumber(redis.call('GET', K_COUNT)) then
      local claim_ms = tonumber(ARGV[2])
      local owner = string.sub(head, second + 1)
      redis.call('ZREM', K_PERMITS, ARGV[1])
      redis.call('HDEL', K_TOKENS, ARGV[1])
      redis.call('ZREM', K_QUEUE, head)
      redis.call('ZREM', K_EXPIRY, head)
      -- As next_token: the counter keeps its expiry (the head's confirmation extends it).
      local token = raise_fence(K_FENCE, now_us, nil)
      redis.call('ZADD', K_PERMITS, string.format('%d', now + claim_ms), owner)
      redis.call('HSET', K_TOKENS, owner, string.format('%d', token))
      -- As keep_for and mark_kinds: the holders' keys outlive the grant.
      for _, key in ipairs({K_PERMITS, K_TOKENS, K_COUNT}) do
        if redis.call('PTTL', key) < claim_ms then
          redis.call('PEXPIRE', key, claim_ms * 2)
        end
      end
      if redis.call('PTTL', K_KINDS) < claim_ms then
        redis.call('SET', K_KINDS, '1', 'PX', claim_ms * 2)
      end
      redis.call('PUBLISH', string.sub(head, 1, cut - 1),
        string.format('grant:%d:%d:%d:', token, now, claim_ms) .. head)
      for _, member in ipairs(redis.call('ZRANGE', K_QUEUE, 0, 1)) do
        local at = string.find(member, '\n', 1, true)
        if at then
          redis.call('PUBLISH', string.sub(member, 1, at - 1), 'next:' .. member)
        end
      end
      return 1
    end
  end
end
