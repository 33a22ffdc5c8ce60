-- idempotency_done.lua: the create made under an Idempotency-Key stands
-- (its job is queued): the key replays it from now on.
--
-- KEYS[1] -> idem: the Idempotency-Key's record
-- ARGV[1] -> task_id: the task the key must name
--
-- Returns {code}: DONE, or OTHER (the key names another task, or none).

local DONE, OTHER = 1, 0

local idem_key, task_id = KEYS[1], ARGV[1]

if redis.call('HGET', idem_key, 'task') ~= task_id then return {OTHER} end
redis.call('HSET', idem_key, 'state', 'done')
return {DONE}
