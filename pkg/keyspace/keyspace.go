// Package keyspace is Easel's Redis key layout, in one place.
//
// Every key an account owns carries the account's hash tag "{a:<account id>}",
// so on Redis Cluster they share a slot and one Lua script may touch the
// account and its tasks together (a debit, a task record and a ledger entry).
//
//	easel:{a:<account>}:acct           hash    the account record (status, credits, limits)
//	easel:{a:<account>}:t:<task id>    hash    a task record (24-hour TTL)
//	easel:{a:<account>}:inflight       zset    the account's unfinished tasks, scored by when they stop counting
//	easel:{a:<account>}:ledger         stream  credit movements (debit, refund, credit)
//	easel:{a:<account>}:keys           set     hashes of the account's API keys
//	easel:key:<sha256 of the API key>  hash    an API key record: account, prefix, revoked
//	easel:keyprefix:<visible prefix>   set     hashes of the keys with that prefix
//	easel:accounts                     zset    every account id, by creation time
//	easel:lock:sweeper                 string  held by the worker sweeping overdue tasks
//
// Asynq keeps its own keys under "asynq:{<queue>}:..."; the rate limiter
// under "rate:easel:...".
package keyspace

const prefix = "easel:"

func tag(accountID string) string { return prefix + "{a:" + accountID + "}:" }

// Account is the key of an account record.
func Account(accountID string) string { return tag(accountID) + "acct" }

// Task is the key of a task record.
func Task(accountID, taskID string) string { return tag(accountID) + "t:" + taskID }

// Inflight is the key of an account's unfinished tasks.
func Inflight(accountID string) string { return tag(accountID) + "inflight" }

// Ledger is the key of an account's credit ledger.
func Ledger(accountID string) string { return tag(accountID) + "ledger" }

// AccountKeys is the key of the set of an account's API key hashes.
func AccountKeys(accountID string) string { return tag(accountID) + "keys" }

// APIKey is the key of an API key record, by the hex SHA-256 of the key.
func APIKey(hashHex string) string { return prefix + "key:" + hashHex }

// KeyPrefix is the key of the set of key hashes sharing a visible prefix.
func KeyPrefix(visible string) string { return prefix + "keyprefix:" + visible }

// Accounts is the key of the index of every account.
func Accounts() string { return prefix + "accounts" }

// SweeperLock is the key of the lock one worker holds while sweeping overdue
// tasks.
func SweeperLock() string { return prefix + "lock:sweeper" }

// RateLimit is the rate limiter's bucket name for an API key and an
// endpoint class ("create", "query").
func RateLimit(class, keyHash string) string { return prefix + class + ":" + keyHash }
