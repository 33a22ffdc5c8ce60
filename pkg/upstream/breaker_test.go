package upstream

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/tools/testkit/redistest"
)

// Short settings: NewBreakers takes a Breaker as it is (only zeros take
// the defaults), below the file's 1 s minimum.
var fast = Breaker{Failures: 3, Cooldown: Duration(300 * time.Millisecond), Throttle: Duration(200 * time.Millisecond), MaxThrottle: Duration(700 * time.Millisecond)}

// A window that a test checks is still open right after it opened it must
// outlast any stall of a loaded machine between two Redis calls: the
// subtests that check so take a long window, not fast's.
const longWindow = time.Second

// The breaker's clock is Redis's TIME, in milliseconds: a wait it reports
// may be up to this much shorter than the time still to go by Go's clock.
const redisClockSlack = 5 * time.Millisecond

// past sleeps until d after since: a deadline counted from an event the
// test recorded, not from now, so a slow step in between does not add to it.
func past(since time.Time, d time.Duration) {
	time.Sleep(time.Until(since.Add(d + 50*time.Millisecond)))
}

func gem(name, key string) Upstream {
	return Upstream{Name: name, Provider: Gemini, APIKey: key, Weight: 1}
}

type harness struct {
	t   *testing.T
	ctx context.Context
	b   *Breakers
}

func (h harness) allow(u Upstream) (Verdict, time.Duration) {
	h.t.Helper()
	v, wait, err := h.b.Allow(h.ctx, u)
	if err != nil {
		h.t.Fatalf("Allow: %v", err)
	}
	return v, wait
}

func (h harness) report(u Upstream, o Outcome) (State, State) {
	h.t.Helper()
	before, after, err := h.b.Report(h.ctx, u, o, "call: "+string(o))
	if err != nil {
		h.t.Fatalf("Report %s: %v", o, err)
	}
	return before, after
}

func (h harness) wantVerdict(u Upstream, want Verdict) time.Duration {
	h.t.Helper()
	v, wait := h.allow(u)
	if v != want {
		h.t.Fatalf("Allow(%s) = %d (wait %v); want %d", u.Name, v, wait, want)
	}
	return wait
}

// open reports failures until u's breaker opens.
func (h harness) open(u Upstream) {
	h.t.Helper()
	for i := 0; i < h.b.cfg.Failures; i++ {
		h.report(u, Failure)
	}
}

func newHarness(t *testing.T, rdb redis.UniversalClient, cfg Breaker) harness {
	b := NewBreakers(rdb, cfg)
	return harness{t: t, ctx: context.Background(), b: b}
}

// concurrentAllow asks Allow n times at once, through each of bs in turn,
// and counts the verdicts.
func concurrentAllow(t *testing.T, u Upstream, n int, bs ...*Breakers) map[Verdict]int {
	t.Helper()
	var (
		mu  sync.Mutex
		out = map[Verdict]int{}
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v, _, err := bs[i%len(bs)].Allow(context.Background(), u)
			if err != nil {
				t.Errorf("Allow: %v", err)
				return
			}
			mu.Lock()
			out[v]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// The subtests run in parallel: each has upstreams of its own, and each
// waits out real cooldowns.
func TestBreaker(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)

	t.Run("closed until N failures in a row, then open", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		u := gem("opens", "k")
		h.wantVerdict(u, Allow)
		for i := 0; i < fast.Failures-1; i++ {
			if before, after := h.report(u, Failure); before != Closed || after != Closed {
				t.Fatalf("failure %d: %s → %s; want closed → closed", i+1, before, after)
			}
			h.wantVerdict(u, Allow)
		}
		if before, after := h.report(u, Failure); before != Closed || after != Open {
			t.Fatalf("failure %d: %s → %s; want closed → open", fast.Failures, before, after)
		}
		wait := h.wantVerdict(u, Deny)
		if wait <= 0 || wait > time.Duration(fast.Cooldown) {
			t.Errorf("wait %v while open; want (0, %v]", wait, time.Duration(fast.Cooldown))
		}
	})

	t.Run("a success resets the count", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		u := gem("resets", "k")
		for round := 0; round < 3; round++ {
			for i := 0; i < fast.Failures-1; i++ {
				h.report(u, Failure)
			}
			if before, after := h.report(u, Success); before != Closed || after != Closed {
				t.Fatalf("success: %s → %s", before, after)
			}
		}
		h.wantVerdict(u, Allow)
		// A final error (the caller's input) is an answer too.
		for i := 0; i < fast.Failures-1; i++ {
			h.report(u, Failure)
		}
		h.report(u, Final)
		h.report(u, Failure)
		h.wantVerdict(u, Allow)
	})

	t.Run("after the cooldown exactly one probe; success closes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		u := gem("probe-ok", "k")
		opened := time.Now()
		h.open(u)
		if got := concurrentAllow(t, u, 10, h.b); got[Deny] != 10 {
			t.Fatalf("while open: %v; want 10 denials", got)
		}
		past(opened, time.Duration(fast.Cooldown))
		got := concurrentAllow(t, u, 10, h.b)
		if got[Probe] != 1 || got[Deny] != 9 {
			t.Fatalf("after the cooldown: %v; want 1 probe and 9 denials", got)
		}
		// Still one probe out: everyone else waits for it.
		h.wantVerdict(u, Deny)
		if before, after := h.report(u, Success); before != HalfOpen || after != Closed {
			t.Fatalf("probe success: %s → %s; want half → closed", before, after)
		}
		if got := concurrentAllow(t, u, 10, h.b); got[Allow] != 10 {
			t.Fatalf("closed again: %v; want 10 allowed", got)
		}
		// And the count starts again from zero.
		for i := 0; i < fast.Failures-1; i++ {
			h.report(u, Failure)
		}
		h.wantVerdict(u, Allow)
	})

	t.Run("probe failure opens it again for a full cooldown", func(t *testing.T) {
		t.Parallel()
		u := gem("probe-fails", "k")
		cfg := fast
		cfg.Cooldown = Duration(longWindow)
		h := newHarness(t, rdb, cfg)
		opened := time.Now()
		h.open(u)
		past(opened, longWindow)
		h.wantVerdict(u, Probe)
		failed := time.Now()
		if before, after := h.report(u, Failure); before != HalfOpen || after != Open {
			t.Fatalf("probe failure: %s → %s; want half → open", before, after)
		}
		wait := h.wantVerdict(u, Deny)
		if left := longWindow - time.Since(failed) - redisClockSlack; wait < left || wait > longWindow {
			t.Errorf("wait %v after a failed probe; want a full cooldown (%v) from the failure: at least %v", wait, longWindow, left)
		}
		past(failed, longWindow)
		if got := concurrentAllow(t, u, 10, h.b); got[Probe] != 1 || got[Deny] != 9 {
			t.Fatalf("second cooldown: %v; want 1 probe and 9 denials", got)
		}
		if _, after := h.report(u, Final); after != Closed {
			t.Errorf("a probe answered with a final error: %s; want closed (the upstream answered)", after)
		}
	})

	t.Run("a probe that never reports frees its lease", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		h.b.ProbeLease = longWindow
		u := gem("probe-lost", "k")
		opened := time.Now()
		h.open(u)
		past(opened, time.Duration(fast.Cooldown))
		probed := time.Now()
		h.wantVerdict(u, Probe) // its worker dies
		h.wantVerdict(u, Deny)
		past(probed, longWindow)
		if got := concurrentAllow(t, u, 10, h.b); got[Probe] != 1 || got[Deny] != 9 {
			t.Fatalf("after the lease: %v; want 1 probe and 9 denials", got)
		}
	})

	t.Run("429 cools without opening, doubling up to the max", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		u := gem("throttled", "k")
		th := time.Duration(fast.Throttle)
		// Many 429s in a row never open the breaker.
		for i := 0; i < 3*fast.Failures; i++ {
			if _, after := h.report(u, Throttled); after != Closed {
				t.Fatalf("429 number %d: breaker %s; want closed", i+1, after)
			}
		}
		// Reset the streak, then measure each cooling.
		h.report(u, Success)
		for i, want := range []time.Duration{th, 2 * th, time.Duration(fast.MaxThrottle)} { // 200, 400, then 800 capped to 700
			reported := time.Now()
			h.report(u, Throttled)
			wait := h.wantVerdict(u, Deny)
			if left := want - time.Since(reported) - redisClockSlack; wait > want || wait < left {
				t.Errorf("429 number %d in a row: cooling %v; want %v from the 429: at least %v", i+1, wait, want, left)
			}
			past(reported, want)
			h.wantVerdict(u, Allow)
		}
		// A success ends the streak: the next 429 cools the first time again.
		h.report(u, Success)
		h.report(u, Throttled)
		if wait := h.wantVerdict(u, Deny); wait > th {
			t.Errorf("429 after a success: cooling %v; want at most %v", wait, th)
		}
	})

	t.Run("429 on the probe gives it back", func(t *testing.T) {
		t.Parallel()
		cfg := fast
		cfg.Throttle, cfg.MaxThrottle = Duration(longWindow), Duration(longWindow)
		h := newHarness(t, rdb, cfg)
		u := gem("probe-429", "k")
		opened := time.Now()
		h.open(u)
		past(opened, time.Duration(fast.Cooldown))
		h.wantVerdict(u, Probe)
		throttled := time.Now()
		if before, after := h.report(u, Throttled); before != HalfOpen || after != HalfOpen {
			t.Fatalf("429 on the probe: %s → %s; want half → half", before, after)
		}
		h.wantVerdict(u, Deny) // cooling
		past(throttled, longWindow)
		if got := concurrentAllow(t, u, 10, h.b); got[Probe] != 1 || got[Deny] != 9 {
			t.Fatalf("after cooling: %v; want 1 probe and 9 denials", got)
		}
	})

	t.Run("refused: disabled until the credential changes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		u := gem("refused", "revoked-key")
		h.wantVerdict(u, Allow)
		if before, after := h.report(u, Refused); before != Closed || after != Closed {
			t.Errorf("refused: %s → %s; the breaker itself is untouched", before, after)
		}
		refused := time.Now()
		if got := concurrentAllow(t, u, 5, h.b); got[Disabled] != 5 {
			t.Fatalf("refused credential: %v; want 5 disabled", got)
		}
		past(refused, time.Duration(fast.Cooldown))
		h.wantVerdict(u, Disabled) // no timer ends it
		// Another breaker value (a reloaded pool) with the same key: still out.
		other := newHarness(t, rdb, fast)
		other.wantVerdict(u, Disabled)
		// The file gives it a new key: back.
		u2 := u
		u2.APIKey = "fresh-key"
		h.wantVerdict(u2, Allow)
		// A new base_url is another credential too.
		u3 := u
		u3.BaseURL = "https://proxy.example.com"
		h.wantVerdict(u3, Allow)
		// The new key refused as well: disabled again, for that key.
		h.report(u2, Refused)
		h.wantVerdict(u2, Disabled)
	})

	t.Run("upstreams are independent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		a, b := gem("indep-a", "k"), gem("indep-b", "k")
		h.open(a)
		h.report(b, Refused)
		c := gem("indep-c", "k")
		h.report(c, Throttled)
		h.wantVerdict(a, Deny)
		h.wantVerdict(b, Disabled)
		h.wantVerdict(c, Deny)
		h.wantVerdict(gem("indep-d", "k"), Allow)
	})

	t.Run("a long message is cut", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, rdb, fast)
		u := gem("long", "k")
		if _, _, err := h.b.Report(h.ctx, u, Failure, strings.Repeat("x", 5000)); err != nil {
			t.Fatal(err)
		}
		v, err := rdb.LIndex(h.ctx, errorsKey(u.Name), 0).Result()
		if err != nil || len(v) > 500 || !strings.Contains(v, "...") {
			t.Errorf("kept error %d bytes (%v); want it cut to about 300", len(v), err)
		}
	})
}

// Two workers, each with its own client and Breakers, on one Redis (a
// server, and a cluster): one state.
func TestBreakerShared(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	backends := map[string]func() redis.UniversalClient{
		"server": func() redis.UniversalClient { return srv.Client(t) },
	}
	if !testing.Short() {
		cl := redistest.StartCluster(t)
		opt, err := redis.ParseClusterURL(cl.URL)
		if err != nil {
			t.Fatal(err)
		}
		backends["cluster"] = func() redis.UniversalClient {
			c := redis.NewClusterClient(opt)
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	}
	for name, client := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A long throttle: a 429 one worker saw must still cool the
			// other when it asks.
			cfg := fast
			cfg.Throttle, cfg.MaxThrottle = Duration(longWindow), Duration(longWindow)
			w1, w2 := newHarness(t, client(), cfg), newHarness(t, client(), cfg)
			u := gem("shared", "k")
			// Failures from both add up.
			for i := 0; i < fast.Failures-1; i++ {
				[]harness{w1, w2}[i%2].report(u, Failure)
			}
			w1.wantVerdict(u, Allow)
			w2.wantVerdict(u, Allow)
			opened := time.Now()
			if _, after := w2.report(u, Failure); after != Open {
				t.Fatalf("the %dth failure, from either worker: %s; want open", fast.Failures, after)
			}
			w1.wantVerdict(u, Deny)
			w2.wantVerdict(u, Deny)
			past(opened, time.Duration(fast.Cooldown))
			// One probe among both workers' callers.
			if got := concurrentAllow(t, u, 10, w1.b, w2.b); got[Probe] != 1 || got[Deny] != 9 {
				t.Fatalf("both workers after the cooldown: %v; want 1 probe and 9 denials", got)
			}
			// Whoever probed, the other's report of it closes it for both.
			w1.report(u, Success)
			w2.wantVerdict(u, Allow)
			// A 429 seen by one cools both; a refusal seen by one disables both.
			w1.report(u, Throttled)
			w2.wantVerdict(u, Deny)
			w2.report(u, Refused)
			w1.wantVerdict(u, Disabled)
		})
	}
}
