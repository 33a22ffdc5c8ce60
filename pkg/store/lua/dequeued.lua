-- dequeued.lua: counts tasks out of a queue (a worker started them, or
-- they were canceled, failed or undone while pending), and samples the
-- count for the rate the queue moves at.
--
-- KEYS[1] -> queue: the queue's numbers
-- ARGV[1] -> n: how many left
-- ARGV[2] -> now: Unix ms
-- ARGV[3] -> sample_every: the least time between two samples, ms
--
-- Returns {COUNTED, dequeued so far}.

local COUNTED = 1

local queue_key = KEYS[1]
local n, now, sample_every = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local count = redis.call('HINCRBY', queue_key, 'deq', n)
local v = redis.call('HMGET', queue_key, 't1', 'n1')
local t1 = tonumber(v[1] or '0') or 0
if now - t1 >= sample_every then
  if t1 > 0 then redis.call('HSET', queue_key, 't0', t1, 'n0', v[2]) end
  redis.call('HSET', queue_key, 't1', now, 'n1', count)
end
return {COUNTED, count}
