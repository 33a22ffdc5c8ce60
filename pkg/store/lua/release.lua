-- release.lua: a run lets go of its task alive (it will be retried, or
-- put back on its queue by a worker shutting down), so that its next
-- start is no crash; its place is given back.
--
-- KEYS[1] -> task: the task record
-- KEYS[2] -> running: the account's places
-- ARGV[1] -> run: the run letting go
-- ARGV[2] -> task_id
--
-- Returns {outcome}: APPLIED, or SUPERSEDED when the run did not own the
-- processing task (nothing changed).

local task_key, running_key = KEYS[1], KEYS[2]
local run, task_id = ARGV[1], ARGV[2]

local v = redis.call('HMGET', task_key, 'status', 'run')
if v[1] ~= 'processing' or v[2] ~= run then return {SUPERSEDED} end
redis.call('HSET', task_key, 'live', 0)
redis.call('ZREM', running_key, task_id)
return {APPLIED}
