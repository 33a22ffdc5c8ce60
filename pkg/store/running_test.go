package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// An account runs at most its limit of generations, however many workers
// start its tasks at once; ending a task (completed, failed, handed back)
// gives its place back; a place held by a dead worker frees itself at its
// deadline; a busy start changes nothing.
func TestPlaces(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	s, srv := newStoreWith(t, Options{Now: clock})
	rdb := srv.Client(t)
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		create(t, s, "acct_a", fmt.Sprintf("t%d", i))
	}
	place := Place{Limit: 5, Until: now.Add(time.Minute)}

	// 8 workers, 40 tasks, a limit of 5.
	var started atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			ws := NewTasks(NewDB(rdb, Options{Now: clock}))
			for i := w; i < 40; i += 8 {
				id := fmt.Sprintf("t%d", i)
				c, err := ws.Start(ctx, "acct_a", id, id, place)
				switch {
				case err != nil:
					t.Error(err)
				case c.Outcome == task.Applied:
					started.Add(1)
				case c.Outcome != task.Busy:
					t.Errorf("start %s: %v", id, c.Outcome)
				}
			}
		})
	}
	wg.Wait()
	if started.Load() != 5 {
		t.Fatalf("%d tasks started; want 5", started.Load())
	}
	if n, _ := s.tasks.Running(ctx, "acct_a"); n != 5 {
		t.Errorf("Running = %d; want 5", n)
	}
	var running, waiting []string
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("t%d", i)
		tk, err := s.tasks.Get(ctx, "acct_a", id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status == task.Processing {
			running = append(running, id)
		} else {
			waiting = append(waiting, id)
		}
	}
	if len(running) != 5 {
		t.Fatalf("%d tasks processing; want 5 (a busy start must change nothing)", len(running))
	}
	// A retry of a running task keeps its place.
	if c, _ := s.tasks.Start(ctx, "acct_a", running[0], running[0], place); c.Outcome != task.Applied {
		t.Errorf("the running task started again: %v", c.Outcome)
	}
	// Another account is not affected.
	create(t, s, "acct_b", "b1")
	if c, _ := s.tasks.Start(ctx, "acct_b", "b1", "b1", place); c.Outcome != task.Applied {
		t.Errorf("another account's task: %v", c.Outcome)
	}
	// Completed, failed, handed back: three places free.
	if _, err := s.tasks.Complete(ctx, "acct_a", running[0], running[0], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.tasks.Fail(ctx, "acct_a", running[1], running[1], task.Failure{Code: "generation_failed", Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.tasks.Release(ctx, "acct_a", running[2], running[2]); err != nil {
		t.Fatal(err)
	}
	for i, id := range waiting[:3] {
		if c, _ := s.tasks.Start(ctx, "acct_a", id, id, place); c.Outcome != task.Applied {
			t.Errorf("waiting task %d after places were given back: %v", i, c.Outcome)
		}
	}
	if c, _ := s.tasks.Start(ctx, "acct_a", waiting[3], waiting[3], place); c.Outcome != task.Busy {
		t.Errorf("a sixth place: %v", c.Outcome)
	}
	// Past their deadline, places free themselves (dead workers').
	now = place.Until.Add(time.Second)
	if n, _ := s.tasks.Running(ctx, "acct_a"); n != 0 {
		t.Errorf("Running after the deadline = %d; want 0", n)
	}
	if c, _ := s.tasks.Start(ctx, "acct_a", waiting[3], waiting[3], Place{Limit: 5, Until: now.Add(time.Minute)}); c.Outcome != task.Applied {
		t.Errorf("a task after the dead places expired: %v", c.Outcome)
	}
	// No limit: no place taken.
	create(t, s, "acct_a", "free")
	if c, _ := start(s, "acct_a", "free", "free"); c.Outcome != task.Applied {
		t.Errorf("start without a limit: %v", c.Outcome)
	}
	if n, _ := s.tasks.Running(ctx, "acct_a"); n != 1 {
		t.Errorf("Running = %d; want 1 (the start without a limit holds none)", n)
	}
}
