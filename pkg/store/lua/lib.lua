-- lib.lua: what several scripts share. It is put before each script's own
-- text (script.go), so its functions take the keys they touch as
-- arguments, and the script binds its KEYS and ARGV to named locals.
--
-- The task keys (K) a task's state changes touch, all in the slot of the
-- account's shard: K.task (the record), K.account, K.ledger (credit
-- movements), K.parked (the
-- account's tasks waiting for a place, oldest first), K.due (the shard's
-- due work: a task's next check, a webhook event to queue).
--
-- Promotion (promote) admits the account's oldest parked tasks into the
-- places its end freed: it touches those tasks' records, whose names it
-- makes from K.task's prefix. They are not in KEYS, but always in
-- the same slot (the shard's hash tag), which Redis allows. So is a short
-- ledger's hash, which ledger names from K.ledger. The queues' numbers
-- (QUEUES) are touched undeclared only on one server, where there are no
-- slots.

-- Outcomes of a change of a task's state (task.Outcome). HELD is the
-- store's own: the run holding the task names a worker the caller is to
-- judge (alive or dead) before it calls again (died).
local APPLIED, FINAL, MISSING, SUPERSEDED, POISONED, BUSY, HELD = 0, 1, 2, 3, 4, 5, 6

-- final reports whether a status is an end state.
local function final(st)
  return st == 'completed' or st == 'failed' or st == 'canceled'
end

-- notify publishes a change of the task of task_key (store.EventsChannel).
local function notify(task_key)
  redis.call('PUBLISH', 'easel:task-events', task_key)
end

-- redis_ms is Redis's own clock in Unix ms, read once a script (TIME):
-- the create's and undo's bound and a short ledger's entry ids share it.
local clock_ms
local function redis_ms()
  if not clock_ms then
    local c = redis.call('TIME')
    clock_ms = tonumber(c[1]) * 1000 + math.floor(tonumber(c[2]) / 1000)
  end
  return clock_ms
end

-- int is n written as an integer: Redis formats a number given to
-- redis.call with %.17g, a float's slow path; the scripts' numbers are
-- whole (milliseconds, credits, counts).
local function int(n) return string.format('%d', n) end

-- An account's ledger is a hash while it is short, under its own key (the
-- ledger's key and LEDGER_SHORT_PART: keys.go's ledgerShortKey, in the
-- account's slot): entry id ('<ms>-<seq>', as a stream's) →
-- 'kind|amount|balance|task|note' (task and note may be ''; the note,
-- last, may hold '|'). A stream's first node costs about 4.7 KB however
-- few its entries; the hash, about 100 bytes an entry. Past LEDGER_SHORT
-- entries the hash's entries move to a stream under the ledger's key,
-- with the same ids, and the hash goes; once the stream exists every
-- entry goes there. The ledger's key is only ever a stream: Easel before
-- the hash XADDs to it and reads it (XRANGE), so mixed versions never
-- meet a WRONGTYPE. The hash may then hold entries beside a stream one
-- such process started; reads merge the two by id (ledger_read.lua).
local LEDGER_SHORT = 16
local LEDGER_SHORT_PART = ':h'

-- ledger_id reads a ledger entry's id: its ms and seq.
local function ledger_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

-- ledger_fields are a short ledger's entry value as a stream entry's
-- fields.
local function ledger_fields(v)
  local kind, amount, balance, task_id, note = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  local e = {'kind', kind, 'amount', amount, 'balance', balance}
  if task_id ~= '' then e[#e + 1] = 'task'; e[#e + 1] = task_id end
  if note ~= '' then e[#e + 1] = 'note'; e[#e + 1] = note end
  return e
end

-- ledger_entries are a short ledger's entries (short_key: its hash),
-- oldest first: {ms, seq, id, value}.
local function ledger_entries(short_key)
  local h = redis.call('HGETALL', short_key)
  local out = {}
  for i = 1, #h, 2 do
    local ms, seq = ledger_id(h[i])
    out[#out + 1] = {ms, seq, h[i], h[i + 1]}
  end
  table.sort(out, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  return out
end

-- ledger_trim drops a short ledger's entries older than keep ms (0: keep
-- all), and returns the ones kept.
local function ledger_trim(short_key, now, keep)
  local kept, gone = {}, {}
  for _, e in ipairs(ledger_entries(short_key)) do
    if keep > 0 and e[1] < now - keep then gone[#gone + 1] = e[3] else kept[#kept + 1] = e end
  end
  if #gone > 0 then redis.call('HDEL', short_key, unpack(gone)) end
  return kept
end

-- ledger_short adds an entry to a short ledger (short_key: its hash, or
-- none yet) of a ledger with no stream (ledger_key), as XADD MINID would
-- to a stream: the entries older than keep ms go, and the new one's id is
-- Redis's clock's ms, or the last id's ms with the next seq when the
-- clock is not past it. Past LEDGER_SHORT entries it moves the ones kept
-- into the stream instead, deletes the hash, and returns false: the
-- caller adds the new one there.
local function ledger_short(ledger_key, short_key, now, keep, kind, amount, balance, task_id, note)
  local kept = ledger_trim(short_key, now, keep)
  if #kept >= LEDGER_SHORT then
    redis.call('DEL', short_key)
    for _, e in ipairs(kept) do
      redis.call('XADD', ledger_key, e[3], unpack(ledger_fields(e[4])))
    end
    return false
  end
  local ms, seq = redis_ms(), 0
  local last = kept[#kept]
  if last and last[1] >= ms then ms, seq = last[1], last[2] + 1 end
  redis.call('HSET', short_key, int(ms) .. '-' .. int(seq),
    kind .. '|' .. int(amount) .. '|' .. int(balance) .. '|' .. task_id .. '|' .. note)
  return true
end

-- ledger appends a credit movement (task_id and note may be ''), drops
-- the entries older than keep ms (0: keep all), and lets the ledger of an
-- account that moves no credits for keep ms expire whole: its stream
-- (ledger_key) and its short form's hash alike. An account with a stream
-- costs two commands an entry: the XADD (NOMKSTREAM: nothing when there
-- is no stream, and the entry goes to the hash) and its PEXPIRE. A hash
-- left beside a stream (an older Easel's XADD started it) is no longer
-- written, so it is not trimmed either: it expires whole keep ms after its
-- last entry, and reads leave out its entries past the retention
-- (ledger_read.lua).
local function ledger(ledger_key, now, keep, kind, amount, balance, task_id, note)
  -- XADD's arguments after the key: NOMKSTREAM (taken out below for a
  -- new stream), the trim, the id and the entry's fields.
  local args = {'NOMKSTREAM'}
  if keep > 0 then args[#args + 1] = 'MINID'; args[#args + 1] = int(now - keep) end
  args[#args + 1] = '*'
  for _, v in ipairs({'kind', kind, 'amount', int(amount), 'balance', int(balance)}) do args[#args + 1] = v end
  if task_id ~= '' then args[#args + 1] = 'task'; args[#args + 1] = task_id end
  if note ~= '' then args[#args + 1] = 'note'; args[#args + 1] = note end
  if not redis.call('XADD', ledger_key, unpack(args)) then
    local short_key = ledger_key .. LEDGER_SHORT_PART
    if ledger_short(ledger_key, short_key, now, keep, kind, amount, balance, task_id, note) then
      if keep > 0 then redis.call('PEXPIRE', short_key, int(keep)) end
      return
    end
    -- The hash was full: its entries moved to a new stream, which takes
    -- this one too.
    table.remove(args, 1)
    redis.call('XADD', ledger_key, unpack(args))
  end
  if keep > 0 then redis.call('PEXPIRE', ledger_key, int(keep)) end
end

-- QUEUES is where the queues' numbers are kept (store.queueKey's prefix:
-- a queue's key is QUEUES .. name .. '}'), when the scripts keep them
-- themselves: on one server, where every key is at hand. On a Redis
-- Cluster a queue's key is on another slot than the task's, so it is '':
-- the scripts return the queues tasks left and joined, and the store
-- counts and numbers them (join_queue.lua, dequeued.lua, queue_seq.lua).
-- A script that takes tasks in or out of their queues sets it from its
-- queues argument before anything else.
local QUEUES = ''

-- SAMPLE_EVERY is the least time between two samples of a queue's
-- dequeued count, ms (store.queueSampleEvery).
local SAMPLE_EVERY = 10000

-- join_queue takes the next n numbers of a queue (queue_key: its numbers)
-- for n tasks joining it (1 when n is nil), and returns the last. Tasks
-- joining an empty queue start a busy period: the rate samples
-- (dequeued) restart, so the time the queue stood empty is not taken for
-- time its workers were slow.
local function join_queue(queue_key, now, n)
  n = n or 1
  local seq = redis.call('HINCRBY', queue_key, 'enq', n)
  local deq = tonumber(redis.call('HGET', queue_key, 'deq') or '0')
  if seq - n <= deq then
    redis.call('HSET', queue_key, 't0', int(now), 'n0', int(deq), 't1', int(now), 'n1', int(deq))
  end
  return seq
end

-- dequeued counts n tasks out of a queue (queue_key: its numbers), and
-- samples the count for the rate the queue moves at. Returns the count.
local function dequeued(queue_key, n, now)
  now = tonumber(now)
  local count = redis.call('HINCRBY', queue_key, 'deq', n)
  local v = redis.call('HMGET', queue_key, 't1', 'n1')
  local t1 = tonumber(v[1] or '0') or 0
  if now - t1 >= SAMPLE_EVERY then
    if t1 > 0 then redis.call('HSET', queue_key, 't0', t1, 'n0', v[2]) end
    redis.call('HSET', queue_key, 't1', int(now), 'n1', count)
  end
  return count
end

-- Fields a record keeps whole are at most 64 bytes, so that Redis keeps
-- the record as a compact listpack whatever its hash-max-listpack-value:
-- a longer value is split over field, field+1, field+2...
local PIECE = 64
-- put_long appends field and value to fields, a list of field-value
-- pairs for one HSET, the value split so, and returns how many fields
-- hold it.
local function put_long(fields, field, value)
  local n = #fields
  fields[n + 1], fields[n + 2] = field, string.sub(value, 1, PIECE)
  local i = 1
  while i * PIECE < #value do
    n = #fields
    fields[n + 1], fields[n + 2] = field .. '+' .. i, string.sub(value, i * PIECE + 1, (i + 1) * PIECE)
    i = i + 1
  end
  return i
end

-- A task's input is kept so (put_long, create.lua), and 'inn' says over
-- how many fields: it is read with one HMGET and removed with one HDEL.
-- A record an older create wrote has no 'inn': its pieces are found one
-- a command, until one is short or missing, as they were written.

-- input_pieces appends to fields the names of the input's pieces after
-- the first, n in all.
local function input_pieces(fields, n)
  for i = 1, n - 1 do fields[#fields + 1] = 'in' .. '+' .. i end
  return fields
end

-- get_input returns the task's input, given the first piece and 'inn' as
-- read with the record's other fields; nil if it keeps none.
local function get_input(key, first, n)
  if not first then return nil end
  n = tonumber(n)
  local v, i = {first}, 1
  if n then
    if n > 1 then
      for _, more in ipairs(redis.call('HMGET', key, unpack(input_pieces({}, n)))) do
        if not more then break end
        v[#v + 1] = more
      end
    end
    return table.concat(v)
  end
  while #v[i] == PIECE do
    local more = redis.call('HGET', key, 'in' .. '+' .. i)
    if not more then break end
    i = i + 1
    v[i] = more
  end
  return table.concat(v)
end

-- UNFINISHED are the fields of a task's record only an unfinished task
-- needs: its deadline, the run that owns it, its crashes, when it was
-- admitted. Its input stays: the record shows it (the task's "input") as
-- long as it lives.
local UNFINISHED = {'run', 'live', 'crashes', 'tkn', 'dl', 'atime'}

-- wanted reports whether a callback (cb, its cbev: the task's fields of
-- those names, read by the caller) wants events of type ev: the one place
-- that decides it.
local function wanted(cb, cbev, ev)
  if not cb or cb == '' then return false end
  return string.find(',' .. (cbev or '') .. ',', ',' .. ev .. ',', 1, true) ~= nil
end
-- endpoint reads the account's default webhook endpoint (the account
-- record's 'whu', split as put_long splits it over 'whn' fields, and
-- 'whev') for a task without a callback of its own, and returns the
-- task's fields that take it ('cb', split as put_long splits it, and
-- 'cbev'), its URL and its events; none (nil) when the account has none.
local function endpoint(K)
  local a = redis.call('HMGET', K.account, 'whu', 'whn', 'whev')
  if not a[1] or a[1] == '' then return nil end
  local url, n = {a[1]}, tonumber(a[2] or '1') or 1
  if n > 1 then
    local names = {}
    for i = 1, n - 1 do names[i] = 'whu' .. '+' .. i end
    for _, more in ipairs(redis.call('HMGET', K.account, unpack(names))) do url[#url + 1] = more or '' end
  end
  local f = {}
  put_long(f, 'cb', table.concat(url))
  f[#f + 1] = 'cbev'; f[#f + 1] = a[3] or ''
  return f, a[1], a[3]
end
-- A task without a callback takes its account's default endpoint when it
-- starts (start.lua: the account having none, its 'cb' is written empty,
-- so that its events, their delivery and its delivery log read the task
-- alone), or at its first event if it never started; an endpoint set
-- later applies to the tasks that start after.
-- take_endpoint copies the account's endpoint into a task that has none
-- of its own, and returns its URL and events, or nil.
local function take_endpoint(K)
  local f, url, events = endpoint(K)
  if not f then return nil end
  redis.call('HSET', K.task, unpack(f))
  return url, events
end
-- wants reports whether the task's callback (its own, else its account's
-- default endpoint) wants events of type ev. r holds the task's cb and
-- cbev as its caller read them (ending), or is nil: read them here.
local function wants(K, ev, r)
  local v = r and {r.cb, r.cbev} or redis.call('HMGET', K.task, 'cb', 'cbev')
  if v[1] then return wanted(v[1], v[2], ev) end
  local url, events = take_endpoint(K)
  return wanted(url, events, ev)
end

-- due members: a task's next check ('t|<account>|<task>') and a webhook
-- event to queue ('h|<account>|<task>|<event>').
local function task_due(account_id, task_id) return 't|' .. account_id .. '|' .. task_id end
local function hook_due(account_id, task_id, ev) return 'h|' .. account_id .. '|' .. task_id .. '|' .. ev end

-- hook puts a final event of the task on the shard's due work, due at
-- hook_at (the queueing's recovery), when its callback wants it; it
-- reports whether it did (1) or not (0).
local function hook(K, ev, hook_at, account_id, task_id, r)
  if not wants(K, ev, r) then return 0 end
  redis.call('ZADD', K.due, 'NX', hook_at, hook_due(account_id, task_id, ev))
  return 1
end

-- usage_key_tag names an API key (by its hash) in a day's usage: the
-- hash's first 12 hex digits, "<model>|<tag>|n" beside "<model>|n", so a
-- field stays well under 64 bytes.
local function usage_key_tag(key_hash) return string.sub(key_hash, 1, 12) end

-- refund gives a task's price back, once, and returns the credits given:
-- to the account, to what its API key has spent, and out of the usage of
-- the day it was made (while that is kept). The keys of the account's
-- slot it names are the account's ("a:<account>:" and spend or use:<day>,
-- as store/keys.go makes them). With missing and asked (a completed
-- task that made fewer images than it was asked), it gives back the
-- price of the missing images alone, missing/asked of it, and the task
-- stays in the day's count of tasks; once either refund is made no other
-- is ('refunded').
local function refund(K, now, keep, task_id, note, missing, asked)
  missing, asked = missing or 1, asked or 1
  local v = redis.call('HMGET', K.task, 'price', 'refunded', 'key', 'model', 'ctime')
  local price = tonumber(v[1] or '0') or 0
  if price <= 0 or v[2] == '1' or missing <= 0 or asked <= 0 or redis.call('EXISTS', K.account) == 0 then return 0 end
  local amount = math.floor(price * math.min(missing, asked) / asked)
  if amount <= 0 then return 0 end
  local bal = redis.call('HINCRBY', K.account, 'credits', int(amount))
  redis.call('HSET', K.task, 'refunded', 1)
  ledger(K.ledger, now, keep, 'refund', amount, bal, task_id, note)
  local base = string.sub(K.account, 1, -5) -- "...:a:<account>:" of "...:a:<account>:acct"
  if v[3] and v[3] ~= '' then redis.call('HINCRBY', base .. 'spend', v[3], int(-amount)) end
  local use = base .. 'use:' .. int(math.floor((tonumber(v[5] or '0') or 0) / 86400000))
  if v[4] and redis.call('HEXISTS', use, v[4] .. '|c') == 1 then
    local of = {v[4] .. '|'}
    if v[3] and v[3] ~= '' then of[2] = v[4] .. '|' .. usage_key_tag(v[3]) .. '|' end
    for _, f in ipairs(of) do
      -- A task refunded whole leaves the day's count of tasks, and counts
      -- as refunded; the images it did not make, only their credits.
      if amount == price then
        redis.call('HINCRBY', use, f .. 'n', -1)
        redis.call('HINCRBY', use, f .. 'r', 1)
      end
      redis.call('HINCRBY', use, f .. 'c', int(-amount))
      redis.call('HINCRBY', use, f .. 'rc', int(amount))
    end
  end
  return amount
end

-- left takes the task off its queue's books: on one server (QUEUES) it
-- counts it out of its queue itself and returns ''; on a cluster it
-- returns the queue it was waiting in ('' if none), for the caller to
-- count it out (dequeued.lua). r holds the task's q and qseq as its
-- caller read them, or is nil: read them here. The fields go from the
-- record: added to del, the caller's deletions, or deleted here; a task
-- that starts (r.started) keeps q, its job's queue, for the queue checks
-- of its run (due.lua), and loses its number only.
local function left(K, now, r, del)
  local v = r and {r.q, r.qseq} or redis.call('HMGET', K.task, 'q', 'qseq')
  if not v[1] then return '' end
  if r and r.started then
    if not v[2] then return '' end
    redis.call('HDEL', K.task, 'qseq')
  elseif del then
    del[#del + 1] = 'q'; del[#del + 1] = 'qseq'
  else
    redis.call('HDEL', K.task, 'q', 'qseq')
  end
  if not v[2] then return '' end
  if QUEUES ~= '' then
    dequeued(QUEUES .. v[1] .. '}', 1, now)
    return ''
  end
  return v[1]
end

-- release_place gives back the task's place among the account's
-- admitted tasks (if it had one: else it was parked) and takes it off the
-- account's unfinished tasks: what every way out of pending or processing
-- does, once (the status it leaves is guarded by its caller). r and del
-- as left's: r.adm as read, the field 'adm' deleted through del.
local function release_place(K, task_id, r, del)
  local adm
  if r then adm = r.adm else adm = redis.call('HGET', K.task, 'adm') end
  if adm == '1' then
    redis.call('HINCRBY', K.account, 'adm', -1)
    if del then del[#del + 1] = 'adm' else redis.call('HDEL', K.task, 'adm') end
  else
    redis.call('ZREM', K.parked, task_id)
  end
  redis.call('HINCRBY', K.account, 'infl', -1)
end

-- decr takes one off a counter of the account, never below zero (the
-- repair of forget, promote).
local function decr(account_key, field)
  if (tonumber(redis.call('HGET', account_key, field) or '0') or 0) > 0 then
    redis.call('HINCRBY', account_key, field, -1)
  end
end

-- forget settles the account's books for a task whose record is gone
-- though the task never ended (it expired or was evicted unfinished: every
-- change that ends or removes a task takes its due entry off in the same
-- step): its due entry goes, it stops counting as unfinished, and gives
-- back its place if it held one (it did unless it is parked). Whoever
-- takes the entry off settles them, once.
local function forget(K, account_id, task_id)
  if redis.call('ZREM', K.due, task_due(account_id, task_id)) == 0 then return end
  if redis.call('ZREM', K.parked, task_id) == 0 then decr(K.account, 'adm') end
  decr(K.account, 'infl')
end

-- window is how many of an account's tasks may be admitted (queued or
-- running) at once: share × its weight (the account's 'weight' field as
-- read); 0: no limit.
local function window(share, weight)
  if share <= 0 then return 0 end
  local w = tonumber(weight or '1') or 1
  if w < 1 then w = 1 end
  return share * w
end

-- promote admits the account's oldest parked tasks while its window has
-- room, and returns them with their queues and deadlines: {id, queue,
-- deadline, id, queue, deadline, ...}, for the caller to queue their jobs. Each is due for its first
-- queue check at check_at, or at its deadline if that is sooner. On one
-- server (QUEUES) each takes its number in its queue here, in the order
-- they are admitted; on a cluster the caller numbers them.
local function promote(K, share, check_at, now, account_id, task_id)
  if redis.call('ZCARD', K.parked) == 0 then return {} end
  local a = redis.call('HMGET', K.account, 'adm', 'weight')
  local limit, adm = window(share, a[2]), tonumber(a[1] or '0') or 0
  local prefix = string.sub(K.task, 1, #K.task - #task_id - 2)
  local out = {}
  -- Only this loop changes the account's admitted count meanwhile: it is
  -- counted here, not read again.
  while limit == 0 or adm < limit do
    local head = redis.call('ZPOPMIN', K.parked)
    if #head == 0 then break end
    local id = head[1]
    local rec = prefix .. 't:' .. id
    local v = redis.call('HMGET', rec, 'status', 'dl', 'q', 'tp')
    local st = v[1]
    if st == 'pending' then
      local q = v[3] or ''
      local set = {'adm', 1}
      -- A traced task keeps when it was admitted: its run's trace shows
      -- its time parked (an untraced one costs nothing more).
      if v[4] then set[#set + 1] = 'atime'; set[#set + 1] = now end
      if QUEUES ~= '' and q ~= '' then
        set[#set + 1] = 'qseq'; set[#set + 1] = int(join_queue(QUEUES .. q .. '}', now))
      end
      redis.call('HSET', rec, unpack(set))
      adm = redis.call('HINCRBY', K.account, 'adm', 1)
      -- Its first queue check, or its deadline if that comes first.
      local at = tonumber(check_at)
      local dl = tonumber(v[2] or '0') or 0
      if dl > 0 and dl < at then at = dl end
      redis.call('ZADD', K.due, at, task_due(account_id, id))
      out[#out + 1] = id
      out[#out + 1] = q
      out[#out + 1] = dl
    elseif not st then
      -- Its record is gone, the task unfinished (forget): parked, it held
      -- no place.
      if redis.call('ZREM', K.due, task_due(account_id, id)) == 1 then decr(K.account, 'infl') end
    end
  end
  return out
end

-- ENDING are the fields of a task's record its way out reads (ended):
-- its queue and number in it, its place, its callback.
local ENDING = {'q', 'qseq', 'adm', 'cb', 'cbev'}

-- ending reads them ({q, qseq, adm, cb, cbev}, absent fields nil) from the
-- record, or from v, the values of a caller's HMGET that asked for them
-- from its from-th field on.
local function ending(key, v, from)
  if not v then v, from = redis.call('HMGET', key, unpack(ENDING)), 1 end
  return {q = v[from], qseq = v[from + 1], adm = v[from + 2], cb = v[from + 3], cbev = v[from + 4]}
end

-- ended moves a task to a final status: it stops counting as in flight,
-- gives its place back, its due check goes, and it is kept ttl more. What
-- only an unfinished task needs (the run that owns it, its crashes) goes:
-- a final record keeps what it shows. The record is read once (r: as
-- ending reads it, or nil), written once (with set, the caller's other
-- fields, field and value in turn) and its fields deleted once.
-- Returns whether a webhook event went on the due work (1) and the queue
-- it left ('' for none).
local function ended(K, status, ev, now, ttl, hook_at, account_id, task_id, set, r)
  r = r or ending(K.task)
  set = set or {}
  set[#set + 1] = 'status'; set[#set + 1] = status
  set[#set + 1] = 'etime'; set[#set + 1] = now
  redis.call('HSET', K.task, unpack(set))
  local del = {unpack(UNFINISHED)}
  local q = left(K, now, r, del)
  release_place(K, task_id, r, del)
  redis.call('HDEL', K.task, unpack(del))
  redis.call('PEXPIRE', K.task, ttl)
  redis.call('ZREM', K.due, task_due(account_id, task_id))
  local hooked = hook(K, ev, hook_at, account_id, task_id, r)
  notify(K.task)
  return hooked, q
end

-- fail ends a task failed with a code and a message, refunded. Returns
-- hooked, the credits refunded and the queue it left.
local function fail(K, now, ttl, keep, hook_at, code, msg, account_id, task_id)
  local f = {'ecode', code}
  put_long(f, 'emsg', msg)
  redis.call('HSET', K.task, unpack(f))
  local hooked, q = ended(K, 'failed', 'task.failed', now, ttl, hook_at, account_id, task_id)
  return hooked, refund(K, now, keep, task_id, code), q
end

-- died tells whether the run holding a task ended with its worker's
-- death, the only thing that counts as a crash. live is the task's live
-- field: the worker that started the run ('1' from a worker that names
-- none; '0' or none: the run let go, or never started). A run let go, or
-- started by the worker asking (me: its Release was lost, Redis being
-- away), or by a worker the caller judged alive (judged, dead '0': it
-- lives, or it stopped gracefully) did not crash. Returns true, false, or
-- nil when live names a worker the caller has yet to judge.
local function died(live, me, judged, dead)
  if not live or live == '' or live == '0' then return false end
  if live == '1' then return true end
  if live == me then return false end
  if live == judged then return dead == '1' end
  return nil
end

-- crashed counts a crash of the task's run; past max crashes it fails the
-- task (worker_crashed). Returns whether it failed it, hooked, refunded
-- and the queue it left.
local function crashed(K, crashes, max, now, ttl, keep, hook_at, msg, account_id, task_id)
  crashes = crashes + 1
  redis.call('HSET', K.task, 'crashes', crashes)
  if crashes > tonumber(max) then
    local hooked, refunded, q = fail(K, now, ttl, keep, hook_at, 'worker_crashed', msg, account_id, task_id)
    return true, hooked, refunded, q
  end
  return false, 0, 0, ''
end

-- What a create does (create.lua), step by step.

-- allows reports whether an account's models (comma separated; nil or
-- '': any) allow a model's tier.
local function allows(models, tier)
  if not models or models == '' then return true end
  for m in string.gmatch(models, '[^,]+') do
    if m == tier then return true end
  end
  return false
end

-- room reports whether a new task of the account is admitted at once:
-- nothing of it waits parked and its window has room (share × its weight,
-- from the account record: adm its admitted tasks; share 0: no limit).
-- Else it is parked behind what waits, and as many as the window holds
-- are admitted, oldest first (admit, promote).
local function room(K, adm, weight, share)
  if redis.call('ZCARD', K.parked) ~= 0 then return false end
  if share <= 0 then return true end
  local w = tonumber(weight or '1') or 1
  if w < 1 then w = 1 end
  return adm < share * w
end

-- charge debits a task's price (bal: the account's credits before) with
-- its ledger entry, charges it to the API key that created it (key_hash;
-- '' for none) and counts it in the day's usage of its model, and of its
-- model and key (refund takes a refunded task out again and counts it
-- refunded; a free task is no one's usage).
-- Returns the credits left.
local function charge(K, spend_key, usage_key, usage_until, now, keep, price, bal, task_id, key_hash, model)
  if price <= 0 then return bal end
  bal = redis.call('HINCRBY', K.account, 'credits', int(-price))
  ledger(K.ledger, now, keep, 'debit', -price, bal, task_id, '')
  if key_hash ~= '' then redis.call('HINCRBY', spend_key, key_hash, int(price)) end
  if redis.call('HINCRBY', usage_key, model .. '|n', 1) == 1 then redis.call('PEXPIREAT', usage_key, usage_until) end
  redis.call('HINCRBY', usage_key, model .. '|c', int(price))
  if key_hash ~= '' then
    local f = model .. '|' .. usage_key_tag(key_hash) .. '|'
    redis.call('HINCRBY', usage_key, f .. 'n', 1)
    redis.call('HINCRBY', usage_key, f .. 'c', int(price))
  end
  return bal
end

-- number is the number in its queue of a task admitted (queue_seq: taken
-- by the caller already; 0: taken now from queue_key; -1: none, it could
-- not be taken), for its position; nil when it has none.
local function number(queue_key, queue_name, queue_seq, now)
  if queue_name == '' or queue_seq < 0 then return nil end
  if queue_seq == 0 then return join_queue(queue_key, now) end
  return queue_seq
end

-- admit puts a new task on the due work: admitted at once (fast), due
-- for its first queue check at check_at, or at its deadline if that comes
-- first; else parked (since created) and due at its deadline until
-- admitted, and the account's oldest parked tasks admitted while its
-- window has room (promote). Returns whether the task is admitted, and
-- the others admitted: {id, queue, deadline, ...}.
local function admit(K, fast, share, now, check_at, deadline, created, account_id, task_id)
  if fast then
    redis.call('ZADD', K.due, int(math.min(check_at, deadline)), task_due(account_id, task_id))
    return true, {}
  end
  redis.call('ZADD', K.due, int(deadline), task_due(account_id, task_id))
  redis.call('ZADD', K.parked, int(created), task_id)
  local promoted = promote(K, share, check_at, now, account_id, task_id)
  local admitted, others = false, {}
  for i = 1, #promoted, 3 do
    if promoted[i] == task_id then
      admitted = true
    else
      others[#others + 1] = promoted[i]
      others[#others + 1] = promoted[i + 1]
      others[#others + 1] = promoted[i + 2]
    end
  end
  return admitted, others
end

-- index lists a task in the account's task index while its record can
-- live (live ms from now).
local function index(index_key, task_id, now, live)
  if string.sub(task_id, -2) == '00' then
    -- One create in a hundred (by its id's random digits) drops what has
    -- expired; listing skips it meanwhile.
    redis.call('ZREMRANGEBYSCORE', index_key, '-inf', int(now - live))
  end
  redis.call('ZADD', index_key, int(now), task_id)
  redis.call('PEXPIRE', index_key, int(live))
end
