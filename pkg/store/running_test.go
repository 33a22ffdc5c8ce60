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
	s, srv := newStore(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.Now()
	s.now = func() time.Time { return now }
	for i := 0; i < 40; i++ {
		create(t, s, "acct_a", fmt.Sprintf("t%d", i))
	}
	place := Place{Limit: 5, Until: now.Add(time.Minute)}

	// 8 workers, 40 tasks, a limit of 5.
	var started atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			ws := New(rdb)
			ws.now = s.now
			for i := w; i < 40; i += 8 {
				id := fmt.Sprintf("t%d", i)
				o, err := ws.StartTaskWith(ctx, "acct_a", id, id, place)
				switch {
				case err != nil:
					t.Error(err)
				case o == Applied:
					started.Add(1)
				case o != Busy:
					t.Errorf("start %s: %v", id, o)
				}
			}
		})
	}
	wg.Wait()
	if started.Load() != 5 {
		t.Fatalf("%d tasks started; want 5", started.Load())
	}
	if n, _ := s.Running(ctx, "acct_a"); n != 5 {
		t.Errorf("Running = %d; want 5", n)
	}
	var running, waiting []string
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("t%d", i)
		tk, err := s.Task(ctx, "acct_a", id)
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
	if o, _ := s.StartTaskWith(ctx, "acct_a", running[0], running[0], place); o != Applied {
		t.Errorf("the running task started again: %v", o)
	}
	// Another account is not affected.
	create(t, s, "acct_b", "b1")
	if o, _ := s.StartTaskWith(ctx, "acct_b", "b1", "b1", place); o != Applied {
		t.Errorf("another account's task: %v", o)
	}
	// Completed, failed, handed back: three places free.
	if _, _, err := s.CompleteTask(ctx, "acct_a", running[0], running[0], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FailTask(ctx, "acct_a", running[1], running[1], task.Failure{Code: "generation_failed", Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseTask(ctx, "acct_a", running[2], running[2]); err != nil {
		t.Fatal(err)
	}
	for i, id := range waiting[:3] {
		if o, _ := s.StartTaskWith(ctx, "acct_a", id, id, place); o != Applied {
			t.Errorf("waiting task %d after places were given back: %v", i, o)
		}
	}
	if o, _ := s.StartTaskWith(ctx, "acct_a", waiting[3], waiting[3], place); o != Busy {
		t.Errorf("a sixth place: %v", o)
	}
	// Past their deadline, places free themselves (dead workers').
	now = place.Until.Add(time.Second)
	if n, _ := s.Running(ctx, "acct_a"); n != 0 {
		t.Errorf("Running after the deadline = %d; want 0", n)
	}
	if o, _ := s.StartTaskWith(ctx, "acct_a", waiting[3], waiting[3], Place{Limit: 5, Until: now.Add(time.Minute)}); o != Applied {
		t.Errorf("a task after the dead places expired: %v", o)
	}
	// No limit: no place taken.
	create(t, s, "acct_a", "free")
	if o, _ := s.StartTask(ctx, "acct_a", "free", "free"); o != Applied {
		t.Errorf("start without a limit: %v", o)
	}
	if n, _ := s.Running(ctx, "acct_a"); n != 1 {
		t.Errorf("Running = %d; want 1 (the start without a limit holds none)", n)
	}
}
