-- progress.lua: raises the progress of a task the run owns. It never
-- lowers it, and leaves tasks that are not processing or another run owns.
--
-- KEYS[1] -> task: the task record
-- ARGV[1] -> pct: the new progress, 1 to 99
-- ARGV[2] -> run: the run reporting it
--
-- Returns {code, hook}: {CHANGED, 1} when the task's callback wants
-- progress events, {CHANGED, 0} when not, {UNCHANGED, 0} when nothing
-- changed. It reads the record once, the callback with the rest: a write
-- is that read, the HSET and the PUBLISH.

local CHANGED, UNCHANGED = 1, 0

local task_key = KEYS[1]
local pct, run = tonumber(ARGV[1]), ARGV[2]

local v = redis.call('HMGET', task_key, 'status', 'progress', 'run', 'cb', 'cbev')
if v[1] ~= 'processing' or v[3] ~= run then return {UNCHANGED, 0} end
if pct <= tonumber(v[2]) then return {UNCHANGED, 0} end
redis.call('HSET', task_key, 'progress', pct)
notify(task_key)
local hook = 0
if wanted(v[4], v[5], 'task.progress') then hook = 1 end
return {CHANGED, hook}
