-- add_credits.lua: adds credits to an account (negative for a
-- correction), unless the balance would go below zero, with its ledger
-- entry.
--
-- KEYS[1] -> account: the account record
-- KEYS[2] -> ledger: the account's credit ledger
-- ARGV[1] -> amount: credits, signed
-- ARGV[2] -> note: the ledger note
-- ARGV[3] -> now: Unix ms
-- ARGV[4] -> keep: the ledger's retention, ms (0: all)
--
-- Returns {code, balance}: ADDED, NO_ACCOUNT, or BELOW_ZERO (nothing
-- changed; the balance as it is).

local ADDED, NO_ACCOUNT, BELOW_ZERO = 1, -1, 0

local account_key, ledger_key = KEYS[1], KEYS[2]
local amount, note, now, keep = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

if redis.call('EXISTS', account_key) == 0 then return {NO_ACCOUNT, 0} end
local bal = tonumber(redis.call('HGET', account_key, 'credits') or '0')
if bal + amount < 0 then return {BELOW_ZERO, bal} end
bal = redis.call('HINCRBY', account_key, 'credits', amount)
ledger(ledger_key, now, keep, 'credit', amount, bal, '', note)
return {ADDED, bal}
