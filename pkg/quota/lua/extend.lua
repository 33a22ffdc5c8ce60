-- extend.lua: extends a holder's lease. A holder whose lease ran out
-- (Redis unreachable for a whole lease) is added again if fewer than the
-- limit hold: its call is still running.
--
-- KEYS[1] -> holders: the semaphore (holder → when its lease runs out, ms)
-- ARGV[1] -> holder: the slot's holder
-- ARGV[2] -> limit: how many may hold at once
-- ARGV[3] -> lease: ms
--
-- Returns {EXTENDED}, {RETAKEN} (added again), or {FULL} (the semaphore
-- is full without it).

local EXTENDED, RETAKEN, FULL = 1, 2, -1

local holders_key = KEYS[1]
local holder, limit, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', holders_key, '-inf', now)
local res = EXTENDED
if not redis.call('ZSCORE', holders_key, holder) then
  if redis.call('ZCARD', holders_key) >= limit then
    return {FULL}
  end
  res = RETAKEN
end
redis.call('ZADD', holders_key, now + lease, holder)
redis.call('PEXPIRE', holders_key, 2 * lease)
if res == RETAKEN then return {RETAKEN} end
return {EXTENDED}
