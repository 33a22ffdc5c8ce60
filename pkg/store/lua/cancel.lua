-- cancel.lua: cancels an unfinished task: it becomes canceled at once (no
-- worker starts it, a worker running it can no longer finish it); a
-- pending task is refunded in full, one a worker had started is not. The
-- place it frees admits the account's next parked task.
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
-- ARGV[5] -> account_id
-- ARGV[6] -> task_id
-- ARGV[7] -> share: the places of an account of weight 1 (0: no limit)
-- ARGV[8] -> check_at: when a task this admits is first checked for its job, Unix ms
-- ARGV[9] -> queues: where the queues' numbers are kept, on one server (lib.lua's QUEUES; '' on a cluster)
--
-- Returns {outcome, status before, refunded, run, hooked, queue left, id,
-- job, queue, ...}: APPLIED (the tasks its place admitted follow), FINAL
-- (status before: the final one) or MISSING.

local K = {task = KEYS[1], account = KEYS[2], ledger = KEYS[3], parked = KEYS[4], due = KEYS[5]}
local now, ttl, keep, hook_at = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4]
local account_id, task_id, share, check_at = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
QUEUES = ARGV[9]

local v = redis.call('HMGET', K.task, 'status', 'run')
local st = v[1]
if not st then return {MISSING, '', 0, '', 0, ''} end
if final(st) then return {FINAL, st, 0, '', 0, ''} end
local refunded = 0
if st == 'pending' then refunded = refund(K, now, keep, task_id, 'canceled') end
local hooked, q = ended(K, 'canceled', 'task.canceled', now, ttl, hook_at, account_id, task_id)
local reply = {APPLIED, st, refunded, v[2] or '', hooked, q}
for _, x in ipairs(promote(K, share, check_at, now, account_id, task_id)) do reply[#reply + 1] = x end
return reply
