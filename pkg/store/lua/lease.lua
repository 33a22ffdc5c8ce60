-- lease.lua: takes a shard's lease for a holder, or renews it when the
-- holder has it already.
--
-- KEYS[1] -> lease: the shard's lease
-- ARGV[1] -> holder: who takes it
-- ARGV[2] -> ttl: how long the lease lasts without a renewal, ms
--
-- Returns {code}: HELD (taken or renewed), or TAKEN (another holder has
-- it).

local HELD, TAKEN = 1, 0

local lease_key, holder, ttl = KEYS[1], ARGV[1], ARGV[2]

local cur = redis.call('GET', lease_key)
if cur and cur ~= holder then return {TAKEN} end
redis.call('SET', lease_key, holder, 'PX', ttl)
return {HELD}
