-- hook_attempt.lua: adds an attempt to a delivery's log and moves the
-- delivery to a state; the message is kept while it is retried.
--
-- KEYS[1] -> log: the task's delivery log
-- ARGV[1] -> delivery: the delivery's id (event:seq)
-- ARGV[2] -> state: pending, retrying, delivered or failed
-- ARGV[3] -> now: Unix ms
-- ARGV[4] -> attempt: the attempt's line (JSON and a newline)
-- ARGV[5] -> message: the message kept for the retries ('' to keep the stored one)
-- ARGV[6] -> ttl: the log's time to live, ms
-- ARGV[7] -> again: 1 for a redelivery the account asked for, recorded on an ended delivery too
--
-- Returns {code}: RECORDED, or ENDED (the delivery had ended already:
-- nothing recorded).

local RECORDED, ENDED = 1, 0

local log_key = KEYS[1]
local delivery, state, now, attempt, message, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local again = ARGV[7] == '1'

local s = redis.call('HGET', log_key, 's:' .. delivery)
local created = now
if s then
  local st, c = string.match(s, '^(%a+) (%d+)$')
  if (st == 'delivered' or st == 'failed') and not again then return {ENDED} end
  if c then created = c end
end
redis.call('HSET', log_key, 's:' .. delivery, state .. ' ' .. created)
local a = redis.call('HGET', log_key, 'a:' .. delivery) or ''
redis.call('HSET', log_key, 'a:' .. delivery, a .. attempt)
if state == 'delivered' or state == 'failed' then
  redis.call('HDEL', log_key, 'm:' .. delivery)
elseif message ~= '' then
  redis.call('HSET', log_key, 'm:' .. delivery, message)
end
redis.call('PEXPIRE', log_key, ttl)
return {RECORDED}
