-- Extends lock KEYS[1] to ARGV[2] ms if owner ARGV[1] holds it, and its fence counter KEYS[2]
-- (whose value is the holder's token) to ARGV[3] ms.
-- Returns 1 when renewed, 0 when the record is gone, -1 when another owner holds it.
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[2] and ARGV[3] then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  return 1
elseif owner then
  return -1
end
return 0
