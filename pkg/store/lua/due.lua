-- due.lua: reads a shard's due work, oldest first, at most limit entries
-- due by now, and moves each on to when it is next due (so a worker that
-- does not come back leaves nothing stuck):
--
--   - a task's check ('t|<account>|<task>'): a task ended or gone leaves
--     (one gone unfinished settles its account's counters: lib.lua's
--     forget); one past its deadline is returned to expire (x); an
--     admitted task still pending, or one processing, is returned for its
--     queue check (c: is its run's job on its queue? a failover can lose
--     the job of a task that started) and due again recheck later (not
--     past its deadline); a parked task is due again at its deadline;
--   - a final webhook event still unqueued ('h|...') is returned to queue
--     (h).
--
-- A task's keys (its record; its account's record and parked tasks, when
-- the record is gone) are named from the shard's prefix and the ids in the
-- entry: not in KEYS, but in the shard's slot.
--
-- KEYS[1] -> due: the shard's due work
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> limit: the most entries read
-- ARGV[3] -> recheck: how long until an admitted task is checked again, ms
-- ARGV[4] -> retry: how long until an entry returned is due again if its work is not done, ms
--
-- Returns {DUE, next, kind, account, task, a, b, c, ...}: next is when
-- the first entry left is due (-1: none); each row is kind x (a, b: '',
-- c: 0), c (a: the queue, b: the run, '' before any takeover, c: the
-- deadline) or h (a: the event, b: '', c: 0).

local DUE = 1

local due_key = KEYS[1]
local now, limit, recheck, retry = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local prefix = string.sub(due_key, 1, #due_key - 3)
local reply = {DUE, -1}
local entries = redis.call('ZRANGEBYSCORE', due_key, '-inf', now, 'LIMIT', 0, limit)
for _, m in ipairs(entries) do
  local kind, account_id, task_id, ev = string.match(m, '^(%a)|([^|]+)|([^|]+)|?(.*)$')
  if kind == 'h' then
    reply[#reply + 1] = 'h'; reply[#reply + 1] = account_id; reply[#reply + 1] = task_id
    reply[#reply + 1] = ev; reply[#reply + 1] = ''; reply[#reply + 1] = 0
    redis.call('ZADD', due_key, 'XX', now + retry, m)
  elseif kind == 't' then
    local acct = prefix .. 'a:' .. account_id .. ':'
    local v = redis.call('HMGET', acct .. 't:' .. task_id, 'status', 'adm', 'dl', 'q', 'run')
    local dl = tonumber(v[3] or '0') or 0
    if not v[1] then
      -- Gone unfinished: the account's books are settled (lib.lua's forget).
      forget({account = acct .. 'acct', parked = acct .. 'parked', due = due_key}, account_id, task_id)
    elseif final(v[1]) or dl == 0 then
      redis.call('ZREM', due_key, m)
    elseif now >= dl then
      reply[#reply + 1] = 'x'; reply[#reply + 1] = account_id; reply[#reply + 1] = task_id
      reply[#reply + 1] = ''; reply[#reply + 1] = ''; reply[#reply + 1] = 0
      redis.call('ZADD', due_key, 'XX', now + retry, m)
    elseif (v[1] == 'pending' and v[2] == '1') or v[1] == 'processing' then
      reply[#reply + 1] = 'c'; reply[#reply + 1] = account_id; reply[#reply + 1] = task_id
      reply[#reply + 1] = v[4] or ''; reply[#reply + 1] = v[5] or ''; reply[#reply + 1] = dl
      redis.call('ZADD', due_key, 'XX', math.min(now + recheck, dl), m)
    else
      redis.call('ZADD', due_key, 'XX', dl, m)
    end
  else
    redis.call('ZREM', due_key, m)
  end
end
local first = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')
if #first > 0 then reply[2] = tonumber(first[2]) end
return reply
