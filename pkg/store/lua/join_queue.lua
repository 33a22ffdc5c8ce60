-- join_queue.lua: takes the next numbers of a queue for tasks joining it
-- (in a Redis Cluster, where the queue's key is on another slot than the
-- tasks'; on one server the create and promote take them in their own
-- step).
--
-- KEYS[1] -> queue: the queue's numbers
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> n: how many numbers (the tasks joining)
--
-- Returns {JOINED, the last number taken}: the tasks' numbers are it and
-- the n - 1 before it.

local JOINED = 1

local queue_key, now, n = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])

return {JOINED, join_queue(queue_key, now, n)}
