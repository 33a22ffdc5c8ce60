-- dequeued.lua: counts tasks out of a queue (a worker started them, or
-- they were canceled, failed or undone while pending), and samples the
-- count for the rate the queue moves at: on a Redis Cluster, where the
-- scripts that take tasks out cannot reach the queue's key (lib.lua's
-- QUEUES), the store counts them so, a batch of them a call.
--
-- KEYS[1] -> queue: the queue's numbers
-- ARGV[1] -> n: how many left
-- ARGV[2] -> now: Unix ms
--
-- Returns {COUNTED, dequeued so far}.

local COUNTED = 1

local queue_key = KEYS[1]
local n, now = ARGV[1], tonumber(ARGV[2])

return {COUNTED, dequeued(queue_key, n, now)}
