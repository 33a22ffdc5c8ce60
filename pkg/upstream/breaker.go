package upstream

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/luascript"
)

// Why not sony/gobreaker: its DistributedCircuitBreaker keeps the shared
// state in a store as this does, but holds the store's lock for the whole
// call (Execute locks, runs the request, unlocks), so every worker's calls
// to one upstream would run one at a time, a generation of seconds each;
// and its two-step breaker, which would let the call run outside the lock,
// has no shared form. The breaker here has the same states (closed, open,
// half-open with one probe) in one Redis script, each step atomic and none
// held across a call.

//go:embed lua/*.lua
var luaFiles embed.FS

var scripts = luascript.NewLibrary("upstream", luaFiles, "lua", "")

var breakerScript = luascript.Load[breakerKeys, breakerArgs, breakerReply](scripts, "breaker", map[string]int64{
	"ALLOW": int64(Allow), "PROBE": int64(Probe), "DENY": int64(Deny), "DISABLED": int64(Disabled), "REPORTED": reported,
})

// reported is breaker.lua's code of a report (and a give-back).
const reported = 3

// breaker.lua's operations besides the reports (an Outcome each).
const (
	opAllow    = "allow"
	opGiveBack = "giveback"
)

type breakerKeys struct {
	Breaker  string `lua:"breaker"`
	Minute   string `lua:"minute"`
	Errors   string `lua:"errors"`
	Disabled string `lua:"disabled"`
}

type breakerArgs struct {
	Op          string `lua:"op"`
	Failures    int    `lua:"failures"`
	Cooldown    int64  `lua:"cooldown"`
	Throttle    int64  `lua:"throttle"`
	MaxThrottle int64  `lua:"max_throttle"`
	Probe       int64  `lua:"probe"`
	Fingerprint string `lua:"fingerprint"`
	Error       string `lua:"error"`
}

// breakerReply: allow's verdict (Code), the wait of a DENY and the state;
// a report's state after and before.
type breakerReply struct {
	Code   int64  `lua:"code"`
	Wait   int64  `lua:"wait"`
	State  string `lua:"state"`
	Before string `lua:"before"`
}

// State is a breaker's state.
type State string

// States.
const (
	Closed   State = "closed"
	Open     State = "open"
	HalfOpen State = "half"
)

// Outcome is what a call to an upstream came to, for its breaker.
type Outcome string

// Outcomes.
const (
	// Success: images.
	Success Outcome = "success"
	// Failure: a 5xx, a timeout, a connection error: counts towards
	// opening.
	Failure Outcome = "failure"
	// Throttled: a 429: the upstream cools, its health untouched.
	Throttled Outcome = "throttled"
	// Refused: the provider refused the credential (401, 403, an invalid
	// key): the upstream is disabled until its credential changes.
	Refused Outcome = "refused"
	// Final: the provider answered and refused the caller's input (content
	// safety, an invalid source image): the upstream is healthy.
	Final Outcome = "final"
)

// Verdict is a breaker's answer to a call about to be made.
type Verdict int

// Verdicts.
const (
	Deny     Verdict = 0
	Allow    Verdict = 1
	Probe    Verdict = 2 // allowed: the one half-open call
	Disabled Verdict = -1
)

// Breakers are the upstreams' breakers in Redis.
type Breakers struct {
	rdb redis.UniversalClient
	cfg Breaker
	// ProbeLease is how long a half-open probe holds it: another worker
	// may probe after this if the first never reported (it died).
	ProbeLease time.Duration
}

// NewBreakers returns the breakers with the file's settings.
func NewBreakers(rdb redis.UniversalClient, cfg Breaker) *Breakers {
	return &Breakers{rdb: rdb, cfg: cfg.withDefaults(), ProbeLease: 2 * time.Minute}
}

func (b *Breakers) run(ctx context.Context, u Upstream, op string, errJSON string) (breakerReply, error) {
	r, err := breakerScript.Call(ctx, b.rdb,
		breakerKeys{Breaker: breakerKey(u.Name), Minute: minuteKey(u.Name, time.Now()), Errors: errorsKey(u.Name), Disabled: disabledKey(u.Name)},
		breakerArgs{Op: op, Failures: b.cfg.Failures, Cooldown: time.Duration(b.cfg.Cooldown).Milliseconds(),
			Throttle: time.Duration(b.cfg.Throttle).Milliseconds(), MaxThrottle: time.Duration(b.cfg.MaxThrottle).Milliseconds(),
			Probe: b.ProbeLease.Milliseconds(), Fingerprint: u.Fingerprint(), Error: errJSON})
	if err != nil {
		return breakerReply{}, fmt.Errorf("upstream %s breaker: %w", u.Name, err)
	}
	return r, nil
}

// Allow asks u's breaker for a call: the verdict, and when denied how long
// until it may say otherwise.
func (b *Breakers) Allow(ctx context.Context, u Upstream) (Verdict, time.Duration, error) {
	r, err := b.run(ctx, u, opAllow, "")
	if err != nil {
		return Deny, 0, err
	}
	if r.Code == reported {
		return Deny, 0, fmt.Errorf("upstream %s breaker: a report's reply to allow", u.Name)
	}
	return Verdict(r.Code), time.Duration(r.Wait) * time.Millisecond, nil
}

// GiveBack returns a verdict not used (the call was not made): a probe's
// lease is freed for the next caller. Best effort.
func (b *Breakers) GiveBack(ctx context.Context, u Upstream, v Verdict) {
	if v != Probe {
		return
	}
	_, _ = b.run(context.WithoutCancel(ctx), u, opGiveBack, "")
}

// ErrorRecord is a recent error of an upstream, as kept for operators.
type ErrorRecord struct {
	Time    time.Time `json:"time"`
	Outcome Outcome   `json:"outcome"`
	Message string    `json:"message"`
}

// Report tells u's breaker what a call came to (msg: the error, "" for a
// success) and returns its state before and after.
func (b *Breakers) Report(ctx context.Context, u Upstream, o Outcome, msg string) (State, State, error) {
	errJSON := ""
	if o != Success {
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		j, _ := json.Marshal(ErrorRecord{Time: time.Now().UTC(), Outcome: o, Message: msg})
		errJSON = string(j)
	}
	r, err := b.run(ctx, u, string(o), errJSON)
	if err != nil {
		return "", "", err
	}
	return State(r.Before), State(r.State), nil
}

// Publish records the pool a worker loaded, for operators (names not in
// it any more are removed).
func Publish(ctx context.Context, rdb redis.UniversalClient, p *Pool) error {
	fields := map[string]any{}
	for _, u := range p.Upstreams {
		j, _ := json.Marshal(u.Public())
		fields[u.Name] = string(j)
	}
	old, err := rdb.HKeys(ctx, poolKey).Result()
	if err != nil {
		return err
	}
	_, err = rdb.TxPipelined(ctx, func(pp redis.Pipeliner) error {
		for _, n := range old {
			if _, ok := fields[n]; !ok {
				pp.HDel(ctx, poolKey, n)
			}
		}
		pp.HSet(ctx, poolKey, fields)
		return nil
	})
	return err
}
