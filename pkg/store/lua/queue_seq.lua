-- queue_seq.lua: gives tasks of one account admitted on a cluster
-- (created or promoted) their numbers in their queues, each only if it
-- is still pending in that queue: one call an account of a batch.
--
-- The tasks' records ('<tag>t:<task>') are named from the account
-- record's key ('<tag>acct') and their ids: not in KEYS, but in the
-- account's slot.
--
-- KEYS[1] -> account: the account's record
-- ARGV[1] -> tasks: task id, queue name, number, for each task
--
-- Returns {SET, queue, ...}: then the queue of each number not taken (its
-- task left its queue meanwhile, or is gone), for the caller to give
-- back.

local SET = 1

local tag = string.sub(KEYS[1], 1, #KEYS[1] - 4)
local reply = {SET}
for i = 1, #ARGV, 3 do
  local task_key, queue_name, queue_seq = tag .. 't:' .. ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local v = redis.call('HMGET', task_key, 'status', 'q')
  if v[1] == 'pending' and v[2] == queue_name then
    redis.call('HSET', task_key, 'qseq', queue_seq)
  else
    reply[#reply + 1] = queue_name
  end
end
return reply
