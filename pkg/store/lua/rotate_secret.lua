-- rotate_secret.lua: gives an account a new webhook signing secret; the
-- one it replaces still signs until ARGV until (a secret rotated out
-- earlier stops at once).
--
-- KEYS[1] -> account: the account record
-- KEYS[2] -> secrets: the account's signing secrets
-- ARGV[1] -> fresh: the new secret
-- ARGV[2] -> now: Unix ms
-- ARGV[3] -> until: when the replaced secret stops signing, Unix ms
--
-- Returns {ROTATED, until the replaced secret signs (now if none)}, or
-- {NO_ACCOUNT}.

local ROTATED, NO_ACCOUNT = 1, -1

local account_key, secrets_key = KEYS[1], KEYS[2]
local fresh, now, valid_until = ARGV[1], ARGV[2], ARGV[3]

if redis.call('EXISTS', account_key) == 0 then return {NO_ACCOUNT} end
local cur = redis.call('HGET', secrets_key, 'cur')
local ends = now
if cur then
  redis.call('HSET', secrets_key, 'prev', cur, 'until', valid_until)
  ends = valid_until
else
  redis.call('HDEL', secrets_key, 'prev', 'until')
end
redis.call('HSET', secrets_key, 'cur', fresh)
return {ROTATED, tonumber(ends)}
