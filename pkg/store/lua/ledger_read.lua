-- ledger_read.lua: reads an account's ledger, whichever its form (a
-- short one's hash or a stream: lib.lua's ledger): at most count entries
-- from start to end as XRANGE takes them ('-', '+', '<ms>', '<ms>-<seq>';
-- '(' before one: exclusive), oldest first, or with rev newest first.
--
-- KEYS[1] -> ledger: the account's credit ledger
-- ARGV[1] -> start: the oldest bound
-- ARGV[2] -> end: the newest bound
-- ARGV[3] -> count: the most entries read
-- ARGV[4] -> rev: 1 for newest first
--
-- Returns {READ, id, kind, amount, balance, task, note, ...}: a row an
-- entry, task and note '' when it has none.

local READ = 1

local ledger_key = KEYS[1]
local start, stop, count, rev = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'

local reply = {READ}
-- add puts an entry in the reply, from its id and its fields.
local function add(id, f)
  local v = {}
  for i = 1, #f, 2 do v[f[i]] = f[i + 1] end
  local n = #reply
  reply[n + 1], reply[n + 2], reply[n + 3] = id, v['kind'] or '', v['amount'] or ''
  reply[n + 4], reply[n + 5], reply[n + 6] = v['balance'] or '', v['task'] or '', v['note'] or ''
end

if redis.call('TYPE', ledger_key).ok == 'stream' then
  local es
  if rev then
    es = redis.call('XREVRANGE', ledger_key, stop, start, 'COUNT', count)
  else
    es = redis.call('XRANGE', ledger_key, start, stop, 'COUNT', count)
  end
  for _, e in ipairs(es) do add(e[1], e[2]) end
  return reply
end

-- A short ledger: its entries whole, oldest first, kept between the
-- bounds. A bound is {ms, seq, exclusive}; nil for '-' and '+'; a bare ms
-- is its first seq as a start, its last as an end.
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
local es = ledger_entries(ledger_key)
local from, to, step = 1, #es, 1
if rev then from, to, step = #es, 1, -1 end
local n = 0
for i = from, to, step do
  if n >= count then break end
  local e = es[i]
  if within(e) then
    add(e[3], ledger_fields(e[4]))
    n = n + 1
  end
end
return reply
