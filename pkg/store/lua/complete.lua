-- complete.lua: completes the task the run owns with its results.
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
-- ARGV[3] -> results: the results, JSON
-- ARGV[4] -> task_id
-- ARGV[5] -> run: the run completing it
--
-- Returns {outcome, hooked, queue left}: APPLIED (hooked 1 when the
-- task.completed event went to the outbox; the queue of a task completed
-- while still pending), FINAL, MISSING or SUPERSEDED.

local K = {task = KEYS[1], account = KEYS[2], inflight = KEYS[3], ledger = KEYS[4],
  checks = KEYS[5], running = KEYS[6], outbox = KEYS[7]}
local now, ttl, results, task_id, run = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local v = redis.call('HMGET', K.task, 'status', 'run')
local st = v[1]
if not st then return {MISSING, 0, ''} end
if final(st) then return {FINAL, 0, ''} end
if v[2] and v[2] ~= '' and v[2] ~= run then return {SUPERSEDED, 0, ''} end
redis.call('HSET', K.task, 'progress', 100, 'results', results)
local hooked, q = ended(K, 'completed', 'task.completed', now, ttl, task_id)
return {APPLIED, hooked, q}
