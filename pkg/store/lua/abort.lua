-- abort.lua: undoes the creation of a task still pending (the gateway's
-- undo when it could not queue the job, or could not tell whether the
-- create was made): the price is refunded (the ledger keeps the debit and
-- the refund) and the record removed, with the Idempotency-Key it was
-- made under; the place it frees admits the account's next parked task. A
-- task that went on (a worker started it) keeps its key. A task not
-- there at all is given a tombstone for void_for: its create, if still
-- on its way to Redis, then finds the record taken and does nothing, so
-- the undo's answer is final either way.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> ledger: the account's credit ledger
-- KEYS[4] -> parked: the account's tasks waiting for a place
-- KEYS[5] -> due: the shard's due work
-- KEYS[6] -> index: the account's task index
-- KEYS[7] -> idem: the Idempotency-Key's record (any key of the account's slot when there is none)
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> keep: the ledger's retention, ms (0: all)
-- ARGV[3] -> account_id
-- ARGV[4] -> task_id
-- ARGV[5] -> note: the refund's ledger note
-- ARGV[6] -> with_idem: 1 when KEYS[7] is an Idempotency-Key's record, else 0
-- ARGV[7] -> share: the places of an account of weight 1 (0: no limit)
-- ARGV[8] -> check_at: when a task this admits is first checked for its job, Unix ms
-- ARGV[9] -> void_for: how long the tombstone of a task not there is kept, ms
-- ARGV[10] -> valid_until: the undo applies only while Redis's clock has not passed it, Unix ms (0: no bound)
-- ARGV[11] -> queues: where the queues' numbers are kept, on one server (lib.lua's QUEUES; '' on a cluster)
--
-- Returns {code, queue left, id, queue, deadline, ...}: ABORTED (the tasks its
-- place admitted follow), NOT_PENDING (the task went on: nothing changed),
-- ABSENT (no such task: never made, and now never will be), or LATE (it
-- reached Redis after valid_until: nothing changed).

local ABORTED, NOT_PENDING, ABSENT, LATE = 0, 1, 2, 3

local K = {task = KEYS[1], account = KEYS[2], ledger = KEYS[3], parked = KEYS[4], due = KEYS[5]}
local index_key, idem_key = KEYS[6], KEYS[7]
local now, keep, account_id, task_id, note = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local with_idem, share, check_at, void_for = ARGV[6] == '1', tonumber(ARGV[7]), ARGV[8], ARGV[9]
local valid_until = tonumber(ARGV[10])
QUEUES = ARGV[11]

-- An undo held up past the time its caller waited for it never applies:
-- its caller has answered that the outcome is unknown, and the create's
-- own bound (before this one) has settled it.
if valid_until > 0 and redis_ms() > valid_until then return {LATE, ''} end

local st = redis.call('HGET', K.task, 'status')
if not st then
  redis.call('HSET', K.task, 'void', 1)
  redis.call('PEXPIRE', K.task, void_for)
  return {ABSENT, ''}
end
if st ~= 'pending' then return {NOT_PENDING, ''} end
refund(K, now, keep, task_id, note)
local q = left(K, now)
release_place(K, task_id)
redis.call('DEL', K.task)
redis.call('ZREM', K.due, task_due(account_id, task_id))
redis.call('ZREM', index_key, task_id)
if with_idem and redis.call('HGET', idem_key, 'task') == task_id then
  redis.call('DEL', idem_key)
end
local reply = {ABORTED, q}
for _, x in ipairs(promote(K, share, check_at, now, account_id, task_id)) do reply[#reply + 1] = x end
return reply
