package quota

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// backend is a Redis the workers share: each client is one worker
// process's connection to it.
type backend struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
	srv    *redistest.Server // for one server: its command counts
}

// backends starts one Redis server and one 3-master cluster (only the
// server in -short runs).
func backends(t *testing.T) []backend {
	t.Helper()
	srv := redistest.Start(t)
	server := backend{name: "server", srv: srv, client: func(t *testing.T) redis.UniversalClient { return srv.Client(t) }}
	if testing.Short() {
		return []backend{server}
	}
	c := redistest.StartCluster(t)
	opt, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	return []backend{
		server,
		{name: "cluster", client: func(t *testing.T) redis.UniversalClient {
			cc := redis.NewClusterClient(opt)
			t.Cleanup(func() { _ = cc.Close() })
			return cc
		}},
	}
}

// workers returns n Quotas on b, each with its own client, as n worker
// processes would have.
func workers(t *testing.T, b backend, n int, limits Limits, opts Options) []*Quota {
	t.Helper()
	qs := make([]*Quota, n)
	for i := range qs {
		qs[i] = New(b.client(t), limits, opts)
	}
	return qs
}

// scriptCalls counts the scripts a server has run.
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info := srv.Client(t).Info(context.Background(), "commandstats").Val()
	n := 0
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				c, _ := strconv.Atoi(calls)
				n += c
			}
		}
	}
	return n
}

// Every behaviour that several workers share, on one Redis server and on a
// Redis Cluster.
func TestShared(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("concurrency", func(t *testing.T) { testConcurrency(t, b) })
			t.Run("rate", func(t *testing.T) { testRate(t, b) })
			t.Run("dead holder", func(t *testing.T) { testDeadHolder(t, b) })
			t.Run("lease extended", func(t *testing.T) { testLeaseExtended(t, b) })
			t.Run("throttled", func(t *testing.T) { testThrottled(t, b) })
			t.Run("cancel", func(t *testing.T) { testCancel(t, b) })
		})
	}
}

// Three workers, 12 callers each, never hold more slots at once than the
// limit, and do reach it.
func testConcurrency(t *testing.T, b backend) {
	cases := []struct {
		name  string
		limit Limit
	}{
		{"concurrency only", Limit{Concurrent: 4}},
		{"with a rate", Limit{Concurrent: 3, PerMinute: 60_000, Burst: 10}},
		{"one at a time", Limit{Concurrent: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			model := "m-" + t.Name()
			qs := workers(t, b, 3, Limits{model: tc.limit}, Options{Poll: 20 * time.Millisecond})
			var cur, peak, calls atomic.Int64
			ctx := context.Background()
			deadline := time.Now().Add(1500 * time.Millisecond)
			var wg sync.WaitGroup
			for i := 0; i < 36; i++ {
				wg.Add(1)
				go func(q *Quota) {
					defer wg.Done()
					for time.Now().Before(deadline) {
						s, err := q.Acquire(ctx, model)
						if err != nil {
							t.Error(err)
							return
						}
						n := cur.Add(1)
						for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
						}
						time.Sleep(5 * time.Millisecond)
						calls.Add(1)
						cur.Add(-1)
						s.Release()
					}
				}(qs[i%len(qs)])
			}
			wg.Wait()
			if p := peak.Load(); p > int64(tc.limit.Concurrent) {
				t.Errorf("%d calls ran at once; the limit is %d", p, tc.limit.Concurrent)
			} else if p < int64(tc.limit.Concurrent) {
				t.Errorf("at most %d calls ran at once; the limit of %d was never reached", p, tc.limit.Concurrent)
			}
			if calls.Load() < 10 {
				t.Errorf("only %d calls in 1.5 s", calls.Load())
			}
			// Every slot was given back.
			if n := qs[0].rdb.ZCard(ctx, "quota:{"+model+"}:holders").Val(); n != 0 {
				t.Errorf("%d holders left after every release", n)
			}
		})
	}
}

// Three workers calling as fast as they may start no more calls than the
// rate allows (the burst, then PerMinute a minute), and their waiters do not
// poll Redis each on its own.
func testRate(t *testing.T, b backend) {
	cases := []struct {
		name  string
		limit Limit
	}{
		{"burst 1", Limit{PerMinute: 600}},
		{"burst 5", Limit{PerMinute: 600, Burst: 5}},
		{"with concurrency", Limit{PerMinute: 600, Concurrent: 50}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			model := "m-" + t.Name()
			qs := workers(t, b, 3, Limits{model: tc.limit}, Options{})
			ctx := context.Background()
			var calls atomic.Int64
			before := 0
			if b.srv != nil {
				before = scriptCalls(t, b.srv)
			}
			const callers = 60 // 20 a worker
			start := time.Now()
			runFor := 3 * time.Second
			var wg sync.WaitGroup
			for i := 0; i < callers; i++ {
				wg.Add(1)
				go func(q *Quota) {
					defer wg.Done()
					for time.Since(start) < runFor {
						cctx, cancel := context.WithDeadline(ctx, start.Add(runFor))
						s, err := q.Acquire(cctx, model)
						cancel()
						if errors.Is(err, context.DeadlineExceeded) {
							return
						}
						if err != nil {
							t.Error(err)
							return
						}
						calls.Add(1)
						s.Release()
					}
				}(qs[i%len(qs)])
			}
			wg.Wait()
			elapsed := time.Since(start)
			perSecond := float64(tc.limit.PerMinute) / 60
			ceiling := int64(perSecond*elapsed.Seconds()) + int64(max(tc.limit.Burst, 1)) + 1
			floor := int64(perSecond * runFor.Seconds() / 3)
			if n := calls.Load(); n > ceiling {
				t.Errorf("%d calls in %v; the rate allows at most %d", n, elapsed, ceiling)
			} else if n < floor {
				t.Errorf("only %d calls in %v at %v a second", n, elapsed, perSecond)
			}
			if b.srv != nil {
				// One caller a worker asks Redis, sleeping Redis's
				// Retry-After between: about perSecond refusals a second
				// each, not one per caller.
				scripts := scriptCalls(t, b.srv) - before
				bound := int(float64(len(qs))*perSecond*runFor.Seconds())*3 + 2*int(calls.Load())
				if scripts > bound {
					t.Errorf("%d scripts for %d calls by %d callers: waiters poll Redis (want at most %d)", scripts, calls.Load(), callers, bound)
				}
				t.Logf("%d calls, %d scripts, %v", calls.Load(), scripts, elapsed)
			}
		})
	}
}

// A worker that dies holding a slot (it is never released, its lease never
// extended) frees it when its lease runs out, not before.
func testDeadHolder(t *testing.T, b backend) {
	const lease = 600 * time.Millisecond
	model := "m-" + t.Name()
	limits := Limits{model: {Concurrent: 1}}
	qs := workers(t, b, 2, limits, Options{Lease: lease, Poll: 20 * time.Millisecond})
	ctx := context.Background()
	start := time.Now()
	s, err := qs[0].Acquire(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	s.cancel() // the worker dies: no more extensions, no release
	<-s.done
	cctx, cancel := context.WithTimeout(ctx, lease+5*time.Second)
	defer cancel()
	s2, err := qs[1].Acquire(cctx, model)
	if err != nil {
		t.Fatalf("the dead worker's slot was never freed: %v", err)
	}
	defer s2.Release()
	if got := time.Since(start); got < lease-5*time.Millisecond {
		t.Errorf("the dead worker's slot was taken after %v, before its lease of %v ran out", got, lease)
	}
}

// A slot held longer than its lease stays held: its lease is extended;
// and a holder lost meanwhile (Redis emptied) is added back.
func testLeaseExtended(t *testing.T, b backend) {
	const lease = 900 * time.Millisecond
	model := "m-" + t.Name()
	limits := Limits{model: {Concurrent: 1}}
	qs := workers(t, b, 2, limits, Options{Lease: lease, Poll: 20 * time.Millisecond})
	ctx := context.Background()
	s, err := qs[0].Acquire(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*lease)
	defer cancel()
	if s2, err := qs[1].Acquire(cctx, model); !errors.Is(err, context.DeadlineExceeded) {
		s2.Release()
		t.Fatalf("a second slot of 1 while the first is held for %v: %v", 3*lease, err)
	}
	holders := "quota:{" + model + "}:holders"
	qs[0].rdb.Del(ctx, holders)
	waitFor(t, 5*time.Second, "the lost holder added again", func() bool {
		return qs[0].rdb.ZScore(ctx, holders, s.member).Err() == nil
	})
	s.Release()
	if n := qs[0].rdb.ZCard(ctx, holders).Val(); n != 0 {
		t.Errorf("%d holders after the release", n)
	}
	s2, err := qs[1].Acquire(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	s2.Release()
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// A 429 seen by one worker stops every worker until its Retry-After, with
// either limit or both.
func testThrottled(t *testing.T, b backend) {
	cases := []struct {
		name  string
		limit Limit
	}{
		{"rate", Limit{PerMinute: 60_000, Burst: 100}},
		{"concurrency", Limit{Concurrent: 10}},
		{"both", Limit{PerMinute: 60_000, Burst: 100, Concurrent: 10}},
	}
	const wait = 700 * time.Millisecond
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			model := "m-" + t.Name()
			qs := workers(t, b, 3, Limits{model: tc.limit}, Options{Poll: 20 * time.Millisecond})
			ctx := context.Background()
			start := time.Now()
			if err := qs[0].Throttled(ctx, model, wait); err != nil {
				t.Fatal(err)
			}
			// A shorter Retry-After does not cut the cooldown short.
			if err := qs[1].Throttled(ctx, model, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if d, err := qs[2].Cooldown(ctx, model); err != nil || d <= 0 || d > wait {
				t.Errorf("Cooldown = %v, %v; want up to %v", d, err, wait)
			}
			var wg sync.WaitGroup
			for i := 0; i < 9; i++ {
				wg.Add(1)
				go func(q *Quota) {
					defer wg.Done()
					s, err := q.Acquire(ctx, model)
					if err != nil {
						t.Error(err)
						return
					}
					defer s.Release()
					if got := time.Since(start); got < wait-5*time.Millisecond {
						t.Errorf("a call went %v after a 429 with Retry-After %v", got, wait)
					}
					if s.Waited() <= 0 {
						t.Errorf("Waited = %v after a cooldown", s.Waited())
					}
				}(qs[i%len(qs)])
			}
			wg.Wait()
			if got := time.Since(start); got > wait+5*time.Second {
				t.Errorf("calls waited %v after a cooldown of %v", got, wait)
			}
			if d, _ := qs[0].Cooldown(ctx, model); d != 0 {
				t.Errorf("Cooldown = %v after it ran out", d)
			}
		})
	}
}

// A caller whose context ends while it waits (on a full semaphore, a
// cooldown, the rate, or behind another caller of its worker) gets its
// context's error at once, and holds nothing.
func testCancel(t *testing.T, b backend) {
	cases := []struct {
		name  string
		limit Limit
		setup func(t *testing.T, q *Quota, model string) error
	}{
		{"full semaphore", Limit{Concurrent: 1}, func(t *testing.T, q *Quota, model string) error {
			s, err := q.Acquire(context.Background(), model)
			t.Cleanup(s.Release) // held until the test ends
			return err
		}},
		{"cooldown", Limit{Concurrent: 1}, func(t *testing.T, q *Quota, model string) error {
			return q.Throttled(context.Background(), model, time.Minute)
		}},
		{"cooldown, rate only", Limit{PerMinute: 100}, func(t *testing.T, q *Quota, model string) error {
			return q.Throttled(context.Background(), model, time.Minute)
		}},
		{"rate", Limit{PerMinute: 1}, func(t *testing.T, q *Quota, model string) error {
			s, err := q.Acquire(context.Background(), model) // the minute's one call
			if err == nil {
				s.Release()
			}
			return err
		}},
		{"rate, holding a slot", Limit{PerMinute: 1, Concurrent: 5}, func(t *testing.T, q *Quota, model string) error {
			s, err := q.Acquire(context.Background(), model)
			if err == nil {
				s.Release()
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			model := "m-" + t.Name()
			qs := workers(t, b, 2, Limits{model: tc.limit}, Options{Poll: 20 * time.Millisecond})
			ctx := context.Background()
			if err := tc.setup(t, qs[0], model); err != nil {
				t.Fatal(err)
			}
			// Several callers of one worker: one asks Redis, the others
			// wait behind it; all return.
			cctx, cancel := context.WithCancel(ctx)
			errs := make(chan error, 5)
			for i := 0; i < 5; i++ {
				go func() {
					s, err := qs[1].Acquire(cctx, model)
					if err == nil {
						s.Release()
					}
					errs <- err
				}()
			}
			time.Sleep(100 * time.Millisecond)
			cancelled := time.Now()
			cancel()
			for i := 0; i < 5; i++ {
				if err := <-errs; !errors.Is(err, context.Canceled) {
					t.Errorf("Acquire = %v; want context.Canceled", err)
				}
			}
			if d := time.Since(cancelled); d > 2*time.Second {
				t.Errorf("Acquire returned %v after its context ended", d)
			}
			// A deadline: DeadlineExceeded.
			dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer dcancel()
			if _, err := qs[1].Acquire(dctx, model); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire past its deadline = %v", err)
			}
			// The cancelled callers hold nothing.
			want := int64(0)
			if tc.name == "full semaphore" {
				want = 1
			}
			if n := qs[0].rdb.ZCard(ctx, "quota:{"+model+"}:holders").Val(); n != want {
				t.Errorf("%d holders after the cancellations; want %d", n, want)
			}
		})
	}
}

// countHook counts the commands a client sends.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// A model without limits passes straight through, with no Redis call; a
// model given none by its own entry is exempt from "*".
func TestUnlimitedSkipsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	h := &countHook{}
	rdb.AddHook(h)
	cases := []struct {
		name   string
		limits Limits
		model  string
	}{
		{"no limits", nil, "a"},
		{"another model limited", Limits{"b": {PerMinute: 1, Concurrent: 1}}, "a"},
		{"exempt from *", Limits{"*": {PerMinute: 1, Concurrent: 1}, "a": {}}, "a"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := New(rdb, tc.limits, Options{})
			for i := 0; i < 100; i++ {
				s, err := q.Acquire(ctx, tc.model)
				if err != nil {
					t.Fatal(err)
				}
				s.Release()
				s.Release() // twice: nothing
			}
			if err := q.Throttled(ctx, tc.model, time.Minute); err != nil {
				t.Fatal(err)
			}
			if d, err := q.Cooldown(ctx, tc.model); d != 0 || err != nil {
				t.Errorf("Cooldown = %v, %v", d, err)
			}
			if n := h.n.Load(); n != 0 {
				t.Errorf("%d Redis commands for a model without limits", n)
			}
		})
	}
}

// "*" limits every model not named, each with its own quota.
func TestAnyModelLimitsEachModel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	q := New(srv.Client(t), Limits{"*": {Concurrent: 1}}, Options{})
	ctx := context.Background()
	a, err := q.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := q.Acquire(ctx, "b") // its own slot, not a's
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := q.Acquire(cctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second slot of a: %v", err)
	}
	if _, err := q.Acquire(ctx, ""); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("no model: %v", err)
	}
}

// A release wakes a waiter of the same worker at once, not at its next
// poll.
func TestReleaseWakesLocalWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	q := New(srv.Client(t), Limits{"m": {Concurrent: 1}}, Options{Poll: time.Minute})
	ctx := context.Background()
	s, err := q.Acquire(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		s2, err := q.Acquire(ctx, "m")
		if err == nil {
			s2.Release()
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the waiter found the semaphore full
	s.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// Throttled without a Retry-After waits Options.Cooldown; a long one is
// capped at Options.MaxCooldown.
func TestCooldownDefaults(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	q := New(srv.Client(t), Limits{"*": {PerMinute: 60}}, Options{Cooldown: 3 * time.Second, MaxCooldown: 20 * time.Second})
	ctx := context.Background()
	cases := []struct {
		model    string
		after    time.Duration
		min, max time.Duration
	}{
		{"none", 0, 2 * time.Second, 3 * time.Second},
		{"negative", -time.Second, 2 * time.Second, 3 * time.Second},
		{"given", 7 * time.Second, 6 * time.Second, 7 * time.Second},
		{"capped", time.Hour, 19 * time.Second, 20 * time.Second},
	}
	for _, tc := range cases {
		if err := q.Throttled(ctx, tc.model, tc.after); err != nil {
			t.Fatal(err)
		}
		d, err := q.Cooldown(ctx, tc.model)
		if err != nil || d < tc.min || d > tc.max {
			t.Errorf("%s: Throttled(%v) → Cooldown %v, %v; want %v to %v", tc.model, tc.after, d, err, tc.min, tc.max)
		}
	}
}

// With Redis gone, Acquire and Throttled fail as unavailable, retryable.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	q := New(rdb, Limits{"c": {Concurrent: 1}, "r": {PerMinute: 1}}, Options{})
	if err := srv.Proc.Down(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, model := range []string{"c", "r"} {
		_, err := q.Acquire(ctx, model)
		if apperr.CodeOf(err) != apperr.Unavailable || !apperr.IsRetryable(err) {
			t.Errorf("Acquire(%s) with Redis down: %v", model, err)
		}
		if err := q.Throttled(ctx, model, time.Second); apperr.CodeOf(err) != apperr.Unavailable {
			t.Errorf("Throttled(%s) with Redis down: %v", model, err)
		}
	}
}

func TestParseLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, rpm, conc string
		want            Limits
		err             []string // substrings of the error
	}{
		{name: "empty", want: Limits{}},
		{name: "blank", rpm: "  ", conc: "\t", want: Limits{}},
		{name: "per model", rpm: "lumen-2.5-flash-image=60,lumen-3-pro-image-preview=20",
			want: Limits{"lumen-2.5-flash-image": {PerMinute: 60}, "lumen-3-pro-image-preview": {PerMinute: 20}}},
		{name: "every model", rpm: "*=60", conc: "*=8", want: Limits{"*": {PerMinute: 60, Concurrent: 8}}},
		{name: "merged, * fills the other", rpm: "*=60, pro = 20", conc: "pro=4,flash=16",
			want: Limits{"*": {PerMinute: 60}, "pro": {PerMinute: 20, Concurrent: 4}, "flash": {PerMinute: 60, Concurrent: 16}}},
		{name: "0 exempts from *", rpm: "*=60,free=0", conc: "*=8",
			want: Limits{"*": {PerMinute: 60, Concurrent: 8}, "free": {Concurrent: 8}}},
		{name: "concurrency only", conc: "m=2", want: Limits{"m": {Concurrent: 2}}},
		{name: "no =", rpm: "m60", err: []string{EnvRPM, `"m60"`, "model=number"}},
		{name: "no model", conc: "=5", err: []string{EnvConcurrency, "no model"}},
		{name: "not a number", rpm: "m=fast", err: []string{EnvRPM, `m="fast"`, "whole number"}},
		{name: "negative", conc: "m=-1", err: []string{EnvConcurrency, "whole number"}},
		{name: "too large", rpm: "m=1000001", err: []string{EnvRPM, "1000000"}},
		{name: "fraction", rpm: "m=1.5", err: []string{"whole number"}},
		{name: "twice", rpm: "m=1,m=2", err: []string{"listed twice"}},
		{name: "empty entry", rpm: "a=1,,b=2", err: []string{"empty entry"}},
		{name: "trailing comma", conc: "a=1,", err: []string{EnvConcurrency, "empty entry"}},
		{name: "braces", rpm: "a}b=1", err: []string{"braces"}},
		{name: "space in model", rpm: "a b=1", err: []string{"spaces"}},
		{name: "both wrong, both named", rpm: "x", conc: "y", err: []string{EnvRPM, EnvConcurrency}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLimits(tc.rpm, tc.conc)
			if tc.err != nil {
				if err == nil {
					t.Fatalf("ParseLimits(%q, %q) = %v; want an error", tc.rpm, tc.conc, got)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("ParseLimits(%q, %q) = %v; want %v", tc.rpm, tc.conc, got, tc.want)
			}
		})
	}
}

func TestLimitsFor(t *testing.T) {
	t.Parallel()
	ls := Limits{"*": {PerMinute: 60}, "a": {Concurrent: 2}}
	if got := ls.For("a"); got != (Limit{Concurrent: 2}) {
		t.Errorf("For(a) = %+v", got)
	}
	if got := ls.For("other"); got != (Limit{PerMinute: 60}) {
		t.Errorf("For(other) = %+v", got)
	}
	if got := (Limits{}).For("x"); !got.unlimited() {
		t.Errorf("no limits: For = %+v", got)
	}
	if s := (Limits{"*": {PerMinute: 60, Concurrent: 8}, "a": {PerMinute: 20, Burst: 3}, "b": {}}).String(); s != "a: 20/min (burst 3); b: no limit; *: 60/min, 8 at once" {
		t.Errorf("String = %q", s)
	}
}
