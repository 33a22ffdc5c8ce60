-- join_queue.lua: takes the next number of a queue for a task joining it
-- (in a Redis Cluster, where the queue's key is on another slot than the
-- task's; on one server the create takes it in its own step).
--
-- KEYS[1] -> queue: the queue's numbers
-- ARGV[1] -> now: Unix ms
--
-- Returns {JOINED, the number}.

local JOINED = 1

local queue_key, now = KEYS[1], tonumber(ARGV[1])

return {JOINED, join_queue(queue_key, now)}
