-- release.lua: a run lets go of its task alive (it will be retried, or
-- put back on its queue by a worker shutting down), so that its next
-- start is no crash. The task keeps its place: its job is still queued.
--
-- KEYS[1] -> task: the task record
-- ARGV[1] -> run: the run letting go
--
-- Returns {outcome}: APPLIED, or SUPERSEDED when the run did not own the
-- processing task (nothing changed).

local task_key, run = KEYS[1], ARGV[1]

local v = redis.call('HMGET', task_key, 'status', 'run')
if v[1] ~= 'processing' or v[2] ~= run then return {SUPERSEDED} end
redis.call('HSET', task_key, 'live', 0)
return {APPLIED}
