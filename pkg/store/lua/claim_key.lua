-- claim_key.lua: writes an API key's record, only if there is none.
--
-- KEYS[1] -> key: the API key's record
-- ARGV[1] -> account_id
-- ARGV[2] -> hash: the key's SHA-256, hex
-- ARGV[3] -> prefix: its visible prefix
-- ARGV[4] -> created: Unix ms
-- ARGV[5] -> name: '' for none
-- ARGV[6] -> models: comma-separated tiers ('' for the account's)
-- ARGV[7] -> ips: comma-separated CIDR prefixes ('' for any)
-- ARGV[8] -> expires: Unix ms (0: never)
-- ARGV[9] -> spend_limit: credits (0: none)
--
-- Returns {code}: CLAIMED, or TAKEN (a record exists; nothing changed).

local CLAIMED, TAKEN = 1, 0

local key_key = KEYS[1]
local account_id, hash, prefix, created = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('EXISTS', key_key) == 1 then return {TAKEN} end
local rec = {'acct', account_id, 'hash', hash, 'prefix', prefix, 'ctime', created, 'revoked', 0}
for i, f in ipairs({'name', 'models', 'ips', 'exp', 'slimit'}) do
  local v = ARGV[4 + i]
  if v ~= '' and v ~= '0' then rec[#rec + 1] = f; rec[#rec + 1] = v end
end
redis.call('HSET', key_key, unpack(rec))
return {CLAIMED}
