-- takeover.lua: gives a task whose run died (the orphan: its worker
-- stopped extending its lease) to a new run. The caller read the task's
-- crashes and named the new run after them; if another change came
-- between (the crashes moved), the takeover is superseded.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> inflight: the account's unfinished tasks
-- KEYS[4] -> ledger: the account's credit ledger
-- KEYS[5] -> checks: the account's queue checks
-- KEYS[6] -> running: the account's places
-- KEYS[7] -> outbox: the account's webhook outbox
-- ARGV[1] -> orphan: the run that died
-- ARGV[2] -> new_run
-- ARGV[3] -> max_crashes
-- ARGV[4] -> now: Unix ms
-- ARGV[5] -> ttl: the record's time to live once final, ms
-- ARGV[6] -> crash_message
-- ARGV[7] -> task_id
-- ARGV[8] -> crashes_seen: the crashes the caller read
--
-- Returns {outcome, owning run, refunded, hooked, queue left}: APPLIED
-- (the new run owns it), SUPERSEDED (another run owns it: returned),
-- FINAL, MISSING, or POISONED (failed and refunded instead; the queue of a
-- task poisoned while still pending, its runs having died before starting
-- it).

local K = {task = KEYS[1], account = KEYS[2], inflight = KEYS[3], ledger = KEYS[4],
  checks = KEYS[5], running = KEYS[6], outbox = KEYS[7]}
local orphan, new_run, max_crashes, now, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local crash_message, task_id, crashes_seen = ARGV[6], ARGV[7], tonumber(ARGV[8])

local v = redis.call('HMGET', K.task, 'status', 'run', 'crashes')
local st = v[1]
if not st then return {MISSING, '', 0, 0, ''} end
if final(st) then return {FINAL, '', 0, 0, ''} end
local run = v[2] or ''
if run ~= '' and run ~= orphan then return {SUPERSEDED, run, 0, 0, ''} end
local crashes = tonumber(v[3] or '0') or 0
if crashes ~= crashes_seen then return {SUPERSEDED, run, 0, 0, ''} end
local failed, hooked, refunded, q = crashed(K, crashes, max_crashes, now, ttl, crash_message, task_id)
if failed then return {POISONED, '', refunded, hooked, q} end
redis.call('HSET', K.task, 'run', new_run, 'live', 0)
return {APPLIED, new_run, 0, 0, ''}
