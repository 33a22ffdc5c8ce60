-- attempt.lua: counts a sign-in attempt under a name before it is
-- checked, in one step: the count and its window start together (a count
-- never outlives its window), and concurrent attempts each see the others.
--
-- KEYS[1] -> count: the attempts counted under the name
-- ARGV[1] -> window: how long a count is kept after its first attempt, ms
--
-- Returns {COUNTED, attempts counted, ms until they are forgotten}.

local COUNTED = 1

local count_key = KEYS[1]
local window = ARGV[1]

local n = redis.call('INCR', count_key)
if n == 1 then redis.call('PEXPIRE', count_key, window) end
local ttl = redis.call('PTTL', count_key)
if ttl < 0 then redis.call('PEXPIRE', count_key, window); ttl = tonumber(window) end
return {COUNTED, n, ttl}
