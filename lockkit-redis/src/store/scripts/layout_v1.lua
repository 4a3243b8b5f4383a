-- The keys of the mutex scripts as versions before read-write locks and semaphores took
-- them, for the copies of the acquire and release scripts exported to benchmarks that time
-- them raw (lockkit-cli's floor): acquire took six keys (record, fence, void marker, queue,
-- its expiry times, channel), release five (record, fence, queue, its expiry times,
-- channel). The marker of the other kinds (see layout.lua) is made from the record's name,
-- which a standalone server allows (not Redis Cluster, where every key must be declared);
-- the scripts then run the mutex's short paths, as the provider's do with seven keys.
local K_RECORD, K_FENCE, K_VOID, K_QUEUE, K_EXPIRY, K_CHANNEL
if #KEYS == 5 then
  K_RECORD, K_FENCE, K_VOID, K_QUEUE, K_EXPIRY, K_CHANNEL = KEYS[1], KEYS[2], KEYS[1], KEYS[3], KEYS[4], KEYS[5]
else
  K_RECORD, K_FENCE, K_VOID, K_QUEUE, K_EXPIRY, K_CHANNEL = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
end
local K_KINDS = K_RECORD .. ':kinds'
local K_WRITER, K_READERS, K_PERMITS, K_TOKENS, K_COUNT
local SHORT = true
local FENCE_TTL

-- The keys in the order of layout.lua, for queue.lua's machinery.
local function layout()
  return {K_RECORD, K_FENCE, K_VOID, K_QUEUE, K_EXPIRY, K_CHANNEL, K_KINDS}
end
