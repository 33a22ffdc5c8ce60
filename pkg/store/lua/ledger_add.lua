-- ledger_add.lua: adds an entry to an account's ledger (lib.lua's
-- ledger), for a Go transaction (an account's creation).
--
-- KEYS[1] -> ledger: the account's credit ledger
-- ARGV[1] -> now: Unix ms
-- ARGV[2] -> keep: the ledger's retention, ms (0: all)
-- ARGV[3] -> kind: the entry's kind
-- ARGV[4] -> amount: credits, signed
-- ARGV[5] -> balance: the balance after it
-- ARGV[6] -> task: the task's id ('' for none)
-- ARGV[7] -> note: the note ('' for none)
--
-- Returns {ADDED}.

local ADDED = 1

local ledger_key = KEYS[1]
local now, keep, kind, amount, balance = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])

ledger(ledger_key, now, keep, kind, amount, balance, ARGV[6], ARGV[7])
return {ADDED}
