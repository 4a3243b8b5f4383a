-- The lean path of the acquire script: a mutex (no kind argument) asking for a free lock that
-- nobody waits for and no other kind uses, and that was not abandoned. It runs before the
-- queue's functions are made (a Lua function is an object made at every call of a script),
-- and makes four calls: EXISTS of the queue, the marker of the other kinds and the void
-- marker in one, SET NX, TIME, then the fence counter's SET with its retention ARGV[7] and
-- GET (raise_fence in fence.lua: the token is the server time in µs unless the counter is
-- already there or above, which takes a second SET). It replies with the token
-- alone, an integer (a table reply costs the server about 1 µs more). Anything else (a
-- queue, another kind, a holder, a void marker) falls through, having changed nothing, to
-- the whole script below, which decides in the same call.
if ARGV[8] == nil and redis.call('EXISTS', K_QUEUE, K_KINDS, K_VOID) == 0
    and redis.call('SET', K_RECORD, ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
  return (raise_fence(K_FENCE, tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[7]))
end
