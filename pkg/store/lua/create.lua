-- create.lua: creates a pending task, charging its price: the account's
-- rules checked (the one authority: active, model allowed, in-flight
-- limit, balance), the price debited, the record, its ledger entry, its
-- queue check and its index entry written, all at once.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> inflight: the account's unfinished tasks
-- KEYS[4] -> ledger: the account's credit ledger
-- KEYS[5] -> checks: the account's queue checks
-- KEYS[6] -> index: the account's task index, for listing
-- KEYS[7] -> idem: the Idempotency-Key's record (any key of the account's slot when there is none)
-- KEYS[8] -> queue: the queue's numbers (any key of the account's slot when its number is taken apart)
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> ttl: the record's time to live, ms
-- ARGV[3] -> price: credits
-- ARGV[4] -> default_max: the in-flight limit of an account that sets none (0: none)
-- ARGV[5] -> count_until: when the task stops counting as in flight, Unix ms
-- ARGV[6] -> tier: the model's tier, checked against the account's models
-- ARGV[7] -> task_id
-- ARGV[8] -> first_check: when the task's job is first checked for, Unix ms
-- ARGV[9] -> with_idem: 1 when KEYS[7] is an Idempotency-Key's record, else 0
-- ARGV[10] -> body_hash: the request body's digest, under an Idempotency-Key
-- ARGV[11] -> idem_window: how long a create under way holds its key, ms
-- ARGV[12] -> idem_ttl: how long a key is kept, ms
-- ARGV[13] -> queue_name: the queue the task joins ('' for none)
-- ARGV[14] -> queue_seq: its number there, taken already (0: take it from KEYS[8])
-- ARGV[15] -> job: the job's payload, kept while the task is pending
-- ARGV[16] -> type: the task type
-- ARGV[17] -> model: the model id
-- ARGV[18] -> created: Unix ms
-- ARGV[19] -> callback_url: '' for none
-- ARGV[20] -> callback_events: comma separated
--
-- Returns {code, n, extra}: {CREATED, balance, queue number},
-- {REPLAYED, 0, earlier task id}, or a refusal {code, n}: NO_ACCOUNT,
-- DISABLED, MODEL_NOT_ALLOWED, TASK_EXISTS, INFLIGHT_LIMIT (n = the
-- limit), NO_CREDITS (n = the balance), IDEM_MISMATCH, IDEM_BUSY.

local CREATED, REPLAYED = 1, 2
local NO_ACCOUNT, DISABLED, MODEL_NOT_ALLOWED, TASK_EXISTS, INFLIGHT_LIMIT, NO_CREDITS, IDEM_MISMATCH, IDEM_BUSY = -1, -2, -3, -4, -5, -6, -7, -8

local task_key, account_key, inflight_key, ledger_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local checks_key, index_key, idem_key, queue_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now, ttl, price, default_max = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local count_until, tier, task_id, first_check = tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
local with_idem, body_hash, idem_window, idem_ttl = ARGV[9] == '1', ARGV[10], tonumber(ARGV[11]), ARGV[12]
local queue_name, queue_seq = ARGV[13], tonumber(ARGV[14])
local job, task_type, model, created, callback_url, callback_events = ARGV[15], ARGV[16], ARGV[17], ARGV[18], ARGV[19], ARGV[20]

if with_idem then
  local v = redis.call('HMGET', idem_key, 'body', 'task', 'state', 'at')
  if v[1] then
    if v[1] ~= body_hash then return {IDEM_MISMATCH, 0} end
    if v[3] ~= 'done' and now - tonumber(v[4]) < idem_window then return {IDEM_BUSY, 0} end
    return {REPLAYED, 0, v[2]}
  end
end
if redis.call('EXISTS', task_key) == 1 then return {TASK_EXISTS, 0} end

-- The account's rules.
local a = redis.call('HMGET', account_key, 'status', 'credits', 'models', 'inflight_max')
if not a[1] then return {NO_ACCOUNT, 0} end
if a[1] ~= 'active' then return {DISABLED, 0} end
if a[3] and a[3] ~= '' then
  local allowed = false
  for m in string.gmatch(a[3], '[^,]+') do
    if m == tier then allowed = true end
  end
  if not allowed then return {MODEL_NOT_ALLOWED, 0} end
end
local limit = tonumber(a[4] or '0') or 0
if limit == 0 then limit = default_max end
if limit > 0 and redis.call('ZCOUNT', inflight_key, now, '+inf') >= limit then return {INFLIGHT_LIMIT, limit} end
local bal = tonumber(a[2] or '0') or 0
if bal < price then return {NO_CREDITS, bal} end

if with_idem then
  redis.call('HSET', idem_key, 'body', body_hash, 'task', task_id, 'state', 'creating', 'at', now)
  redis.call('PEXPIRE', idem_key, idem_ttl)
end
if price > 0 then
  bal = redis.call('HINCRBY', account_key, 'credits', -price)
  ledger(ledger_key, 'debit', -price, bal, task_id, '')
end
redis.call('HSET', task_key, 'job', job, 'type', task_type, 'model', model, 'status', 'pending',
  'progress', 0, 'ctime', created, 'price', price)
if callback_url ~= '' then
  redis.call('HSET', task_key, 'cb', callback_url, 'cbev', callback_events)
end
if queue_name ~= '' then
  if queue_seq == 0 then queue_seq = redis.call('HINCRBY', queue_key, 'enq', 1) end
  redis.call('HSET', task_key, 'q', queue_name, 'qseq', queue_seq)
end
redis.call('PEXPIRE', task_key, ttl)
redis.call('ZADD', inflight_key, count_until, task_id)
redis.call('ZADD', checks_key, first_check, task_id)
-- The index lists a task while its record can live: its deadline, then
-- the record's time to live.
local keep = count_until - now + ttl
if string.sub(task_id, -2) == '00' then
  -- One create in a hundred (by its id's random digits) drops what has
  -- expired; listing skips it meanwhile.
  redis.call('ZREMRANGEBYSCORE', index_key, '-inf', now - keep)
end
redis.call('ZADD', index_key, now, task_id)
redis.call('PEXPIRE', index_key, keep)
return {CREATED, bal, queue_seq}
