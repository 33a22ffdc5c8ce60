-- update_account.lua: sets fields of an existing account record.
--
-- KEYS[1] -> account: the account record
-- ARGV[1] -> fields: field, value, field, value... (the Go side names them)
--
-- Returns {code}: UPDATED, or NO_ACCOUNT.

local UPDATED, NO_ACCOUNT = 1, 0

local account_key = KEYS[1]

if redis.call('EXISTS', account_key) == 0 then return {NO_ACCOUNT} end
redis.call('HSET', account_key, unpack(ARGV))
return {UPDATED}
