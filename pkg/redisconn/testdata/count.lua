-- count.lua: counts one more in a hash field, for the batcher's tests.
--
-- KEYS[1] -> counter: the hash
-- ARGV[1] -> field: the field counted in
--
-- Returns {COUNTED, the count}.

local COUNTED = 1

local counter, field = KEYS[1], ARGV[1]

return {COUNTED, redis.call('HINCRBY', counter, field, 1)}
