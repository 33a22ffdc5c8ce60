package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/tools/testkit/redistest"
)

func TestExactBelowLeaseThreshold(t *testing.T) {
	srv := redistest.Start(t)
	l := New(srv.Client(t))
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		r, err := l.Allow(ctx, "b", 5)
		if err != nil || !r.Allowed || r.Limit != 5 || r.Remaining != 4-i {
			t.Fatalf("request %d: %+v %v", i, r, err)
		}
	}
	r, _ := l.Allow(ctx, "b", 5)
	if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > time.Second {
		t.Errorf("sixth request: %+v; want refused with a retry-after", r)
	}
}

// evalCalls counts the scripts Redis has run.
func evalCalls(t *testing.T, srv *redistest.Server) int {
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

// TestLeasesNeverExceedTheLimit: several gateways (limiters) hammer one key
// past its limit; together they admit no more than the limit allows (its
// burst, plus what refills while the test runs).
func TestLeasesNeverExceedTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 1000
	gateways := []*Limiter{New(srv.Client(t)), New(srv.Client(t)), New(srv.Client(t))}
	ctx := context.Background()
	var allowed, requests atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(l *Limiter) {
			defer wg.Done()
			for time.Since(start) < 500*time.Millisecond {
				r, err := l.Allow(ctx, "hot", limit)
				if err != nil {
					t.Error(err)
					return
				}
				requests.Add(1)
				if r.Allowed {
					allowed.Add(1)
				}
			}
		}(gateways[i%len(gateways)])
	}
	wg.Wait()
	elapsed := time.Since(start)
	// GCRA admits the burst (= limit) at once, then limit per second.
	ceiling := int64(limit + float64(limit)*elapsed.Seconds() + 1)
	if allowed.Load() > ceiling {
		t.Errorf("admitted %d in %v; the limit allows at most %d", allowed.Load(), elapsed, ceiling)
	}
	if allowed.Load() < limit/2 {
		t.Errorf("admitted only %d of a %d burst", allowed.Load(), limit)
	}
	if requests.Load() <= allowed.Load() {
		t.Errorf("the test never went past the limit (%d requests)", requests.Load())
	}
}

// TestLeasesCutRedisCalls: under a high limit that is not reached, Redis
// sees one call per batch, not one per request.
func TestLeasesCutRedisCalls(t *testing.T) {
	srv := redistest.Start(t)
	l := New(srv.Client(t))
	ctx := context.Background()
	before := evalCalls(t, srv)
	const n = 5000
	for i := 0; i < n; i++ {
		r, err := l.Allow(ctx, "cool", 100_000)
		if err != nil || !r.Allowed || r.Remaining <= 0 {
			t.Fatalf("request %d: %+v %v", i, r, err)
		}
	}
	if calls := evalCalls(t, srv) - before; calls > n/50 {
		t.Errorf("%d Redis calls for %d requests; want about one per %d", calls, n, maxBatch)
	}
}

func TestLeaseRefusalAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	l := New(srv.Client(t))
	ctx := context.Background()
	now := time.Now()
	l.now = func() time.Time { return now }
	// Exhaust a 100/s bucket. The gateway's clock stands still, but Redis's
	// does not: the bucket refills at 100/s of real time while the loop runs
	// (tens of milliseconds on a loaded machine), so the bound counts it.
	start := time.Now()
	admitted := 0
	for i := 0; i < 300; i++ {
		r, err := l.Allow(ctx, "k", 100)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
			if r.Remaining < 0 || r.Limit != 100 {
				t.Fatalf("result %+v", r)
			}
		} else if r.RetryAfter <= 0 {
			t.Fatalf("refusal without a retry-after: %+v", r)
		}
	}
	elapsed := time.Since(start)
	ceiling := 100 + int(100*elapsed.Seconds()) + 2 // + one batch in flight
	if admitted < 90 || admitted > ceiling {
		t.Errorf("admitted %d of a 100 burst in %v; the limit allows at most %d", admitted, elapsed, ceiling)
	}
	// A changed limit does not use the old lease.
	if r, _ := l.Allow(ctx, "k", 200); r.Limit != 200 {
		t.Errorf("limit %d after a change", r.Limit)
	}
}

// Below the lease threshold too, a refusal is remembered until its
// Retry-After: a client hammering past a limit of 2/s costs Redis one script,
// not one a request.
func TestRefusalsRememberedBelowLeaseThreshold(t *testing.T) {
	srv := redistest.Start(t)
	l := New(srv.Client(t))
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if r, err := l.Allow(ctx, "low", 2); err != nil || !r.Allowed {
			t.Fatalf("request %d: %+v %v", i, r, err)
		}
	}
	before := evalCalls(t, srv)
	refused := 0
	for i := 0; i < 200; i++ {
		r, err := l.Allow(ctx, "low", 2)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			refused++
			if r.RetryAfter <= 0 || r.RetryAfter > time.Second {
				t.Fatalf("refusal %d: Retry-After %v", i, r.RetryAfter)
			}
		}
	}
	calls := evalCalls(t, srv) - before
	if refused < 150 || calls > 5 {
		t.Errorf("%d of 200 refused with %d scripts run; want (nearly) all refused for a handful of scripts", refused, calls)
	}
}
