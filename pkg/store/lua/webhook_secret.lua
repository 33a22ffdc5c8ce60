-- webhook_secret.lua: an account's webhook signing secrets, the current
-- one made on first use (a secret another process made meanwhile is
-- kept).
--
-- KEYS[1] -> account: the account record
-- KEYS[2] -> secrets: the account's signing secrets
-- ARGV[1] -> fresh: a new secret, used if the account has none
-- ARGV[2] -> now: Unix ms
--
-- Returns {FOUND, current[, previous while still valid]}, or {NO_ACCOUNT}.

local FOUND, NO_ACCOUNT = 1, -1

local account_key, secrets_key = KEYS[1], KEYS[2]
local fresh, now = ARGV[1], tonumber(ARGV[2])

if redis.call('EXISTS', account_key) == 0 then return {NO_ACCOUNT} end
local v = redis.call('HMGET', secrets_key, 'cur', 'prev', 'until')
if not v[1] then
  redis.call('HSET', secrets_key, 'cur', fresh)
  v[1] = fresh
end
if v[2] and tonumber(v[3] or '0') > now then return {FOUND, v[1], v[2]} end
return {FOUND, v[1]}
