-- acquire.lua: takes a slot of a model's semaphore: removes the holders
-- whose lease has run out and adds the holder if fewer than the limit
-- remain; unless a cooldown is on. Times are Redis's.
--
-- KEYS[1] -> holders: the semaphore (holder → when its lease runs out, ms)
-- KEYS[2] -> cooldown: set while calls wait after a 429
-- ARGV[1] -> holder: the slot's holder
-- ARGV[2] -> limit: how many may hold at once
-- ARGV[3] -> lease: ms
--
-- Returns {ACQUIRED, 0} when it added the holder, {COOLING, ms} when a
-- cooldown has ms to run, {FULL, 0} when the semaphore is full.

local ACQUIRED, COOLING, FULL = 1, 0, -1

local holders_key, cooldown_key = KEYS[1], KEYS[2]
local holder, limit, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

redis.replicate_commands()
local cd = redis.call('PTTL', cooldown_key)
if cd > 0 then
  return {COOLING, cd}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', holders_key, '-inf', now)
if redis.call('ZCARD', holders_key) >= limit then
  return {FULL, 0}
end
redis.call('ZADD', holders_key, now + lease, holder)
redis.call('PEXPIRE', holders_key, 2 * lease)
return {ACQUIRED, 0}
