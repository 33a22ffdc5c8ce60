-- create.lua: creates a pending task, charging its price: the account's
-- rules checked (the one authority: active, model allowed, tasks in
-- flight, balance), the price debited, the record (with the task's
-- input), its ledger entry and its index entry written, and the task admitted (due for its
-- first queue check, the caller queues its job) if the account's window
-- has room and nothing of it waits before, else parked: all at once.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> ledger: the account's credit ledger
-- KEYS[4] -> parked: the account's tasks waiting for a place
-- KEYS[5] -> due: the shard's due work
-- KEYS[6] -> index: the account's task index, for listing
-- KEYS[7] -> idem: the Idempotency-Key's record (any key of the account's slot when there is none)
-- KEYS[8] -> queue: the queue's numbers (any key of the account's slot when its number is taken apart)
-- KEYS[9] -> spend: the credits each of the account's API keys has spent (key hash → credits)
-- KEYS[10] -> usage: the account's usage of the task's day (UTC): "<model>|n" tasks, "<model>|c" credits
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> ttl: a final record's time to live, ms
-- ARGV[3] -> price: credits
-- ARGV[4] -> default_max: the in-flight limit of an account that sets none (0: none)
-- ARGV[5] -> deadline: when the task stops counting as in flight and is failed if unfinished, Unix ms
-- ARGV[6] -> tier: the model's tier, checked against the account's models
-- ARGV[7] -> account_id
-- ARGV[8] -> task_id
-- ARGV[9] -> check_at: when an admitted task's job is first checked for, Unix ms
-- ARGV[10] -> share: the places of an account of weight 1 (0: no limit)
-- ARGV[11] -> keep: the ledger's retention, ms (0: all)
-- ARGV[12] -> with_idem: 1 when KEYS[7] is an Idempotency-Key's record, else 0
-- ARGV[13] -> body_hash: the request body's digest, under an Idempotency-Key
-- ARGV[14] -> idem_until: until when this create, under way, holds its key (its undo's last chance), Unix ms
-- ARGV[15] -> idem_ttl: how long a key is kept, ms
-- ARGV[16] -> queue_name: the queue the task joins ('' for none)
-- ARGV[17] -> queue_seq: its number there, taken already (0: take it from KEYS[8] if admitted; -1: none, it could not be taken)
-- ARGV[18] -> input: the task's input (jobs.EncodeInput), kept until it ends
-- ARGV[19] -> type: the task type
-- ARGV[20] -> model: the model id
-- ARGV[21] -> created: Unix ms
-- ARGV[22] -> callback_url: '' for none
-- ARGV[23] -> callback_events: comma separated
-- ARGV[24] -> valid_until: the create applies only while Redis's clock has not passed it, Unix ms (0: no bound)
-- ARGV[25] -> key_hash: the API key the create came with ('' for none: the console)
-- ARGV[26] -> spend_limit: that key's spend limit, credits (0: none)
-- ARGV[27] -> usage_until: when the day's usage expires, Unix ms
-- ARGV[28] -> queues: where the queues' numbers are kept, on one server (lib.lua's QUEUES; '' on a cluster)
-- ARGV[29] -> dry: 1 to check and price only (a quote): the rules checked as for a create, nothing written
-- ARGV[30] -> traceparent: the W3C traceparent of the create's span, kept when it was sampled ('' for none: nothing kept)
--
-- Returns {QUOTED, balance} for a dry run that passed the rules,
-- {CREATED, balance, '', queue number (0 if parked), admitted (1/0),
-- id, queue, deadline, ...} (other tasks of the account this create admitted,
-- for the caller to queue), {REPLAYED, 0, earlier task
-- id}, or a refusal {code, n}: NO_ACCOUNT, DISABLED, MODEL_NOT_ALLOWED,
-- TASK_EXISTS, INFLIGHT_LIMIT (n = the limit), NO_CREDITS (n = the
-- balance), IDEM_MISMATCH, IDEM_BUSY, LATE (it reached Redis after
-- valid_until: its caller has given up on it, and may have said so),
-- KEY_SPEND_LIMIT (n = what the key has spent).

local CREATED, REPLAYED, QUOTED = 1, 2, 3
local NO_ACCOUNT, DISABLED, MODEL_NOT_ALLOWED, TASK_EXISTS, INFLIGHT_LIMIT, NO_CREDITS, IDEM_MISMATCH, IDEM_BUSY, LATE = -1, -2, -3, -4, -5, -6, -7, -8, -9
local KEY_SPEND_LIMIT = -10

local K = {task = KEYS[1], account = KEYS[2], ledger = KEYS[3], parked = KEYS[4], due = KEYS[5]}
local index_key, idem_key, queue_key, spend_key, usage_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local now, ttl, price, default_max = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local deadline, tier, account_id, task_id = tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
local check_at, share, keep = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local with_idem, body_hash, idem_until, idem_ttl = ARGV[12] == '1', ARGV[13], ARGV[14], ARGV[15]
local queue_name, queue_seq = ARGV[16], tonumber(ARGV[17])
local input, task_type, model, created = ARGV[18], ARGV[19], ARGV[20], tonumber(ARGV[21])
local callback_url, callback_events, valid_until = ARGV[22], ARGV[23], tonumber(ARGV[24])
local key_hash, spend_limit, usage_until = ARGV[25], tonumber(ARGV[26]), ARGV[27]
QUEUES = ARGV[28]
local dry = ARGV[29] == '1'
local traceparent = ARGV[30]

-- Redis's own clock: a create held up (Redis hung, the network stalled)
-- past the time its caller waits for it never applies.
local clock = redis.call('TIME')
if valid_until > 0 and tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) > valid_until then return {LATE, 0} end

if with_idem then
  local v = redis.call('HMGET', idem_key, 'body', 'task', 'state', 'at')
  if v[1] then
    if v[1] ~= body_hash then return {IDEM_MISMATCH, 0} end
    if v[3] ~= 'done' and now < tonumber(v[4]) then return {IDEM_BUSY, 0} end
    return {REPLAYED, 0, v[2]}
  end
end
-- A record there already: a task of that id, or the tombstone an undo
-- left for a create it did not find (abort.lua).
if redis.call('EXISTS', K.task) == 1 then return {TASK_EXISTS, 0} end

-- The account's rules.
local a = redis.call('HMGET', K.account, 'status', 'credits', 'models', 'inflight_max', 'infl', 'adm', 'weight')
if not a[1] then return {NO_ACCOUNT, 0} end
if a[1] ~= 'active' then return {DISABLED, 0} end
if not allows(a[3], tier) then return {MODEL_NOT_ALLOWED, 0} end
local limit = tonumber(a[4] or '0') or 0
if limit == 0 then limit = default_max end
local infl = tonumber(a[5] or '0') or 0
if limit > 0 and infl >= limit then return {INFLIGHT_LIMIT, limit} end
local bal = tonumber(a[2] or '0') or 0
if bal < price then return {NO_CREDITS, bal} end
-- The key's spend limit, checked where the key is charged: racing creates
-- never pass it together.
if key_hash ~= '' and spend_limit > 0 then
  local spent = tonumber(redis.call('HGET', spend_key, key_hash) or '0') or 0
  if spent + price > spend_limit then return {KEY_SPEND_LIMIT, spent} end
end
if dry then return {QUOTED, bal} end

if with_idem then
  redis.call('HSET', idem_key, 'body', body_hash, 'task', task_id, 'state', 'creating', 'at', idem_until)
  redis.call('PEXPIRE', idem_key, idem_ttl)
end
local adm = tonumber(a[6] or '0') or 0
local fast = room(K, adm, a[7], share)
bal = charge(K, spend_key, usage_key, usage_until, now, keep, price, bal, task_id, key_hash, model)
-- One more unfinished task and, admitted at once, one more place taken.
if fast then
  redis.call('HSET', K.account, 'infl', int(infl + 1), 'adm', int(adm + 1))
else
  redis.call('HSET', K.account, 'infl', int(infl + 1))
end

-- The record, with the task's input and over how many fields it is kept
-- (get_input). Admitted at once, it takes its number in its queue now
-- (unless the caller took it).
local rec = {'type', task_type, 'model', model, 'status', 'pending', 'progress', '0',
  'ctime', int(created), 'price', int(price), 'dl', int(deadline)}
if callback_url ~= '' then
  put_long(rec, 'cb', callback_url)
  rec[#rec + 1] = 'cbev'; rec[#rec + 1] = callback_events
end
if queue_name ~= '' then rec[#rec + 1] = 'q'; rec[#rec + 1] = queue_name end
if key_hash ~= '' then rec[#rec + 1] = 'key'; rec[#rec + 1] = key_hash end
if traceparent ~= '' then rec[#rec + 1] = 'tp'; rec[#rec + 1] = traceparent end
local pieces = put_long(rec, 'in', input)
rec[#rec + 1] = 'inn'; rec[#rec + 1] = int(pieces)
local seq = nil
if fast then
  rec[#rec + 1] = 'adm'; rec[#rec + 1] = '1'
  seq = number(queue_key, queue_name, queue_seq, now)
  if seq then rec[#rec + 1] = 'qseq'; rec[#rec + 1] = int(seq) end
end
-- A pending record lives until its deadline and then ttl more: the
-- deadline's check always finds it. A deadline already past (a caller's
-- clock behind ours) still gives it ttl: a negative time to live would
-- delete the record just written, and fail the script after the debit.
local live = math.max(deadline - now, 0) + ttl
redis.call('HSET', K.task, unpack(rec))
redis.call('PEXPIRE', K.task, int(live))

local admitted, others = admit(K, fast, share, now, check_at, deadline, created, account_id, task_id)
if admitted and not fast then
  -- On one server promote numbered it with the others it admitted.
  seq = tonumber(redis.call('HGET', K.task, 'qseq'))
  if not seq then
    seq = number(queue_key, queue_name, queue_seq, now)
    if seq then redis.call('HSET', K.task, 'qseq', int(seq)) end
  end
end
index(index_key, task_id, now, live)

local reply = {CREATED, bal, '', seq or 0, admitted and 1 or 0}
for i = 1, #others do reply[#reply + 1] = others[i] end
return reply
