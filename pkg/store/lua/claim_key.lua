-- claim_key.lua: writes an API key's record, only if there is none.
--
-- KEYS[1] -> key: the API key's record
-- ARGV[1] -> account_id
-- ARGV[2] -> hash: the key's SHA-256, hex
-- ARGV[3] -> prefix: its visible prefix
-- ARGV[4] -> created: Unix ms
--
-- Returns {code}: CLAIMED, or TAKEN (a record exists; nothing changed).

local CLAIMED, TAKEN = 1, 0

local key_key = KEYS[1]
local account_id, hash, prefix, created = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('EXISTS', key_key) == 1 then return {TAKEN} end
redis.call('HSET', key_key, 'acct', account_id, 'hash', hash, 'prefix', prefix, 'ctime', created, 'revoked', 0)
return {CLAIMED}
