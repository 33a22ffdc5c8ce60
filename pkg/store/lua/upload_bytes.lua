-- upload_bytes.lua: counts an upload against its account's bytes of the
-- day, unless that would take the day over its budget.
--
-- KEYS[1] -> counter: the account's upload bytes of the day
-- ARGV[1] -> size: the upload's bytes
-- ARGV[2] -> budget: the most bytes a day
-- ARGV[3] -> expire_at: when the counter goes, Unix ms (after its day)
--
-- Returns {code, used}: COUNTED (used includes the upload) or OVER
-- (nothing counted; used as it was).

local COUNTED, OVER = 1, 0

local counter_key = KEYS[1]
local size, budget, expire_at = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local used = tonumber(redis.call('GET', counter_key) or '0')
if used + size > budget then return {OVER, used} end
used = redis.call('INCRBY', counter_key, size)
redis.call('PEXPIREAT', counter_key, expire_at)
return {COUNTED, used}
