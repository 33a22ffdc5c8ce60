-- start.lua: gives a task to a run and moves it to processing (the first
-- time), taking one of the account's places. A task already processing
-- for the same run (a retry) stays processing and keeps its progress; if
-- that run never let go (release.lua), its worker died holding it: a
-- crash, and past max_crashes the task fails (worker_crashed, refunded).
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> account: the account record
-- KEYS[3] -> inflight: the account's unfinished tasks
-- KEYS[4] -> ledger: the account's credit ledger
-- KEYS[5] -> checks: the account's queue checks
-- KEYS[6] -> running: the account's places
-- KEYS[7] -> outbox: the account's webhook outbox
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> run: the run starting
-- ARGV[3] -> max_crashes
-- ARGV[4] -> ttl: the record's time to live once final, ms
-- ARGV[5] -> crash_message
-- ARGV[6] -> task_id
-- ARGV[7] -> place_limit: the account's places (0: no limit)
-- ARGV[8] -> place_until: when this place frees itself, Unix ms
--
-- Returns {outcome, refunded, hooked, queue left}: APPLIED, FINAL, MISSING,
-- SUPERSEDED, BUSY (the account has its places taken; nothing changed) or
-- POISONED (failed and refunded instead).

local K = {task = KEYS[1], account = KEYS[2], inflight = KEYS[3], ledger = KEYS[4],
  checks = KEYS[5], running = KEYS[6], outbox = KEYS[7]}
local now, run, max_crashes, ttl = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local crash_message, task_id = ARGV[5], ARGV[6]
local place_limit, place_until = tonumber(ARGV[7]) or 0, ARGV[8]

local v = redis.call('HMGET', K.task, 'status', 'run', 'live', 'crashes')
local st = v[1]
if not st then return {MISSING, 0, 0, ''} end
if final(st) then return {FINAL, 0, 0, ''} end
if v[2] and v[2] ~= '' and v[2] ~= run then return {SUPERSEDED, 0, 0, ''} end
if place_limit > 0 then
  -- The account's share: a place among its generations running now.
  redis.call('ZREMRANGEBYSCORE', K.running, '-inf', now)
  if not redis.call('ZSCORE', K.running, task_id) and redis.call('ZCARD', K.running) >= place_limit then
    return {BUSY, 0, 0, ''}
  end
  redis.call('ZADD', K.running, place_until, task_id)
  local last = redis.call('ZRANGE', K.running, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', K.running, last[2])
end
if st == 'processing' and v[3] == '1' then
  -- This run started before and never let go: its worker died.
  local failed, hooked, refunded, q = crashed(K, tonumber(v[4] or '0') or 0, max_crashes, now, ttl, crash_message, task_id)
  if failed then return {POISONED, refunded, hooked, q} end
end
local q = ''
if st == 'pending' then
  redis.call('HSET', K.task, 'status', 'processing', 'stime', now)
  redis.call('HDEL', K.task, 'job')
  q = left(K)
  redis.call('ZREM', K.checks, task_id)
  notify(K.task)
end
redis.call('HSET', K.task, 'run', run, 'live', 1)
return {APPLIED, 0, 0, q}
