// Package keyspace is Easel's Redis key layout, in one place.
//
// Every key an account owns carries the account's hash tag "{a:<account id>}",
// so on Redis Cluster they share a slot and one Lua script may touch the
// account and its tasks together (a debit and a task record, say). Keys:
//
//	easel:{a:<account>}:acct           hash  the account record
//	easel:{a:<account>}:t:<task id>    hash  a task record (24-hour TTL)
//	easel:key:<sha256 of the API key>  hash  an API key record: its account
//
// Asynq keeps its own keys under "asynq:{<queue>}:...".
package keyspace

const prefix = "easel:"

func tag(accountID string) string { return prefix + "{a:" + accountID + "}:" }

// Account is the key of an account record.
func Account(accountID string) string { return tag(accountID) + "acct" }

// Task is the key of a task record.
func Task(accountID, taskID string) string { return tag(accountID) + "t:" + taskID }

// APIKey is the key of an API key record, by the hex SHA-256 of the key.
func APIKey(hashHex string) string { return prefix + "key:" + hashHex }
