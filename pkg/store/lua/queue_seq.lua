-- queue_seq.lua: gives a task admitted after its creation (promoted) its
-- number in its queue, if it is still pending there.
--
-- KEYS[1] -> task: the task record
-- ARGV[1] -> queue_name: the queue the number is of
-- ARGV[2] -> queue_seq: the number
--
-- Returns {code}: SET, or GONE (the task left its queue meanwhile; the
-- caller gives the number back).

local SET, GONE = 1, 0

local task_key, queue_name, queue_seq = KEYS[1], ARGV[1], ARGV[2]

local v = redis.call('HMGET', task_key, 'status', 'q')
if v[1] ~= 'pending' or v[2] ~= queue_name then return {GONE} end
redis.call('HSET', task_key, 'qseq', queue_seq)
return {SET}
