-- Reads an election for an observer (keys: see layout.lua), after writing in its journal the
-- vacancy of a leader whose record is gone (expired, deleted) if nobody wrote it yet: every
-- observer then sees the same vacancy, with the term that ended.
-- ARGV: [1] the id of the last journal entry the observer has seen ('' for none yet),
-- [2] the claim window of a hand-over (ms): when the leader's record is found gone, the
-- waiters at the head of the queue are handed what is free at once, as a try would.
-- Returns {status, last id, ms the leader's record lives, leader owner, term, since,
-- entries...}: status 0 when the entries after ARGV[1] follow (five fields each: id, kind
-- 'e' or 'v', term, owner, since; '' when none), with the last id of them (ARGV[1] when none);
-- status 1 for the current state instead (the first read, or a gap: the entry ARGV[1] is no
-- longer in the journal, trimmed or gone), the leader's owner ('' when nobody leads), its
-- term and since (0 when unknown), with the id of the journal's last entry ('' when none).
-- The ms the leader's record lives is -2 when nobody leads.
local M = machinery()
if M.note_vacancy() and redis.call('EXISTS', K_RECORD) == 0 then
  M.pass_on(tonumber(ARGV[2]), true, nil)
end
local since_id = ARGV[1]
local last = M.last_entry()
local pttl = -2
if last and last.k == 'e' and redis.call('GET', K_RECORD) == last.o then
  pttl = redis.call('PTTL', K_RECORD)
end
-- ('0-0': the journal was empty when last read, so every entry is new.)
local gap = since_id == '' or (since_id ~= '0-0' and #redis.call('XRANGE', K_TERMS, since_id, since_id) == 0)
if gap then
  local out = {1, (last and last.id) or '', pttl, '', 0, 0}
  if pttl ~= -2 then
    out[4], out[5], out[6] = last.o, tonumber(last.t), tonumber(last.s)
  else
    -- No leader in the journal; one may still hold (its journal deleted by hand).
    local record = redis.call('GET', K_RECORD)
    if record and string.find(record, ' c:', 1, true) then
      out[3], out[4], out[5] = redis.call('PTTL', K_RECORD), record, tonumber(redis.call('GET', K_FENCE) or '0')
    end
  end
  return out
end
local out = {0, since_id, pttl, '', 0, 0}
local entries = redis.call('XRANGE', K_TERMS, '(' .. since_id, '+', 'COUNT', 500)
for _, entry in ipairs(entries) do
  local f = {}
  for i = 1, #entry[2], 2 do
    f[entry[2][i]] = entry[2][i + 1]
  end
  out[#out + 1] = entry[1]
  out[#out + 1] = f.k or ''
  out[#out + 1] = tonumber(f.t or '0')
  out[#out + 1] = f.o or ''
  out[#out + 1] = tonumber(f.s or '0')
  out[2] = entry[1]
end
return out
