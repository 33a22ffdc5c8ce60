-- hook_queued.lua: records that the delivery of an event of a task is
-- queued: a final event leaves the shard's due work (where the script that
-- ended the task put it, for the recovery), and the delivery is listed
-- pending until its first attempt, and on the account's recent
-- deliveries (the newest keep, kept as long as a task's log).
--
-- KEYS[1] -> log: the task's delivery log
-- KEYS[2] -> due: the shard's due work
-- KEYS[3] -> recent: the account's recent deliveries ("<task>|<event>:<seq>" → when listed, Unix ms)
-- ARGV[1] -> delivery: the delivery's id (event:seq)
-- ARGV[2] -> now: Unix ms
-- ARGV[3] -> ttl: the log's time to live, ms
-- ARGV[4] -> member: the event's due entry ('' for a progress event, never due)
-- ARGV[5] -> task: the task's id
-- ARGV[6] -> keep: how many recent deliveries the account keeps
--
-- Returns {LISTED}.

local LISTED = 1

local log_key, due_key, recent_key = KEYS[1], KEYS[2], KEYS[3]
local delivery, now, ttl, member = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local task_id, keep = ARGV[5], tonumber(ARGV[6])

if member ~= '' then redis.call('ZREM', due_key, member) end
redis.call('HSETNX', log_key, 's:' .. delivery, 'pending ' .. now)
redis.call('PEXPIRE', log_key, ttl)
if redis.call('ZADD', recent_key, 'NX', now, task_id .. '|' .. delivery) == 1 then
  redis.call('ZREMRANGEBYRANK', recent_key, 0, -keep - 1)
end
redis.call('PEXPIRE', recent_key, ttl)
return {LISTED}
