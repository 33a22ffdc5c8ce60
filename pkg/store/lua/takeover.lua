-- takeover.lua: gives a task whose run was orphaned (its worker stopped
-- extending its lease) to a new run. The caller read how many runs the
-- task was given to so far (tkn; crashes in a record from before it) and
-- named the new run after them; if another change came between, the
-- takeover is superseded. It counts a crash only when the orphan's worker
-- died holding the task (lib.lua's died): not when the run had let go,
-- never started, or its worker is alive (its lease lapsed while Redis
-- was away) or stopped gracefully.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> ledger: the account's credit ledger
-- KEYS[4] -> parked: the account's tasks waiting for a place
-- KEYS[5] -> due: the shard's due work
-- ARGV[1] -> orphan: the run that died
-- ARGV[2] -> new_run
-- ARGV[3] -> max_crashes
-- ARGV[4] -> now: Unix ms
-- ARGV[5] -> ttl: the record's time to live once final, ms
-- ARGV[6] -> keep: the ledger's retention, ms (0: all)
-- ARGV[7] -> hook_at: when the webhook event, if left unqueued, is due for the recovery, Unix ms
-- ARGV[8] -> crash_message
-- ARGV[9] -> account_id
-- ARGV[10] -> task_id
-- ARGV[11] -> runs_seen: the takeovers the caller read
-- ARGV[12] -> share: the places of an account of weight 1 (0: no limit)
-- ARGV[13] -> check_at: when a task this admits is first checked for its job, Unix ms
-- ARGV[14] -> queues: where the queues' numbers are kept, on one server (lib.lua's QUEUES; '' on a cluster)
-- ARGV[15] -> me: the worker taking over ('1': one that names none)
-- ARGV[16] -> judged: the worker holding the orphan that the caller judged ('' for none)
-- ARGV[17] -> dead: '1' if the caller found that worker dead
--
-- Returns {outcome, owning run, refunded, hooked, queue left, model,
-- holder, id, queue, deadline, ...}: APPLIED (the new run owns it),
-- SUPERSEDED (another run owns it: returned), FINAL, MISSING, HELD
-- (nothing changed: the worker that started the orphan, holder, is to be
-- judged) or POISONED (failed and refunded instead; the tasks its place
-- admitted follow).

local K = {task = KEYS[1], account = KEYS[2], ledger = KEYS[3], parked = KEYS[4], due = KEYS[5]}
local orphan, new_run, max_crashes, now, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local keep, hook_at, crash_message, account_id, task_id = tonumber(ARGV[6]), ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local runs_seen, share, check_at = tonumber(ARGV[11]), tonumber(ARGV[12]), ARGV[13]
QUEUES = ARGV[14]
local me, judged, dead = ARGV[15], ARGV[16], ARGV[17]

local v = redis.call('HMGET', K.task, 'status', 'run', 'crashes', 'model', 'live', 'tkn')
local st = v[1]
local model = v[4] or ''
if not st then return {MISSING, '', 0, 0, '', model, ''} end
if final(st) then return {FINAL, '', 0, 0, '', model, ''} end
local run = v[2] or ''
if run ~= '' and run ~= orphan then return {SUPERSEDED, run, 0, 0, '', model, ''} end
local crashes = tonumber(v[3] or '0') or 0
local runs = tonumber(v[6] or '') or crashes
if runs ~= runs_seen then return {SUPERSEDED, run, 0, 0, '', model, ''} end
local d = false
if st == 'processing' then d = died(v[5], me, judged, dead) end
if d == nil then return {HELD, run, 0, 0, '', model, v[5]} end
if d then
  local failed, hooked, refunded, q = crashed(K, crashes, max_crashes, now, ttl, keep, hook_at, crash_message, account_id, task_id)
  if failed then
    local reply = {POISONED, '', refunded, hooked, q, model, ''}
    for _, x in ipairs(promote(K, share, check_at, now, account_id, task_id)) do reply[#reply + 1] = x end
    return reply
  end
end
redis.call('HSET', K.task, 'run', new_run, 'live', 0, 'tkn', runs + 1)
return {APPLIED, new_run, 0, 0, '', model, ''}
