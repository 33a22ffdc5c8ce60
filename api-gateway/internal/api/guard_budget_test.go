package api_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/pkg/account"
)

// Concurrent requests with bad keys cannot overrun the budgets: each takes
// its try before its lookup (else 100 at once from one address reach Redis
// more often than the burst of 20 allows, and 50 addresses get 1,000
// lookups through); a network's addresses share its budget, and everyone
// shares the gateway's.
func TestFailedAuthenticationBudgetsHoldUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		limits      auth.GuardLimits
		addrs       func(i int) string
		requests    int
		maxLookups  int64
		minRefusals int
		// refill is the tightest budget's tries a second.
		refill float64
	}{
		{"one address, 100 at once", auth.GuardLimits{PerAddress: 5}, func(int) string { return "203.0.113.7" }, 100, 25, 75, 5},
		{"50 addresses of one /24", auth.GuardLimits{PerAddress: 5, PerPrefix: 2}, func(i int) string { return fmt.Sprintf("203.0.113.%d", i%50) }, 1000, 20, 980, 2},
		{"50 addresses of one /64", auth.GuardLimits{PerAddress: 5, PerPrefix: 2}, func(i int) string { return fmt.Sprintf("2001:db8::%x", i%50) }, 1000, 20, 980, 2},
		{"500 networks", auth.GuardLimits{PerAddress: 5, PerPrefix: 20, Global: 5}, func(i int) string { return fmt.Sprintf("10.%d.%d.1", i%250, i/250%2) }, 1000, 30, 970, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var lookups *countingAuth
			e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) {
				lookups = &countingAuth{next: d.Auth}
				d.Auth = lookups
				d.AuthGuard = auth.NewGuard(tt.limits)
				d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			})
			var mu sync.Mutex
			codes := map[int]int{}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 100)
			start := time.Now()
			for i := range tt.requests {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					r := e.Do("GET", "/v1/task/query?task_id=task_lumen_1", map[string]string{
						"Authorization": fmt.Sprintf("Bearer esk_guess%035d", i), "X-Forwarded-For": tt.addrs(i)}, "")
					mu.Lock()
					codes[r.Status]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			// The budgets refill while the requests run (a second or two):
			// allow a few tries more than the bursts, and on a loaded
			// machine, where they take longer, the tries earned meanwhile.
			extra := int64(tt.refill * max(time.Since(start).Seconds()-2, 0))
			if n := lookups.calls.Load(); n > tt.maxLookups+extra || codes[429] < tt.minRefusals-int(extra) || codes[401]+codes[429] != tt.requests {
				t.Errorf("%d bad keys: %d lookups, statuses %v; want at most %d lookups, the rest 429", tt.requests, n, codes, tt.maxLookups+extra)
			}
		})
	}
}

// A good key is never refused for its own concurrency: requests that need
// a lookup of one key at once share it, and its one try, so a burst of
// creates with a new key is answered, never 429.
func TestGoodKeyAtOnceNotRefused(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) {
		d.AuthGuard = auth.NewGuard(auth.GuardLimits{PerAddress: 1, PerPrefix: 1, Global: 1})
	})
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Do("GET", "/v1/task/query?task_id=task_lumen_1", map[string]string{"Authorization": "Bearer " + e.KeyB}, "")
			mu.Lock()
			codes[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[404] != 200 {
		t.Errorf("200 requests at once with a good key: %v; want every one 404 (no such task), none refused", codes)
	}
}

// Many good keys new to the gateway, used at once from one address, are
// all answered: the failed-credential budget (a burst of 20 here) waits
// for the lookups under way instead of refusing the keys past it.
func TestManyNewGoodKeysAtOnceNotRefused(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) {
		d.AuthGuard = auth.NewGuard(auth.GuardLimits{PerAddress: 5, PerPrefix: 20, Global: 500})
	})
	ctx := context.Background()
	var keys []string
	for a := range 2 {
		acct, err := e.Accounts.Create(ctx, account.Spec{Name: fmt.Sprintf("many keys %d", a), Credits: 10})
		if err != nil {
			t.Fatal(err)
		}
		for range 50 {
			k, _, err := e.Accounts.CreateKey(ctx, acct.ID)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			r := e.Do("GET", "/v1/task/query?task_id=task_lumen_1", map[string]string{"Authorization": "Bearer " + k}, "")
			mu.Lock()
			codes[r.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[404] != len(keys) {
		t.Errorf("%d new good keys at once from one address: %v; want every one 404 (no such task), none refused", len(keys), codes)
	}
}
