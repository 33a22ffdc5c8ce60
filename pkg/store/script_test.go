package store

import (
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/luascript/scripttest"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

// The Go ↔ Lua contract of every script, checked without Redis: a change
// on one side that the other does not follow fails here. Each script's
// keys and arguments are held to its header when it is loaded (a struct
// that disagrees stops the package at init); scripttest checks the rest.
func TestScriptContracts(t *testing.T) {
	t.Parallel()
	scripttest.Check(t, scripts, scripttest.Names{Allowed: allowedLiterals(), Commands: redisCommands})
}

// lib.lua's outcomes are task.Outcome's values.
func TestOutcomesMatchGo(t *testing.T) {
	t.Parallel()
	libConsts := scripttest.Consts(t, scripts.LibText())
	for name, o := range map[string]task.Outcome{"APPLIED": task.Applied, "FINAL": task.AlreadyFinal, "MISSING": task.Missing,
		"SUPERSEDED": task.Superseded, "POISONED": task.Poisoned, "BUSY": task.Busy} {
		if v, ok := libConsts[name]; !ok || v != int64(o) || outcomeCodes[name] != int64(o) {
			t.Errorf("outcome %s: lib.lua %d (bound %v), outcomeCodes %d, task.Outcome %d", name, v, ok, outcomeCodes[name], o)
		}
	}
}

// lib.lua's queue constants and the queues argument agree with Go's:
// the samples' spacing, and where a queue's numbers are kept.
func TestQueueConstsMatchGo(t *testing.T) {
	t.Parallel()
	libConsts := scripttest.Consts(t, scripts.LibText())
	if v, ok := libConsts["SAMPLE_EVERY"]; !ok || v != queueSampleEvery.Milliseconds() {
		t.Errorf("SAMPLE_EVERY: lib.lua %d (bound %v), queueSampleEvery %v", v, ok, queueSampleEvery)
	}
	db := NewDB(nil, Options{})
	if got := db.queues() + "standard" + "}"; got != queueKey("standard") {
		t.Errorf("queues argument + name + '}' = %q, queueKey %q", got, queueKey("standard"))
	}
}

// allowedLiterals are the quoted strings a script may hold: the hash
// fields Go declares, the values of the domain's enumerations, and a few
// Redis tokens and patterns.
func allowedLiterals() map[string]string {
	allowed := map[string]string{}
	add := func(what string, vs ...string) {
		for _, v := range vs {
			allowed[v] = what
		}
	}
	for _, fs := range [][]string{taskFields, accountFields, keyFields, idemFields, queueFields, ledgerFields, secretFields, hookLogFields} {
		add("a field", fs...)
	}
	for _, s := range task.Statuses {
		add("a task status", string(s))
	}
	add("an event", task.Events...)
	for _, s := range webhook.States {
		add("a delivery state", string(s))
	}
	add("a ledger kind", account.Debit, account.Refund, account.Credit)
	add("an account status", string(account.Active), string(account.Disabled))
	add("a failure code", string(task.WorkerCrashed))
	add("a refund's note", task.NoteImagesNotMade)
	add("the events channel", EventsChannel)
	// The names the scripts make from a shard's prefix (keys.go's taskKey,
	// accountKey, parkedKey; a task's input is in its record, so there is
	// no job key) and of the due work's members (taskDue, hookDue), the kinds
	// of due work (DueKind) and a chunked field's suffix (pieceLen).
	add("a key's part", "a:", ":t:", "t:", "t|", "h|", ":", "acct", "parked", ledgerShortPart, spendPart, usagePart)
	// The end of a queue's key (keys.go's queueKey), after lib.lua's
	// QUEUES and the queue's name.
	add("a queue key's end", "}")
	add("a usage field's suffix", usageTasks, usageCredits, usageRefunds, usageRefundCredits)
	for _, f := range []string{usageTasks, usageCredits, usageRefunds, usageRefundCredits} {
		add("a usage field's suffix after a key's tag", strings.TrimPrefix(f, "|"))
	}
	for _, k := range []DueKind{DueCheck, DueExpire, DueHook} {
		add("a kind of due work", string(k))
	}
	add("the due work's member pattern", "^(%a)|([^|]+)|([^|]+)|?(.*)$", "t", "h")
	add("a chunked field's suffix", "+")
	add("an Idempotency-Key's state", "creating", "done")
	add("a ledger's ids' and entries' patterns, XRANGE's bounds", "^(%d+)-(%d+)$", "^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$",
		"^(%d+)-?(%d*)$", "-", "(", "COUNT")
	// Redis tokens, flags and the scripts' own patterns and separators.
	add("a token", "NX", "XX", "PX", "MINID", "NOMKSTREAM", "LIMIT", "WITHSCORES", "+inf", "-inf", "*", "", "0", "1", "00", ",", "|", " ",
		"pending ", "[^,]+", `[^\n]+`, "^(%a+) (%d+)$", "%d")
	return allowed
}

var redisCommands = []string{"DECR", "DEL", "EXISTS", "GET", "HDEL", "HEXISTS", "HGET", "HGETALL", "HINCRBY", "HMGET", "HSET", "HSETNX", "INCR", "INCRBY", "PEXPIRE", "PEXPIREAT", "PTTL",
	"PUBLISH", "SET", "TIME", "XADD", "XRANGE", "XREVRANGE", "ZADD", "ZCARD", "ZPOPMIN", "ZRANGE", "ZRANGEBYSCORE", "ZREM", "ZREMRANGEBYRANK", "ZREMRANGEBYSCORE"}
