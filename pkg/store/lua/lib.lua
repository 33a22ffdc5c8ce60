-- lib.lua: what several scripts share. It is put before each script's own
-- text (script.go), so its functions take the keys they touch as
-- arguments, and the script binds its KEYS and ARGV to named locals.
--
-- The task keys (K) a task's state changes touch, all in the account's
-- slot: K.task (the record), K.account, K.inflight (unfinished tasks),
-- K.ledger (credit movements), K.checks (queue checks due), K.running (the
-- account's places), K.outbox (webhook events not yet queued).

-- Outcomes of a change of a task's state (task.Outcome).
local APPLIED, FINAL, MISSING, SUPERSEDED, POISONED, BUSY = 0, 1, 2, 3, 4, 5

-- final reports whether a status is an end state.
local function final(st)
  return st == 'completed' or st == 'failed' or st == 'canceled'
end

-- notify publishes a change of the task of task_key (store.EventsChannel).
local function notify(task_key)
  redis.call('PUBLISH', 'easel:task-events', task_key)
end

-- ledger appends a credit movement; task_id and note may be ''.
local function ledger(ledger_key, kind, amount, balance, task_id, note)
  local e = {'kind', kind, 'amount', amount, 'balance', balance}
  if task_id ~= '' then e[#e + 1] = 'task'; e[#e + 1] = task_id end
  if note ~= '' then e[#e + 1] = 'note'; e[#e + 1] = note end
  redis.call('XADD', ledger_key, '*', unpack(e))
end

-- wants reports whether the task's callback wants events of type ev: the
-- one place that decides it.
local function wants(task_key, ev)
  local v = redis.call('HMGET', task_key, 'cb', 'cbev')
  if not v[1] or v[1] == '' then return false end
  return string.find(',' .. (v[2] or '') .. ',', ',' .. ev .. ',', 1, true) ~= nil
end

-- hook puts a final event of the task in the account's outbox when its
-- callback wants it, and reports whether it did (1) or not (0).
local function hook(K, ev, now, ttl, task_id)
  if not wants(K.task, ev) then return 0 end
  redis.call('ZADD', K.outbox, 'NX', now, task_id .. '|' .. ev)
  redis.call('PEXPIRE', K.outbox, ttl)
  return 1
end

-- refund gives a task's price back, once, and returns the credits given.
local function refund(K, task_id, note)
  local v = redis.call('HMGET', K.task, 'price', 'refunded')
  local price = tonumber(v[1] or '0') or 0
  if price <= 0 or v[2] == '1' or redis.call('EXISTS', K.account) == 0 then return 0 end
  local bal = redis.call('HINCRBY', K.account, 'credits', price)
  redis.call('HSET', K.task, 'refunded', 1)
  ledger(K.ledger, 'refund', price, bal, task_id, note)
  return price
end

-- left takes the task off its queue's books: it returns the queue it was
-- waiting in ('' if none), for the caller to count it out (dequeued.lua).
local function left(K)
  local q = redis.call('HGET', K.task, 'q') or ''
  if q ~= '' then redis.call('HDEL', K.task, 'q', 'qseq') end
  return q
end

-- ended moves a task to a final status: it stops counting as in flight,
-- gives its place back, and is kept ttl more. Returns whether a webhook
-- event went to the outbox (1) and the queue it left ('' for none).
local function ended(K, status, ev, now, ttl, task_id)
  redis.call('HSET', K.task, 'status', status, 'etime', now, 'live', 0)
  redis.call('HDEL', K.task, 'job')
  local q = left(K)
  redis.call('PEXPIRE', K.task, ttl)
  redis.call('ZREM', K.inflight, task_id)
  redis.call('ZREM', K.checks, task_id)
  redis.call('ZREM', K.running, task_id)
  local hooked = hook(K, ev, now, ttl, task_id)
  notify(K.task)
  return hooked, q
end

-- fail ends a task failed with a code and a message, refunded. Returns
-- hooked, the credits refunded and the queue it left.
local function fail(K, now, ttl, code, msg, task_id)
  redis.call('HSET', K.task, 'ecode', code, 'emsg', msg)
  local hooked, q = ended(K, 'failed', 'task.failed', now, ttl, task_id)
  return hooked, refund(K, task_id, code), q
end

-- crashed counts a crash of the task's run; past max crashes it fails the
-- task (worker_crashed). Returns whether it failed it, hooked, refunded
-- and the queue it left.
local function crashed(K, crashes, max, now, ttl, msg, task_id)
  crashes = crashes + 1
  redis.call('HSET', K.task, 'crashes', crashes)
  if crashes > tonumber(max) then
    local hooked, refunded, q = fail(K, now, ttl, 'worker_crashed', msg, task_id)
    return true, hooked, refunded, q
  end
  return false, 0, 0, ''
end
