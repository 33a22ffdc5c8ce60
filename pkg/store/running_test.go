package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// pendingAt is a pending task of acct created at base + i ms (its place in
// the account's parked tasks, oldest first).
func pendingAt(acct, id string, i int) *task.Task {
	tk := pending(acct, id)
	tk.CreateTime = tk.CreateTime.Add(time.Duration(i) * time.Millisecond)
	return tk
}

// An account holds at most its window of places (Options.Share × its
// weight) however many gateways create its tasks and workers start them
// at once: the rest wait parked, and a start of one is Busy and changes
// nothing. Ending a task (completed, failed) gives its place to the
// oldest parked task, returned with its job; a run letting go keeps its
// place; the places of dead workers free themselves at the tasks'
// deadline (the recovery expires them).
func TestPlaces(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now().Truncate(time.Millisecond)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, srv := newStoreWith(t, Options{Now: clock, Share: 5})
	rdb := srv.Client(t)
	ctx := context.Background()
	c := std
	c.CountUntil = now.Add(time.Minute)

	// 40 tasks created by 8 gateways at once, then started by 8 workers at
	// once: 5 places.
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			gs := NewTasks(NewDB(rdb, Options{Now: clock, Share: 5}))
			for i := g; i < 40; i += 8 {
				id := fmt.Sprintf("t%02d", i)
				cr, err := gs.Create(ctx, pendingAt("acct_a", id, i), c, []byte("job of "+id))
				switch {
				case err != nil:
					t.Error(err)
				case len(cr.Others) != 0:
					t.Errorf("create %s admitted others: %+v", id, cr.Others)
				case cr.Admitted:
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 5 {
		t.Fatalf("%d tasks admitted; want 5", admitted.Load())
	}
	var started atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			ws := NewTasks(NewDB(rdb, Options{Now: clock, Share: 5}))
			for i := w; i < 40; i += 8 {
				id := fmt.Sprintf("t%02d", i)
				c, err := ws.Start(ctx, "acct_a", id, id)
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
	if n, _ := s.tasks.Parked(ctx, "acct_a"); n != 35 {
		t.Errorf("Parked = %d; want 35", n)
	}
	var running, waiting []string
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("t%02d", i)
		tk, err := s.tasks.Get(ctx, "acct_a", id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status == task.Processing {
			running = append(running, id)
		} else {
			waiting = append(waiting, id) // oldest first
		}
	}
	if len(running) != 5 {
		t.Fatalf("%d tasks processing; want 5 (a busy start must change nothing)", len(running))
	}
	checkWindow(t, s, "acct_a")
	// A retry of a running task keeps its place.
	if c, _ := start(s, "acct_a", running[0], running[0]); c.Outcome != task.Applied {
		t.Errorf("the running task started again: %v", c.Outcome)
	}
	// Another account is not affected.
	cb := c
	cb.CountUntil = now.Add(time.Hour)
	if cr, err := s.tasks.Create(ctx, pending("acct_b", "b1"), cb, nil); err != nil || !cr.Admitted {
		t.Errorf("another account's task: %+v, %v", cr, err)
	}
	if c, _ := start(s, "acct_b", "b1", "b1"); c.Outcome != task.Applied {
		t.Errorf("another account's task: %v", c.Outcome)
	}
	// Completed, failed: two places free, each to the oldest task waiting,
	// with its deadline (its input stays in its record, for its run).
	// Handed back: the place is kept.
	ch, err := s.tasks.Complete(ctx, "acct_a", running[0], running[0], nil)
	must(t, err)
	if want := []task.Admitted{{AccountID: "acct_a", TaskID: waiting[0], Deadline: c.CountUntil}}; !sameAdmitted(ch.Admitted, want) {
		t.Errorf("Complete admitted %+v; want %+v", ch.Admitted, want)
	}
	ch, err = s.tasks.Fail(ctx, "acct_a", running[1], running[1], task.Failure{Code: "generation_failed", Message: "x"})
	must(t, err)
	if want := []task.Admitted{{AccountID: "acct_a", TaskID: waiting[1], Deadline: c.CountUntil}}; !sameAdmitted(ch.Admitted, want) {
		t.Errorf("Fail admitted %+v; want %+v", ch.Admitted, want)
	}
	if err := s.tasks.Release(ctx, "acct_a", running[2], running[2]); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.tasks.Running(ctx, "acct_a"); n != 5 {
		t.Errorf("Running = %d after a release; want 5 (it keeps its place)", n)
	}
	for i, id := range waiting[:2] {
		if st, _ := s.tasks.Start(ctx, "acct_a", id, id); st.Outcome != task.Applied || string(st.Input) != "job of "+id {
			t.Errorf("waiting task %d after places were given back: %v, input %q", i, st.Outcome, st.Input)
		}
	}
	if c, _ := start(s, "acct_a", waiting[2], waiting[2]); c.Outcome != task.Busy {
		t.Errorf("a sixth place: %v", c.Outcome)
	}
	checkWindow(t, s, "acct_a")
	// Past their deadline, places free themselves (dead workers'): the
	// recovery expires every task still there, and nothing is left.
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	expireDue(t, s, "acct_a", clock())
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("t%02d", i)
		tk, err := s.tasks.Get(ctx, "acct_a", id)
		must(t, err)
		if id != running[0] && id != running[1] && (tk.Status != task.Failed || tk.Failure.Code != string(task.Timeout) || !tk.Refunded) {
			t.Errorf("%s past its deadline: %s %+v; want failed (timeout), refunded", id, tk.Status, tk.Failure)
		}
	}
	if n, _ := s.tasks.Running(ctx, "acct_a"); n != 0 {
		t.Errorf("Running after the deadline = %d; want 0", n)
	}
	if n, _ := s.tasks.Inflight(ctx, "acct_a"); n != 0 {
		t.Errorf("Inflight after the deadline = %d; want 0", n)
	}
	checkWindow(t, s, "acct_a")
	c.CountUntil = clock().Add(time.Minute)
	if cr, err := s.tasks.Create(ctx, pending("acct_a", "after"), c, nil); err != nil || !cr.Admitted {
		t.Errorf("a task after the dead places expired: %+v, %v", cr, err)
	}
	if c, _ := start(s, "acct_a", "after", "after"); c.Outcome != task.Applied {
		t.Errorf("a task after the dead places expired: %v", c.Outcome)
	}
	// No limit: every task is admitted at once, and counted as holding a
	// place (Running counts the admitted tasks whatever the share).
	free := storesOn(rdb, Options{Now: clock})
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("free%d", i)
		if cr, err := free.tasks.Create(ctx, pending("acct_b", id), c, nil); err != nil || !cr.Admitted {
			t.Errorf("create without a limit: %+v, %v", cr, err)
		}
	}
	if c, _ := start(free, "acct_b", "free0", "free0"); c.Outcome != task.Applied {
		t.Errorf("start without a limit: %v", c.Outcome)
	}
	if n, _ := s.tasks.Running(ctx, "acct_b"); n != 9 {
		t.Errorf("Running = %d; want 9 (b1 and the eight without a limit)", n)
	}
	checkBooks(t, s, "acct_b")
}

// sameAdmitted reports whether got are the tasks of want, in order, with
// what it takes to queue their jobs: their queues and deadlines (to the
// millisecond, as the records keep them).
func sameAdmitted(got, want []task.Admitted) bool {
	return slices.EqualFunc(got, want, func(a, b task.Admitted) bool {
		return a.AccountID == b.AccountID && a.TaskID == b.TaskID && a.Queue == b.Queue &&
			a.Deadline.UnixMilli() == b.Deadline.UnixMilli()
	})
}
