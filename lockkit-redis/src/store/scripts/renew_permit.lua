-- Extends the permit of owner ARGV[1] to ARGV[2] ms: its entry in the permit holders KEYS[1]
-- (whose tokens are in KEYS[2], and the semaphore's permit count in KEYS[3]), which a holder
-- whose lease ran out no longer has; and the marker of the other kinds KEYS[4] (see
-- layout.lua) with it. A lease of 0 only checks. (renew_shared.lua comes first.)
-- Returns 1 when renewed, 0 when the permit is gone.
local owner, lease = ARGV[1], tonumber(ARGV[2])
return renew_shared(KEYS[1], KEYS[2], owner, lease, {KEYS[1], KEYS[2], KEYS[3]}, KEYS[4]) or 0
