-- Grants lock KEYS[1] to owner ARGV[1] for ARGV[2] ms.
-- KEYS: [1] the lock record, [2] its fence counter, [3] the void marker of this acquisition.
-- Returns {1, token} when granted, {0, pttl} while another owner holds the lock,
-- and {-1, 0} when this acquisition was abandoned and must not be granted any more.
-- The common paths make three calls (grant: SET, EXISTS, INCR; contention: SET, GET, PTTL).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    -- A delayed try of an abandoned acquisition: undo, grant nothing.
    redis.call('DEL', KEYS[1])
    return {-1, 0}
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
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- An earlier try of this very acquisition was granted and its reply lost. The hold is
  -- ours, so nobody can have incremented the counter since: its value is our token.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
return {0, redis.call('PTTL', KEYS[1])}
