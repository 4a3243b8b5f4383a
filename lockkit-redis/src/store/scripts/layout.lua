-- The keys every script of the wait queue takes, in this order (see keys.rs); this file is
-- put in front of queue.lua:
--   [1] the mutex record (a string: the holder's owner id, the lease as its TTL),
--   [2] the fence counter, [3] the void marker of the acquisition (any key of the name in
--   scripts that void nothing), [4] the wait queue, [5] its entries' expiry times, [6] the
--   name's channel, [7] the marker of the other kinds (a string that lives at least as long
--   as any writer, reader, permit or waiter of a kind other than the mutex), [8] the writer
--   record of the read-write lock (a string, like the mutex record), [9] its readers and
--   [10] the semaphore's permit holders (sorted sets of owner ids scored by the server time
--   in ms at which each hold expires), [11] the tokens of readers and permit holders (a hash:
--   owner id -> token), [12] the semaphore's permit count (a string, kept while the
--   semaphore is in use), [13] the journal of an election (a capped stream of its terms and
--   vacancies; its name is also the channel its changes are published on).
--
-- The mutex's acquire and release scripts take the first seven only (SHORT) while the name is
-- used by mutexes alone: every key is a string Lua makes at each call, and the mutex's paths
-- need no other. When they find the marker of the other kinds, they change nothing and
-- return -3, and the caller sends them again with all twelve.
local K_RECORD, K_FENCE, K_VOID, K_QUEUE, K_EXPIRY, K_CHANNEL = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_KINDS, K_WRITER, K_READERS, K_PERMITS, K_TOKENS, K_COUNT = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local K_TERMS = KEYS[13]
local SHORT = #KEYS == 7
-- How long the fence counter outlives a grant, in ms, for the scripts that are told (the
-- acquire script sets it from its arguments; see next_token in queue.lua).
local FENCE_TTL

-- The keys in the order above, for queue.lua's machinery (which reads them from here rather
-- than closing over the locals above: a closure costs an object per captured local at every
-- call of a script).
local function layout()
  return KEYS
end
