-- Renews many mutex holds in one call (one server only: the keys span hash slots), each as
-- renew.lua does. KEYS[2i-1] is hold i's lock record, KEYS[2i] its fence counter; ARGV[1] is
-- the lease in ms, ARGV[2] how long the fence counter is kept in ms, ARGV[i+2] hold i's owner.
-- Returns one code per hold, in order: 1 renewed, 0 the record is gone, -1 another owns it.
local lease, keep = ARGV[1], ARGV[2]
local codes = {}
for i = 1, #ARGV - 2 do
  local record = KEYS[2 * i - 1]
  local owner = redis.call('GET', record)
  if owner == ARGV[i + 2] then
    redis.call('PEXPIRE', record, lease)
    redis.call('PEXPIRE', KEYS[2 * i], keep)
    codes[i] = 1
  elseif owner then
    codes[i] = -1
  else
    codes[i] = 0
  end
end
return codes
