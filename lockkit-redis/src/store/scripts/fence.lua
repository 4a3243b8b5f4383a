-- Issues a fencing token from the fence counter `fence` (this file is put after the layout in
-- every script of the wait queue, so that its lean paths share it): `token` (the server time
-- in µs) unless the counter is already there or above, when it is the counter + 1; the
-- counter then holds it. The counter expires `ttl` ms later, or keeps its expiry when `ttl` is
-- nil. One SET, which replies with the counter's old value, and a second when the counter was
-- at or above the clock. Returns the token, and the token as the counter holds it (a string,
-- for the callers that write it elsewhere too).
local function raise_fence(fence, token, ttl)
  local text = string.format('%d', token)
  local last
  if ttl then
    last = tonumber(redis.call('SET', fence, text, 'PX', ttl, 'GET'))
  else
    last = tonumber(redis.call('SET', fence, text, 'KEEPTTL', 'GET'))
  end
  if last and last >= token then
    token = last + 1
    text = string.format('%d', token)
    if ttl then
      redis.call('SET', fence, text, 'PX', ttl)
    else
      redis.call('SET', fence, text, 'KEEPTTL')
    end
  end
  return token, text
end
