-- abort.lua: undoes the creation of a task still pending (the gateway's
-- undo when it could not queue the job, or could not tell whether the
-- create was made): the price is refunded (the ledger keeps the debit and
-- the refund) and the record removed, with the Idempotency-Key it was
-- made under. A task that went on (a worker started it) keeps its key.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> inflight: the account's unfinished tasks
-- KEYS[4] -> ledger: the account's credit ledger
-- KEYS[5] -> checks: the account's queue checks
-- KEYS[6] -> index: the account's task index
-- KEYS[7] -> idem: the Idempotency-Key's record (any key of the account's slot when there is none)
-- ARGV[1] -> task_id
-- ARGV[2] -> note: the refund's ledger note
-- ARGV[3] -> with_idem: 1 when KEYS[7] is an Idempotency-Key's record, else 0
--
-- Returns {code, queue left}: ABORTED, or NOT_PENDING (nothing changed).

local ABORTED, NOT_PENDING = 0, 1

local K = {task = KEYS[1], account = KEYS[2], inflight = KEYS[3], ledger = KEYS[4], checks = KEYS[5]}
local index_key, idem_key = KEYS[6], KEYS[7]
local task_id, note, with_idem = ARGV[1], ARGV[2], ARGV[3] == '1'

if redis.call('HGET', K.task, 'status') ~= 'pending' then return {NOT_PENDING, ''} end
refund(K, task_id, note)
local q = left(K)
redis.call('DEL', K.task)
redis.call('ZREM', K.inflight, task_id)
redis.call('ZREM', K.checks, task_id)
redis.call('ZREM', index_key, task_id)
if with_idem and redis.call('HGET', idem_key, 'task') == task_id then
  redis.call('DEL', idem_key)
end
return {ABORTED, q}
