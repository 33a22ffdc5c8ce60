-- ledger_read.lua: reads an account's ledger, both its forms (lib.lua's
-- ledger): the stream under its key and the short form's hash beside it,
-- merged by id: at most count entries from start to end as XRANGE takes
-- them ('-', '+', '<ms>', '<ms>-<seq>'; '(' before one: exclusive), oldest
-- first, or with rev newest first. An id in both (an older Easel's XADD
-- and a newer one's hash entry in one ms, during an upgrade) gives both
-- entries, the hash's first oldest first (last newest first), and a read
-- never ends between the two: it may give count + 1 entries then, so that
-- a cursor past the last id read skips neither. The account's first
-- entry, its initial credits, is in its record ('open': the credits;
-- its id '<ctime>-0') and read as the hash's, while within the
-- retention.
--
-- KEYS[1] -> ledger: the account's credit ledger
-- KEYS[2] -> account: the account's record
-- ARGV[1] -> start: the oldest bound
-- ARGV[2] -> end: the newest bound
-- ARGV[3] -> count: the most entries read
-- ARGV[4] -> rev: 1 for newest first
-- ARGV[5] -> now: Unix ms
-- ARGV[6] -> keep: the ledger's retention, ms (0: all)
-- ARGV[7] -> open_kind: the first entry's kind
-- ARGV[8] -> open_note: the first entry's note
--
-- Returns {READ, id, kind, amount, balance, task, note, ...}: a row an
-- entry, task and note '' when it has none.

local READ = 1

local ledger_key, account_key = KEYS[1], KEYS[2]
local short_key = ledger_key .. LEDGER_SHORT_PART
local start, stop, count, rev = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local now, keep, open_kind, open_note = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], ARGV[8]

local reply = {READ}
-- add puts an entry in the reply, from its id and its fields.
local function add(id, f)
  local v = {}
  for i = 1, #f, 2 do v[f[i]] = f[i + 1] end
  local n = #reply
  reply[n + 1], reply[n + 2], reply[n + 3] = id, v['kind'] or '', v['amount'] or ''
  reply[n + 4], reply[n + 5], reply[n + 6] = v['balance'] or '', v['task'] or '', v['note'] or ''
end

-- The stream's entries between the bounds, in the order read: one more
-- than count, to see whether the last one read shares its id with the
-- next.
local stream
if rev then
  stream = redis.call('XREVRANGE', ledger_key, stop, start, 'COUNT', count + 1)
else
  stream = redis.call('XRANGE', ledger_key, start, stop, 'COUNT', count + 1)
end

-- The hash's entries between the bounds. A bound is {ms, seq, exclusive};
-- nil for '-' and '+'; a bare ms is its first seq as a start, its last as
-- an end.
local function bound(b, first)
  if b == '-' or b == '+' then return nil end
  local excl = string.sub(b, 1, 1) == '('
  if excl then b = string.sub(b, 2) end
  local ms, seq = string.match(b, '^(%d+)-?(%d*)$')
  assert(ms, b)
  if seq == '' then
    if first then seq = 0 else seq = math.huge end
  end
  return {tonumber(ms), tonumber(seq), excl}
end
local lo, hi = bound(start, true), bound(stop, false)
-- within reports whether an entry is between the bounds.
local function within(e)
  if lo and e[1] ~= lo[1] then
    if e[1] < lo[1] then return false end
  elseif lo and (e[2] < lo[2] or (e[2] == lo[2] and lo[3])) then
    return false
  end
  if hi and e[1] ~= hi[1] then
    if e[1] > hi[1] then return false end
  elseif hi and (e[2] > hi[2] or (e[2] == hi[2] and hi[3])) then
    return false
  end
  return true
end
-- The hash's entries older than the retention are left out: a hash
-- beside a stream is no longer trimmed (lib.lua's ledger), and expires
-- whole within the retention of its last entry.
local short = {}
for _, e in ipairs(ledger_entries(short_key)) do
  if within(e) and (keep <= 0 or e[1] >= now - keep) then short[#short + 1] = e end
end
local open = redis.call('HMGET', account_key, 'ctime', 'open')
local open_ms, open_credits = tonumber(open[1] or ''), open[2]
if open_ms and open_credits and (keep <= 0 or open_ms >= now - keep) then
  local seq = 0
  local e = {open_ms, seq, int(open_ms) .. '-' .. int(seq), table.concat({open_kind, open_credits, open_credits, '', open_note}, '|')}
  if within(e) then
    -- In the order of ids, before the hash's entries of its id.
    local at = 1
    while short[at] and (short[at][1] < e[1] or (short[at][1] == e[1] and short[at][2] < e[2])) do at = at + 1 end
    table.insert(short, at, e)
  end
end
if rev then
  for i = 1, math.floor(#short / 2) do short[i], short[#short + 1 - i] = short[#short + 1 - i], short[i] end
end

-- Merge: the next entry is the hash's when its id comes first in the
-- order read, or, the ids equal, oldest first (the hash's first).
local function before(a, b)
  if a[1] ~= b[1] then return (a[1] < b[1]) ~= rev end
  if a[2] ~= b[2] then return (a[2] < b[2]) ~= rev end
  return not rev
end
local i, j, n, last = 1, 1, 0, nil
while i <= #short or j <= #stream do
  local h, s = short[i], stream[j]
  local sid
  if s then sid = {ledger_id(s[1])} end
  local id, take_h
  if h and (not s or before(h, sid)) then
    id, take_h = {h[1], h[2]}, true
  else
    id, take_h = sid, false
  end
  if n >= count and not (last and last[1] == id[1] and last[2] == id[2]) then break end
  if take_h then
    add(h[3], ledger_fields(h[4]))
    i = i + 1
  else
    add(s[1], s[2])
    j = j + 1
  end
  n, last = n + 1, id
end
return reply
