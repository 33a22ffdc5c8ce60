-- complete.lua: completes the task the run owns with its results; the
-- place it frees admits the account's next parked task. A task that made
-- fewer images than it was asked (at least one) is refunded the price of
-- those it did not make, once.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> ledger: the account's credit ledger
-- KEYS[4] -> parked: the account's tasks waiting for a place
-- KEYS[5] -> due: the shard's due work
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> ttl: the record's time to live from now, ms
-- ARGV[3] -> hook_at: when the webhook event, if left unqueued, is due for the recovery, Unix ms
-- ARGV[4] -> results: the results' blob keys, one a line
-- ARGV[5] -> account_id
-- ARGV[6] -> task_id
-- ARGV[7] -> run: the run completing it
-- ARGV[8] -> share: the places of an account of weight 1 (0: no limit)
-- ARGV[9] -> check_at: when a task this admits is first checked for its job, Unix ms
-- ARGV[10] -> queues: where the queues' numbers are kept, on one server (lib.lua's QUEUES; '' on a cluster)
-- ARGV[11] -> asked: how many images the task was asked for (0: as many as its results)
-- ARGV[12] -> keep: the ledger's retention, ms (0: all)
--
-- Returns {outcome, hooked, queue left, refunded, id, queue, deadline,
-- ...}: APPLIED (hooked 1 when the task.completed event is due; refunded
-- the credits of the images not made; the tasks its place admitted
-- follow), FINAL, MISSING or SUPERSEDED.

local K = {task = KEYS[1], account = KEYS[2], ledger = KEYS[3], parked = KEYS[4], due = KEYS[5]}
local now, ttl, hook_at, results = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local account_id, task_id, run, share, check_at = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9]
QUEUES = ARGV[10]
local asked, keep = tonumber(ARGV[11]), tonumber(ARGV[12])

local v = redis.call('HMGET', K.task, 'status', 'run', unpack(ENDING))
local st = v[1]
if not st then return {MISSING, 0, '', 0} end
if final(st) then return {FINAL, 0, '', 0} end
if v[2] and v[2] ~= '' and v[2] ~= run then return {SUPERSEDED, 0, '', 0} end
-- One field a result: a blob key is shorter than a field's 64 bytes.
local set, i = {'progress', 100}, 0
for key in string.gmatch(results, '[^\n]+') do
  set[#set + 1] = 'r' .. i; set[#set + 1] = key
  i = i + 1
end
local hooked, q = ended(K, 'completed', 'task.completed', now, ttl, hook_at, account_id, task_id, set, ending(K.task, v, 3))
local refunded = 0
if i > 0 and asked > i then refunded = refund(K, now, keep, task_id, 'images_not_made', asked - i, asked) end
local reply = {APPLIED, hooked, q, refunded}
for _, x in ipairs(promote(K, share, check_at, now, account_id, task_id)) do reply[#reply + 1] = x end
return reply
