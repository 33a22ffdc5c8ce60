package upstream

import (
	"strconv"
	"time"
)

// The Redis keys of the upstreams' shared state: this package's own,
// under Easel's prefix and apart from every account's (package store
// names those). An upstream's keys carry its name as their hash tag: one
// slot, so one script changes them together.
const keyPrefix = "easel:up:{"

// breakerKey is the hash of an upstream's circuit breaker (the breaker
// fields below).
func breakerKey(name string) string { return keyPrefix + name + "}:breaker" }

// errorsKey is the list of an upstream's recent errors (ErrorRecord JSON),
// newest first.
func errorsKey(name string) string { return keyPrefix + name + "}:errors" }

// disabledKey holds the fingerprint of the credential of an upstream the
// provider refused.
func disabledKey(name string) string { return keyPrefix + name + "}:disabled" }

// MinuteKey is the hash of an upstream's calls in the minute of t (Unix
// minutes): fCalls, and a count per Outcome other than Success.
func MinuteKey(name string, t time.Time) string {
	return keyPrefix + name + "}:m:" + strconv.FormatInt(t.Unix()/60, 10)
}

func minuteKey(name string, t time.Time) string { return MinuteKey(name, t) }

// fileKey is the hash of the upstreams file's state as the workers last
// read it (FileState's fields), for operators.
const fileKey = "easel:upstreams:file"

// poolKey is the hash of the pool's upstreams as the workers last loaded
// it (name → Public JSON), for operators.
const poolKey = "easel:upstreams"

// The breaker's hash fields (breaker.lua).
const (
	fState  = "state"  // a State
	fFails  = "fails"  // failures in a row
	fUntil  = "until"  // open until, Unix ms
	fProbe  = "probe"  // the half-open probe's lease, until Unix ms
	fCool   = "cool"   // after a 429, no call until, Unix ms
	fStreak = "streak" // 429s in a row
)

// The breaker hash's counts since the upstream was first called: its
// calls, and per outcome other than success fTotalPrefix + the outcome.
const (
	fTotalCalls  = "calls"
	fTotalPrefix = "t:"
)

// breakerFields are the breaker's hash fields.
var breakerFields = []string{fState, fFails, fUntil, fProbe, fCool, fStreak, fTotalCalls}

// fCalls is the minute hash's count of calls.
const fCalls = "calls"
