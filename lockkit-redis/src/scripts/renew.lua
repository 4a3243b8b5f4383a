-- Extends lock KEYS[1] to ARGV[2] ms if owner ARGV[1] holds it.
-- Returns 1 when renewed, 0 when the record is gone, -1 when another owner holds it.
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif owner then
  return -1
end
return 0
