-- cooldown.lua: stops a model's calls for a while, unless a longer
-- cooldown is on; the value is the end, in Unix ms (Redis time), for
-- people to read.
--
-- KEYS[1] -> cooldown: set while calls wait after a 429
-- ARGV[1] -> ms: how long calls wait
--
-- Returns {SET}, or {KEPT} (a longer cooldown is on).

local SET, KEPT = 1, 0

local cooldown_key = KEYS[1]
local ms = tonumber(ARGV[1])

redis.replicate_commands()
if redis.call('PTTL', cooldown_key) >= ms then
  return {KEPT}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', cooldown_key, now + ms, 'PX', ms)
return {SET}
