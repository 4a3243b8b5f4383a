-- Extends the hold of owner ARGV[1] on a read-write lock to ARGV[2] ms: its writer record
-- KEYS[1], or, after a downgrade, its entry in the readers KEYS[2] (whose tokens are in
-- KEYS[3]), which a reader whose lease ran out no longer has; and the marker of the other
-- kinds KEYS[4] (see layout.lua) with it; a writer's fence counter KEYS[5] (whose value is
-- its token) to ARGV[3] ms. A lease of 0 only checks. (renew_shared.lua comes first.)
-- Returns 1 when renewed, 0 when the hold is gone, -1 when another owner holds the lock.
local owner, lease = ARGV[1], tonumber(ARGV[2])

local writer = redis.call('GET', KEYS[1])
if writer == owner then
  if lease > 0 then
    redis.call('PEXPIRE', KEYS[1], lease)
    keep_marker(KEYS[4], lease)
    if KEYS[5] and ARGV[3] then
      redis.call('PEXPIRE', KEYS[5], ARGV[3])
    end
  end
  return 1
end
local reader = renew_shared(KEYS[2], KEYS[3], owner, lease, {KEYS[2], KEYS[3]}, KEYS[4])
if reader then
  return reader
end
if writer then
  return -1
end
return 0
