-- revoke_key.lua: revokes an API key.
--
-- KEYS[1] -> key: the API key's record
-- ARGV[1] -> now: Unix ms, the revocation's time
--
-- Returns {code}: REVOKED, NO_KEY, or WAS_REVOKED (nothing changed).

local REVOKED, NO_KEY, WAS_REVOKED = 1, 0, 2

local key_key, now = KEYS[1], ARGV[1]

if redis.call('EXISTS', key_key) == 0 then return {NO_KEY} end
if tonumber(redis.call('HGET', key_key, 'revoked') or '0') > 0 then return {WAS_REVOKED} end
redis.call('HSET', key_key, 'revoked', now)
return {REVOKED}
