-- The lean path of the acquire script: a mutex (no kind argument) asking for a free lock that
-- nobody waits for and no other kind uses, and that was not abandoned. It runs before the
-- queue's functions are made (a Lua function is an object made at every call of a script),
-- and makes five calls: EXISTS of the queue, the marker of the other kinds and the void
-- marker in one, SET NX, then the fence counter's GET, TIME and SET with its retention
-- ARGV[7] (next_token in queue.lua, written out). Anything else (a queue, another kind, a holder, a void marker) falls
-- through, having changed nothing, to the whole script below, which decides in the same call.
if ARGV[8] == nil and redis.call('EXISTS', K_QUEUE, K_KINDS, K_VOID) == 0
    and redis.call('SET', K_RECORD, ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = (tonumber(redis.call('GET', K_FENCE)) or 0) + 1
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if now > token then
    token = now
  end
  redis.call('SET', K_FENCE, string.format('%d', token), 'PX', ARGV[7])
  return {1, token, 0, 0}
end
