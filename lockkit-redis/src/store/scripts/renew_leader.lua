-- Extends the leadership of owner ARGV[1] to ARGV[2] ms (keys: see layout.lua; a lease of 0
-- only checks). When the leader's record is gone, the vacancy goes in the election's journal
-- (once, whoever notices it first), and the waiters at the head of the queue are handed the
-- leadership at once, for a claim window of ARGV[3] ms, as a try would. The fence counter
-- (whose value is the leader's term) is kept for ARGV[4] ms.
-- Returns 1 when renewed, 0 when the record is gone, -1 when another owner holds it.
local owner, lease = ARGV[1], tonumber(ARGV[2])
FENCE_TTL = ARGV[4]
local holder = redis.call('GET', K_RECORD)
if holder == owner then
  if lease > 0 then
    redis.call('PEXPIRE', K_RECORD, lease)
    if FENCE_TTL then
      redis.call('PEXPIRE', K_FENCE, FENCE_TTL)
    end
  end
  return 1
end
if machinery().note_vacancy() and not holder then
  machinery().pass_on(tonumber(ARGV[3]) or 200, true, nil)
end
if holder then
  return -1
end
return 0
