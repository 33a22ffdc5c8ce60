-- fail.lua: fails a task with a code and a message for its owner, and
-- refunds its price (once: only the move to failed refunds).
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
-- ARGV[3] -> code: the failure's code
-- ARGV[4] -> message: the failure's message
-- ARGV[5] -> task_id
-- ARGV[6] -> run: the run failing it ('' for whichever owns it)
--
-- Returns {outcome, hooked, refunded, queue left}: APPLIED, FINAL,
-- MISSING or SUPERSEDED.

local K = {task = KEYS[1], account = KEYS[2], inflight = KEYS[3], ledger = KEYS[4],
  checks = KEYS[5], running = KEYS[6], outbox = KEYS[7]}
local now, ttl, code, message, task_id, run = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

local v = redis.call('HMGET', K.task, 'status', 'run')
local st = v[1]
if not st then return {MISSING, 0, 0, ''} end
if final(st) then return {FINAL, 0, 0, ''} end
if run ~= '' and v[2] and v[2] ~= '' and v[2] ~= run then return {SUPERSEDED, 0, 0, ''} end
local hooked, refunded, q = fail(K, now, ttl, code, message, task_id)
return {APPLIED, hooked, refunded, q}
