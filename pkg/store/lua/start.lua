-- start.lua: gives a task to a run and moves it to processing (the first
-- time). A task already processing for the same run (a retry) stays
-- processing and keeps its progress; if that run never let go
-- (release.lua) and the worker that started it died (lib.lua's died: not
-- this worker, and judged dead by the caller), it is a crash, and past
-- max_crashes the task fails (worker_crashed, refunded). The task's place
-- was taken when it was admitted; a parked task (its job queued by some
-- mistake) is not started: its job is dropped, and it is queued when it
-- is admitted.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> ledger: the account's credit ledger
-- KEYS[4] -> parked: the account's tasks waiting for a place
-- KEYS[5] -> due: the shard's due work
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> run: the run starting
-- ARGV[3] -> max_crashes
-- ARGV[4] -> ttl: the record's time to live once final, ms
-- ARGV[5] -> keep: the ledger's retention, ms (0: all)
-- ARGV[6] -> hook_at: when a final webhook event left unqueued is due for the recovery, Unix ms
-- ARGV[7] -> crash_message
-- ARGV[8] -> account_id
-- ARGV[9] -> task_id
-- ARGV[10] -> share: the places of an account of weight 1 (0: no limit)
-- ARGV[11] -> check_at: when a task this admits is first checked for its job, Unix ms
-- ARGV[12] -> queues: where the queues' numbers are kept, on one server (lib.lua's QUEUES; '' on a cluster)
-- ARGV[13] -> me: the worker starting the run ('1': one that names none)
-- ARGV[14] -> judged: the worker holding the run that the caller judged ('' for none)
-- ARGV[15] -> dead: '1' if the caller found that worker dead
-- ARGV[16] -> recheck_at: when the task, processing, is next checked for its job, Unix ms
--
-- Returns {outcome, refunded, hooked, queue left, input, created,
-- deadline, model, holder, trace, admitted at, id, queue, deadline, ...}:
-- APPLIED (with the task's input, its creation time and deadline, for the
-- run, and the trace context of its create and when it was admitted from
-- its account's parked tasks, if it was traced), FINAL, MISSING, SUPERSEDED,
-- BUSY (the task is parked; nothing changed), HELD (nothing changed: the
-- run never let go, and the worker that started it, holder, is to be
-- judged) or POISONED (failed and refunded instead; the tasks its place
-- admitted follow).

local K = {task = KEYS[1], account = KEYS[2], ledger = KEYS[3], parked = KEYS[4], due = KEYS[5]}
local now, run, max_crashes, ttl, keep = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local hook_at, crash_message, account_id, task_id = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local share, check_at = tonumber(ARGV[10]), ARGV[11]
QUEUES = ARGV[12]
local me, judged, dead, recheck_at = ARGV[13], ARGV[14], ARGV[15], tonumber(ARGV[16])

local v = redis.call('HMGET', K.task, 'status', 'run', 'live', 'crashes', 'dl', 'adm', 'model', 'ctime', 'inn', 'in', 'cb', 'tp', 'atime', 'q', 'qseq')
local st = v[1]
local model = v[7] or ''
if not st then return {MISSING, 0, 0, '', '', 0, 0, model, ''} end
if final(st) then return {FINAL, 0, 0, '', '', 0, 0, model, ''} end
if v[2] and v[2] ~= '' and v[2] ~= run then return {SUPERSEDED, 0, 0, '', '', 0, 0, model, ''} end
if st == 'pending' and v[6] ~= '1' then return {BUSY, 0, 0, '', '', 0, 0, model, ''} end
if st == 'processing' then
  -- This run started before: did it end with its worker's death?
  local d = died(v[3], me, judged, dead)
  if d == nil then return {HELD, 0, 0, '', '', 0, 0, model, v[3]} end
  local failed, hooked, refunded, q = false, 0, 0, ''
  if d then
    failed, hooked, refunded, q = crashed(K, tonumber(v[4] or '0') or 0, max_crashes, now, ttl, keep, hook_at, crash_message, account_id, task_id)
  end
  if failed then
    local reply = {POISONED, refunded, hooked, q, '', 0, 0, model, '', '', 0}
    for _, x in ipairs(promote(K, share, check_at, now, account_id, task_id)) do reply[#reply + 1] = x end
    return reply
  end
end
local q = ''
if st == 'pending' then
  local set = {'status', 'processing', 'stime', now, 'run', run, 'live', me}
  -- A task without a callback takes its account's default endpoint now,
  -- or an empty one: its progress writes and its end read only the record.
  if not v[11] then
    for _, x in ipairs(endpoint(K) or {'cb', ''}) do set[#set + 1] = x end
  end
  redis.call('HSET', K.task, unpack(set))
  q = left(K, now, {q = v[14], qseq = v[15], started = true})
  -- Checked for its job again a recheck later (a failover can lose the
  -- job of a task that started), never past its deadline.
  if v[5] then redis.call('ZADD', K.due, 'XX', math.min(recheck_at, tonumber(v[5])), task_due(account_id, task_id)) end
  notify(K.task)
else
  redis.call('HSET', K.task, 'run', run, 'live', me)
end
return {APPLIED, 0, 0, q, get_input(K.task, v[10], v[9]) or '', tonumber(v[8] or '0'), tonumber(v[5] or '0'), model, '',
  v[12] or '', tonumber(v[13] or '0')}
