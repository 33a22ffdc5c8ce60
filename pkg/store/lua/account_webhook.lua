-- account_webhook.lua: sets or clears an account's default webhook
-- endpoint, the one its tasks without a callback take (lib.lua's
-- default_endpoint): its URL split over 64-byte fields (put_long), the
-- number of those, and its event types. The pieces of a longer URL set
-- before go.
--
-- KEYS[1] -> account: the account record
-- ARGV[1] -> url: '' to clear
-- ARGV[2] -> events: comma separated
--
-- Returns {code}: SET, or NO_ACCOUNT.

local SET, NO_ACCOUNT = 1, 0

local account_key = KEYS[1]
local url, events = ARGV[1], ARGV[2]

if redis.call('EXISTS', account_key) == 0 then return {NO_ACCOUNT} end
local old = tonumber(redis.call('HGET', account_key, 'whn') or '1') or 1
local gone = {'whu', 'whn', 'whev'}
for i = 1, old - 1 do gone[#gone + 1] = 'whu' .. '+' .. i end
redis.call('HDEL', account_key, unpack(gone))
if url ~= '' then
  local f = {}
  local n = put_long(f, 'whu', url)
  f[#f + 1] = 'whn'; f[#f + 1] = n
  f[#f + 1] = 'whev'; f[#f + 1] = events
  redis.call('HSET', account_key, unpack(f))
end
return {SET}
