package store

import (
	"crypto/sha256"
	"encoding/hex"
)

// EventsChannel is the Pub/Sub channel every change of a task's status or
// progress is published on (lua/lib.lua, notify); the message is the
// task's key (TaskEvent).
const EventsChannel = prefix + "task-events"

const prefix = "easel:"

func tag(accountID string) string { return prefix + "{a:" + accountID + "}:" }

// accountKey is the key of an account record.
func accountKey(accountID string) string { return tag(accountID) + "acct" }

// taskKey is the key of a task record.
func taskKey(accountID, taskID string) string { return tag(accountID) + "t:" + taskID }

// checksKey is the key of an account's queue checks: pending tasks whose
// job is to be checked for (task id → when, Unix ms).
func checksKey(accountID string) string { return tag(accountID) + "unqueued" }

// noKey is a key of the account's slot that is never written: what a
// script is given for a key it does not use this time (all of a script's
// keys must share a slot on a cluster).
func noKey(accountID string) string { return tag(accountID) + "none" }

// inflightKey is the key of an account's unfinished tasks.
func inflightKey(accountID string) string { return tag(accountID) + "inflight" }

// runningKey is the key of the set of an account's generations running
// now, across every worker: members are task ids, scores the time (Unix
// ms) past which a member no longer counts (its task's deadline: a worker
// that died holding one frees it then).
func runningKey(accountID string) string { return tag(accountID) + "running" }

// idempotencyKey is the key of an account's record of an Idempotency-Key
// (by its SHA-256: the client's key may hold any printable character).
func idempotencyKey(accountID, key string) string {
	sum := sha256.Sum256([]byte(key))
	return tag(accountID) + "idem:" + hex.EncodeToString(sum[:])
}

// ledgerKey is the key of an account's credit ledger.
func ledgerKey(accountID string) string { return tag(accountID) + "ledger" }

// accountKeysKey is the key of the set of an account's API key hashes.
func accountKeysKey(accountID string) string { return tag(accountID) + "keys" }

// apiKeyKey is the key of an API key record, by the hex SHA-256 of the key.
func apiKeyKey(hashHex string) string { return prefix + "key:" + hashHex }

// keyPrefixKey is the key of the set of key hashes sharing a visible prefix.
func keyPrefixKey(visible string) string { return prefix + "keyprefix:" + visible }

// accountsKey is the key of the index of every account.
func accountsKey() string { return prefix + "accounts" }

// probeKey is a key a process writes to check Redis takes writes; with a
// tag, in that hash slot.
func probeKey(tag, instance string) string {
	if tag == "" {
		return prefix + "probe:" + instance
	}
	return prefix + "probe:{" + tag + "}:" + instance
}

// lockKey is the key of a named lease.
func lockKey(name string) string { return prefix + "lock:" + name }

// RateBucket is the name of the rate-limit bucket of an API key (by its
// hash) for a class of request ("create", "query"). go-redis/redis_rate
// stores it under "rate:" + the name.
func RateBucket(class, keyHash string) string { return prefix + class + ":" + keyHash }

// hooksKey is the key of an account's webhook outbox: deliveries due
// ("<task id>|<event type>") by when they became due (Unix ms). The
// scripts that end a task add to it; a delivery queued takes its entry
// off, and the workers' recovery queues what is left.
func hooksKey(accountID string) string { return tag(accountID) + "hooks" }

// tasksIndexKey is the key of an account's task index (task id → creation
// time, Unix ms), for listing.
func tasksIndexKey(accountID string) string { return tag(accountID) + "tasks" }

// webhookLogKey is the key of the record of a task's webhook deliveries.
func webhookLogKey(accountID, taskID string) string { return tag(accountID) + "wh:" + taskID }

// queueKey is the key of a queue's sequence numbers (a hash: enqueued,
// dequeued and the dequeue rate's samples), for queue positions. The
// queue's own hash tag keeps it on one slot.
func queueKey(queue string) string { return prefix + "q:{" + queue + "}" }

// webhookSecretKey is the key of an account's webhook signing secrets (a
// hash: the current one, the previous one and until when it is valid).
func webhookSecretKey(accountID string) string { return tag(accountID) + "whsec" }
