package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/tools/testkit/redistest"
)

// An account holds at most its limit of running places, however many
// workers claim at once; a place is given back, renewed by its holder, and
// freed by itself at its deadline when its worker died; the set expires
// with its last place.
func TestClaimRun(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	s := New(rdb)
	s.now = clock
	until := now.Add(time.Minute)

	// 8 workers, 40 tasks, a limit of 5: 5 places taken, no more.
	var granted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			ws := New(rdb)
			ws.now = clock
			for i := w; i < 40; i += 8 {
				ok, err := ws.ClaimRun(ctx, "acct1", fmt.Sprintf("t%d", i), 5, until)
				if err != nil {
					t.Error(err)
				}
				if ok {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if granted.Load() != 5 {
		t.Fatalf("%d places granted; want 5", granted.Load())
	}
	if n, _ := s.Running(ctx, "acct1"); n != 5 {
		t.Errorf("Running = %d; want 5", n)
	}
	// Another account is not affected.
	if ok, err := s.ClaimRun(ctx, "acct2", "t0", 5, until); !ok || err != nil {
		t.Errorf("another account: %v, %v", ok, err)
	}

	members, _ := rdb.ZRange(ctx, runningKey("acct1"), 0, -1).Result()
	holder := members[0]
	// A holder claiming again keeps its place (a retry of the same task).
	if ok, _ := s.ClaimRun(ctx, "acct1", holder, 5, until.Add(time.Minute)); !ok {
		t.Error("the holder lost its place on claiming it again")
	}
	if ok, _ := s.ClaimRun(ctx, "acct1", "late", 5, until); ok {
		t.Error("a sixth place")
	}
	// Given back: another task takes it.
	if err := s.ReleaseRun(ctx, "acct1", members[1]); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.ClaimRun(ctx, "acct1", "late", 5, until); !ok {
		t.Error("no place after one was given back")
	}
	// Past their deadline, places free themselves (dead workers'), but not
	// the renewed one.
	now = until.Add(time.Second)
	if n, _ := s.Running(ctx, "acct1"); n != 1 {
		t.Errorf("Running after the deadline = %d; want 1 (the renewed place)", n)
	}
	for i := 0; i < 4; i++ {
		if ok, _ := s.ClaimRun(ctx, "acct1", fmt.Sprintf("new%d", i), 5, now.Add(time.Minute)); !ok {
			t.Errorf("new task %d: no place after the dead ones expired", i)
		}
	}
	// The key lives as long as its last place.
	ttl, _ := rdb.PTTL(ctx, runningKey("acct1")).Result()
	if ttl <= 0 || ttl > 3*time.Minute {
		t.Errorf("PTTL %v", ttl)
	}
}
