-- unlease.lua: gives a shard's lease back, if the holder has it.
--
-- KEYS[1] -> lease: the shard's lease
-- ARGV[1] -> holder: who gives it back
--
-- Returns {code}: RELEASED, or TAKEN (the holder did not have it).

local RELEASED, TAKEN = 1, 0

local lease_key, holder = KEYS[1], ARGV[1]

if redis.call('GET', lease_key) ~= holder then return {TAKEN} end
redis.call('DEL', lease_key)
return {RELEASED}
