-- The fence check in front of every fenced script (lockkit-fence).
-- KEYS[1]: the resource's fence key, a hash {lock, highest} in the resource's hash slot.
-- ARGV[1]: the lock's identity (STORE#NAME); ARGV[2]: the token, in decimal without leading
-- zeros; ARGV[3]: 'write' or 'read'. The script's own keys and arguments follow.
-- Tokens are compared as decimal strings (length, then digits): Lua's numbers are doubles,
-- which cannot hold every 64-bit token.
local fence_key, fence_lock, fence_token, fence_mode = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local fence = redis.call('HMGET', fence_key, 'lock', 'highest')
if fence[1] then
    if fence[1] ~= fence_lock then
        return redis.error_reply('LOCKKIT_FOREIGN ' .. fence[1])
    end
    local highest = fence[2] or '0'
    if #fence_token < #highest or (#fence_token == #highest and fence_token < highest) then
        return redis.error_reply('LOCKKIT_STALE ' .. highest)
    end
end
-- Called after the write succeeded: a write raises the highest and binds the resource to its
-- lock; a read records nothing.
local function fence_raise()
    if fence_mode == 'write' and (fence[1] ~= fence_lock or fence[2] ~= fence_token) then
        redis.call('HSET', fence_key, 'lock', fence_lock, 'highest', fence_token)
    end
end
