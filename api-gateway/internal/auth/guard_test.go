package auth

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A check takes its try before it runs, so concurrent failing checks
// cannot overrun a budget (a check that counted its failure after the
// lookup would let a burst of concurrent bad keys all reach Redis); the
// budgets are per address, per network (/24, /64) and in all.
func TestGuardBudgets(t *testing.T) {
	for _, tt := range []struct {
		name   string
		limits GuardLimits
		addrs  func(i int) string
		checks int
		want   int // checks let through, none of them good
	}{
		{"one address, concurrently", GuardLimits{PerAddress: 5}, func(int) string { return "203.0.113.7" }, 100, 20},
		{"one /24, many addresses", GuardLimits{PerAddress: 5, PerPrefix: 10}, func(i int) string { return fmt.Sprintf("203.0.113.%d", i%50) }, 1000, 40},
		{"one /64, many addresses", GuardLimits{PerAddress: 5, PerPrefix: 10}, func(i int) string { return fmt.Sprintf("2001:db8:1:2::%x", i%50) }, 1000, 40},
		{"IPv4 mapped in IPv6 is the same network", GuardLimits{PerPrefix: 10}, func(i int) string {
			if i%2 == 0 {
				return fmt.Sprintf("::ffff:198.51.100.%d", i%50)
			}
			return fmt.Sprintf("198.51.100.%d", i%50)
		}, 1000, 40},
		{"many networks: the global budget", GuardLimits{PerAddress: 5, PerPrefix: 10, Global: 100}, func(i int) string { return fmt.Sprintf("10.%d.%d.1", i%200, i/200) }, 2000, 200},
		{"an address that is not one counts as its own", GuardLimits{PerAddress: 5, PerPrefix: 10}, func(int) string { return "not-an-address" }, 100, 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(tt.limits)
			now := time.Unix(1_800_000_000, 0)
			g.now = func() time.Time { return now } // no refill during the test
			var through atomic.Int64
			var wg sync.WaitGroup
			for i := range tt.checks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if a, wait, ok := g.Try(context.Background(), tt.addrs(i)); ok {
						through.Add(1)
						a.Failed()
					} else if wait <= 0 {
						t.Error("refused with no wait")
					}
				}()
			}
			wg.Wait()
			if got := through.Load(); got != int64(tt.want) {
				t.Errorf("%d of %d failing checks let through; want %d", got, tt.checks, tt.want)
			}
		})
	}
}

// Good credentials never count: their tries come back, so a client with a
// good key is never held back by its own requests, and a refused check
// takes nothing from the budgets that still had tries.
func TestGuardGoodCredentialsGiveBack(t *testing.T) {
	g := NewGuard(GuardLimits{PerAddress: 1, PerPrefix: 2, Global: 3})
	now := time.Unix(1_800_000_000, 0)
	g.now = func() time.Time { return now }
	for i := range 1000 {
		a, _, ok := g.Try(context.Background(), "192.0.2.1")
		if !ok {
			t.Fatalf("good check %d refused", i)
		}
		now = now.Add(time.Microsecond) // the check takes time
		a.Good()
	}
	// 192.0.2.1 spends its 4; its network (burst 8) then has 4 left, and
	// a refusal of .1 takes none of them.
	for range 4 {
		a, _, ok := g.Try(context.Background(), "192.0.2.1")
		if !ok {
			t.Fatal("a failing check refused within the address's burst")
		}
		a.Failed()
	}
	for range 10 {
		if _, _, ok := g.Try(context.Background(), "192.0.2.1"); ok {
			t.Fatal("a failing check let through past the address's burst")
		}
	}
	for i := range 2 {
		a, _, ok := g.Try(context.Background(), fmt.Sprintf("192.0.2.%d", 2+i))
		if !ok {
			t.Fatal("the network's budget was taken by refused checks")
		}
		a.Failed()
	}
	// Time refills the budgets.
	now = now.Add(10 * time.Second)
	_ = now
	if _, _, ok := g.Try(context.Background(), "192.0.2.1"); !ok {
		t.Error("no try back after 10 s")
	}
}

// No budgets: no guard.
func TestGuardOff(t *testing.T) {
	g := NewGuard(GuardLimits{})
	if g != nil {
		t.Fatal("a guard with no budgets")
	}
	for range 100 {
		if _, _, ok := g.Try(context.Background(), "203.0.113.7"); !ok {
			t.Fatal("the nil guard refused")
		}
	}
}

// Checks at once past a budget's burst wait for the checks under way: good
// credentials give their tries back and every one is let through; failing
// ones spend them, and the rest are refused without being run.
func TestGuardChecksUnderWay(t *testing.T) {
	for _, tt := range []struct {
		name    string
		good    bool
		checks  int
		through int
	}{
		{"good credentials, many at once", true, 100, 100},
		{"failing credentials, many at once", false, 100, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(GuardLimits{PerAddress: 1}) // a burst of 4
			now := time.Unix(1_800_000_000, 0)
			g.now = func() time.Time { return now } // no refill during the test
			var through atomic.Int64
			var wg sync.WaitGroup
			for range tt.checks {
				wg.Go(func() {
					a, _, ok := g.Try(context.Background(), "203.0.113.9")
					if !ok {
						return
					}
					through.Add(1)
					runtime.Gosched() // the check, while others try
					if tt.good {
						a.Good()
					} else {
						a.Failed()
					}
				})
			}
			wg.Wait()
			if got := through.Load(); got != int64(tt.through) {
				t.Errorf("%d of %d checks let through; want %d", got, tt.checks, tt.through)
			}
		})
	}
}

// A check that waits for checks under way waits no longer than its
// context.
func TestGuardWaitEndsWithContext(t *testing.T) {
	g := NewGuard(GuardLimits{PerAddress: 0.25}) // a burst of 1
	now := time.Unix(1_800_000_000, 0)
	g.now = func() time.Time { return now }
	held, _, ok := g.Try(context.Background(), "203.0.113.9")
	if !ok {
		t.Fatal("the first check refused")
	}
	defer held.Good()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, wait, ok := g.Try(ctx, "203.0.113.9"); ok || wait <= 0 {
		t.Errorf("a check past the burst with one under way: ok %t, wait %s", ok, wait)
	}
	if took := time.Since(start); took > MaxWait/2 {
		t.Errorf("waited %s past its context's 50 ms", took)
	}
}
