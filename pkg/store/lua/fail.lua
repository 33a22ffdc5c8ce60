-- fail.lua: fails a task with a code and a message for its owner, and
-- refunds its price (once: only the move to failed refunds); the place it
-- frees admits the account's next parked task. The deadline's sweep fails
-- whichever run owns the task (run ''), and a task it finds ended or gone
-- leaves the due work (one gone unfinished leaves the account's counters
-- too: lib.lua's forget).
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> ledger: the account's credit ledger
-- KEYS[4] -> parked: the account's tasks waiting for a place
-- KEYS[5] -> due: the shard's due work
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> ttl: the record's time to live from now, ms
-- ARGV[3] -> keep: the ledger's retention, ms (0: all)
-- ARGV[4] -> hook_at: when the webhook event, if left unqueued, is due for the recovery, Unix ms
-- ARGV[5] -> code: the failure's code
-- ARGV[6] -> message: the failure's message
-- ARGV[7] -> account_id
-- ARGV[8] -> task_id
-- ARGV[9] -> run: the run failing it ('' for whichever owns it)
-- ARGV[10] -> share: the places of an account of weight 1 (0: no limit)
-- ARGV[11] -> check_at: when a task this admits is first checked for its job, Unix ms
-- ARGV[12] -> queues: where the queues' numbers are kept, on one server (lib.lua's QUEUES; '' on a cluster)
--
-- Returns {outcome, hooked, refunded, queue left, model, id, job, queue,
-- ...}: APPLIED (the tasks its place admitted follow), FINAL, MISSING or
-- SUPERSEDED.

local K = {task = KEYS[1], account = KEYS[2], ledger = KEYS[3], parked = KEYS[4], due = KEYS[5]}
local now, ttl, keep, hook_at = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4]
local code, message, account_id, task_id, run = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local share, check_at = tonumber(ARGV[10]), ARGV[11]
QUEUES = ARGV[12]

local v = redis.call('HMGET', K.task, 'status', 'run', 'model')
local st = v[1]
if not st then
  -- A record gone while its task was unfinished leaves the account's books
  -- (forget), once.
  if run == '' then forget(K, account_id, task_id) end
  return {MISSING, 0, 0, '', ''}
end
if final(st) then
  if run == '' then redis.call('ZREM', K.due, task_due(account_id, task_id)) end
  return {FINAL, 0, 0, '', v[3]}
end
if run ~= '' and v[2] and v[2] ~= '' and v[2] ~= run then return {SUPERSEDED, 0, 0, '', v[3]} end
local hooked, refunded, q = fail(K, now, ttl, keep, hook_at, code, message, account_id, task_id)
local reply = {APPLIED, hooked, refunded, q, v[3]}
for _, x in ipairs(promote(K, share, check_at, now, account_id, task_id)) do reply[#reply + 1] = x end
return reply
