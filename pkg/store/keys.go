package store

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/crc32"
	"strconv"
)

// EventsChannel is the Pub/Sub channel every change of a task's status or
// progress is published on (lua/lib.lua, notify); the message is the
// task's key (TaskEvent).
const EventsChannel = prefix + "task-events"

const prefix = "easel:"

// Shards is how many shards the accounts are spread over. An account's
// keys, and its shard's due work, carry the shard's hash tag "{s<n>}":
// on Redis Cluster they share a slot, so one script touches an account,
// its tasks and the due work together, and the shards' slots spread the
// accounts over the masters. Fixed for a deployment's life: it places
// every account's data.
const Shards = 256

// ShardOf returns the shard of an account.
func ShardOf(accountID string) int { return int(crc32.ChecksumIEEE([]byte(accountID)) % Shards) }

// shardTag is the prefix of every key of shard n.
func shardTag(n int) string { return prefix + "{s" + strconv.Itoa(n) + "}:" }

// tag is the prefix of every key of an account.
func tag(accountID string) string { return shardTag(ShardOf(accountID)) + "a:" + accountID + ":" }

// accountKey is the key of an account record (due.lua names it too, from
// the shard's prefix: "a:<account>:acct").
func accountKey(accountID string) string { return tag(accountID) + "acct" }

// taskKey is the key of a task record. due.lua and lib.lua's promote name
// it too, from the shard's prefix: "a:<account>:t:<task>".
func taskKey(accountID, taskID string) string { return tag(accountID) + "t:" + taskID }

// parkedKey is the key of an account's tasks waiting for a place (task id
// → creation time, Unix ms: oldest first; "a:<account>:parked" in
// due.lua).
func parkedKey(accountID string) string { return tag(accountID) + "parked" }

// dueKey is the key of a shard's due work (due.lua): task checks and
// final webhook events to queue, by when they are due (Unix ms).
func dueKey(shard int) string { return shardTag(shard) + "due" }

// dueOf is the due work of an account's shard.
func dueOf(accountID string) string { return dueKey(ShardOf(accountID)) }

// shardLeaseKey is the key of a shard's lease: which worker does its due
// work.
func shardLeaseKey(shard int) string { return shardTag(shard) + "lease" }

// Members of the due work (lib.lua's task_due and hook_due).
func taskDue(accountID, taskID string) string { return "t|" + accountID + "|" + taskID }
func hookDue(accountID, taskID, event string) string {
	return "h|" + accountID + "|" + taskID + "|" + event
}

// recoveryWorkersKey is the key of the workers doing the due work (worker
// → last heartbeat, Unix ms), so that each takes its share of the shards.
func recoveryWorkersKey() string { return prefix + "recovery:workers" }

// idempotencyKey is the key of an account's record of an Idempotency-Key
// (by its SHA-256: the client's key may hold any printable character).
func idempotencyKey(accountID, key string) string {
	sum := sha256.Sum256([]byte(key))
	return tag(accountID) + "idem:" + hex.EncodeToString(sum[:])
}

// noKey is a key of the account's slot that is never written: what a
// script is given for a key it does not use this time (all of a script's
// keys must share a slot on a cluster).
func noKey(accountID string) string { return tag(accountID) + "none" }

// ledgerKey is the key of an account's credit ledger once it is long: a
// stream, only ever (lib.lua's ledger; Easel before the short form reads
// and writes it as one). ledger_read.lua reads it and ledgerShortKey
// together.
func ledgerKey(accountID string) string { return tag(accountID) + "ledger" }

// ledgerShortKey is the key of a short ledger's hash, while there is no
// stream (and, during an upgrade, beside one an older Easel started):
// lib.lua's ledger names it from ledgerKey and ledgerShortPart.
func ledgerShortKey(accountID string) string { return ledgerKey(accountID) + ledgerShortPart }

// accountKeysKey is the key of the set of an account's API key hashes.
func accountKeysKey(accountID string) string { return tag(accountID) + "keys" }

// spendKey is the key of what each of an account's API keys has spent
// (key hash → credits); in the account's slot, so the create script
// charges it with the account. lib.lua's refund names it too.
func spendKey(accountID string) string { return tag(accountID) + spendPart }

// usageKey is the key of an account's usage on a UTC day (days since
// 1970-01-01): "<model>|n" tasks and "<model>|c" credits, refunds taken
// out, "<model>|r" and "<model>|rc" the tasks refunded and their credits;
// and the same of each API key, "<model>|<key tag>|n" .... lib.lua's refund names it too ("use:<day>").
func usageKey(accountID string, day int64) string {
	return tag(accountID) + usagePart + strconv.FormatInt(day, 10)
}

// The parts of the keys above, and the usage's fields' suffixes after the
// model id, as the scripts name them.
const (
	ledgerShortPart = ":h"
	spendPart       = "spend"
	usagePart       = "use:"
	usageTasks      = "|n"
	usageCredits    = "|c"
	// Of tasks refunded: how many, and their credits.
	usageRefunds       = "|r"
	usageRefundCredits = "|rc"
	// usageKeyTag is how many hex digits of a key's hash name it in a
	// day's usage ("<model>|<tag>|n": lib.lua's usage_key_tag).
	usageKeyTag = 12
)

// dayOf is the UTC day of a time, in days since 1970-01-01.
func dayOf(unixMs int64) int64 { return unixMs / 86_400_000 }

// apiKeyKey is the key of an API key record, by the hex SHA-256 of the key.
func apiKeyKey(hashHex string) string { return prefix + "key:" + hashHex }

// keyPrefixKey is the key of the set of key hashes sharing a visible prefix.
func keyPrefixKey(visible string) string { return prefix + "keyprefix:" + visible }

// accountNamesKey is the key of the index of accounts by name (a sorted
// set of nameEntry, all of score 0: ordered by name).
func accountNamesKey() string { return prefix + "accountnames" }

// accountsKey is the key of the index of every account, for listing them
// (never read by a periodic loop).
func accountsKey() string { return prefix + "accounts" }

// probeKey is a key a process writes to check Redis takes writes; with a
// tag, in that hash slot.
func probeKey(tag, instance string) string {
	if tag == "" {
		return prefix + "probe:" + instance
	}
	return prefix + "probe:{" + tag + "}:" + instance
}

// workerKey is the key of a worker process's liveness (Pulse).
func workerKey(id string) string { return prefix + "worker:" + id }

// lockKey is the key of a named lease.
func lockKey(name string) string { return prefix + "lock:" + name }

// RateBucket is the name of the rate-limit bucket of an API key (by its
// hash) for a class of request ("create", "query"). go-redis/redis_rate
// stores it under "rate:" + the name.
func RateBucket(class, keyHash string) string { return prefix + class + ":" + keyHash }

// tasksIndexKey is the key of an account's task index (task id → creation
// time, Unix ms), for listing.
func tasksIndexKey(accountID string) string { return tag(accountID) + "tasks" }

// webhookLogKey is the key of the record of a task's webhook deliveries.
func webhookLogKey(accountID, taskID string) string { return tag(accountID) + "wh:" + taskID }

// webhookRecentKey is the key of an account's recent webhook deliveries
// ("<task>|<event>:<seq>" → when listed, Unix ms), the newest
// RecentDeliveries, kept as long as a task's delivery log.
func webhookRecentKey(accountID string) string { return tag(accountID) + "whrecent" }

// queueKey is the key of a queue's sequence numbers (a hash: enqueued,
// dequeued and the dequeue rate's samples), for queue positions. The
// queue's own hash tag keeps it on one slot.
func queueKey(queue string) string { return prefix + "q:{" + queue + "}" }

// webhookSecretKey is the key of an account's webhook signing secrets (a
// hash: the current one, the previous one and until when it is valid).
func webhookSecretKey(accountID string) string { return tag(accountID) + "whsec" }

// userKey is the key of a console user's record.
func userKey(id string) string { return prefix + "user:" + id }

// emailKey is the key of the user id an email address (by its hash,
// account.HashEmail) belongs to.
func emailKey(hash string) string { return prefix + "email:" + hash }

// accountUsersKey is the key of the set of an account's users.
func accountUsersKey(accountID string) string { return tag(accountID) + "users" }

// sessionKey is the key of a console session, by the hex SHA-256 of its
// id.
func sessionKey(idHash string) string { return prefix + "session:" + idHash }

// signInKey is the key of a count of sign-in attempts (name:
// "pair:<email hash>:<network>", "addr:<network>", "email:<email hash>"
// or "known:<email hash>:<network>").
func signInKey(name string) string { return prefix + "signin:" + name }

// knownNetworksKey is the key of the networks an email signed in from (a
// sorted set: each network scored by when it is forgotten, Unix ms).
func knownNetworksKey(emailHash string) string { return prefix + "signin:known:" + emailHash }
