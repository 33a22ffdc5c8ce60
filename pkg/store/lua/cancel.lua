-- cancel.lua: cancels an unfinished task: it becomes canceled at once (no
-- worker starts it, a worker running it can no longer finish it); a
-- pending task is refunded in full, one a worker had started is not.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> inflight: the account's unfinished tasks
-- KEYS[4] -> ledger: the account's credit ledger
-- KEYS[5] -> checks: the account's queue checks
-- KEYS[6] -> running: the account's places
-- KEYS[7] -> outbox: the account's webhook outbox
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> ttl: the record's time to live from now, ms
-- ARGV[3] -> task_id
--
-- Returns {outcome, status before, refunded, run, hooked, queue left}:
-- APPLIED, FINAL (status before: the final one) or MISSING.

local K = {task = KEYS[1], account = KEYS[2], inflight = KEYS[3], ledger = KEYS[4],
  checks = KEYS[5], running = KEYS[6], outbox = KEYS[7]}
local now, ttl, task_id = ARGV[1], ARGV[2], ARGV[3]

local v = redis.call('HMGET', K.task, 'status', 'run')
local st = v[1]
if not st then return {MISSING, '', 0, '', 0, ''} end
if final(st) then return {FINAL, st, 0, '', 0, ''} end
local refunded = 0
if st == 'pending' then refunded = refund(K, task_id, 'canceled') end
local hooked, q = ended(K, 'canceled', 'task.canceled', now, ttl, task_id)
return {APPLIED, st, refunded, v[2] or '', hooked, q}
