package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/task"
)

// balance returns the account's credits and how many refunds its ledger has.
func balance(t *testing.T, s *stores, acct string) (int64, int) {
	t.Helper()
	a, err := s.accounts.Get(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := s.accounts.Ledger(context.Background(), acct, 1000)
	if err != nil {
		t.Fatal(err)
	}
	refunds := 0
	for _, e := range entries {
		if e.Kind == account.Refund {
			refunds++
		}
	}
	return a.Credits, refunds
}

func runName(n int) string {
	if n == 0 {
		return "t"
	}
	return fmt.Sprintf("t.r%d", n)
}

// One run owns a task: another run can neither start it, move its progress,
// nor finish it.
func TestRunOwnership(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	create(t, s, "a", "t")
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
	mustOutcome(t, task.Superseded)(start(s, "a", "t", "t.r1"))
	if progress(t, s, "a", "t", "t.r1", 60) {
		t.Error("another run's progress wants a webhook")
	}
	if got, _ := s.tasks.Get(ctx, "a", "t"); got.Progress != 0 {
		t.Errorf("another run moved progress to %d", got.Progress)
	}
	mustOutcome(t, task.Superseded)(s.tasks.Complete(ctx, "a", "t", "t.r1", nil))
	mustOutcome(t, task.Superseded)(s.tasks.Fail(ctx, "a", "t", "t.r1", task.Failure{Code: "x", Message: "y"}))
	// The owner can; so can the sweeper, whoever owns the task.
	progress(t, s, "a", "t", "t", 60)
	if got, _ := s.tasks.Get(ctx, "a", "t"); got.Status != task.Processing || got.Progress != 60 {
		t.Errorf("task %+v", got)
	}
	mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "t", "", task.Failure{Code: "timeout", Message: "late"}))
}

// A run that starts again without having let go crashed its worker; the
// second crash fails the task, refunded once, instead of a third run.
func TestCrashesPoisonATask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		steps   func(s *stores) []Change
		want    []task.Outcome
		status  task.Status
		refunds int
	}{
		{"released between attempts is no crash", func(s *stores) []Change {
			var out []Change
			for i := 0; i < 4; i++ {
				c, _ := start(s, "a", "t", "t")
				out = append(out, c)
				_ = s.tasks.Release(context.Background(), "a", "t", "t")
			}
			return out
		}, []task.Outcome{task.Applied, task.Applied, task.Applied, task.Applied}, task.Processing, 0},
		{"two crashes fail the task", func(s *stores) []Change {
			var out []Change
			for i := 0; i < 3; i++ {
				c, _ := start(s, "a", "t", "t")
				out = append(out, c)
			}
			return out
		}, []task.Outcome{task.Applied, task.Applied, task.Poisoned}, task.Failed, 1},
		{"a crash, a release, a crash", func(s *stores) []Change {
			ctx := context.Background()
			c1, _ := start(s, "a", "t", "t")
			c2, _ := start(s, "a", "t", "t") // crash 1
			_ = s.tasks.Release(ctx, "a", "t", "t")
			c3, _ := start(s, "a", "t", "t")
			c4, _ := start(s, "a", "t", "t") // crash 2
			c5, _ := start(s, "a", "t", "t")
			return []Change{c1, c2, c3, c4, c5}
		}, []task.Outcome{task.Applied, task.Applied, task.Applied, task.Poisoned, task.AlreadyFinal}, task.Failed, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			create(t, s, "a", "t")
			before, _ := balance(t, s, "a")
			changes := tt.steps(s)
			var got []task.Outcome
			for _, c := range changes {
				got = append(got, c.Outcome)
				// Only the start that poisons the task refunds it; no
				// callback, so nothing is hooked.
				var want int64
				if c.Outcome == task.Poisoned {
					want = std.Price
				}
				if c.Refunded != want || c.Hooked {
					t.Errorf("start %v refunded %d, hooked %v; want %d, false", c.Outcome, c.Refunded, c.Hooked, want)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("outcomes %v; want %v", got, tt.want)
			}
			rec, _ := s.tasks.Get(context.Background(), "a", "t")
			if rec.Status != tt.status {
				t.Errorf("status %s; want %s", rec.Status, tt.status)
			}
			if tt.status == task.Failed && (rec.Failure == nil || rec.Failure.Code != string(task.WorkerCrashed)) {
				t.Errorf("failure %+v; want %s", rec.Failure, task.WorkerCrashed)
			}
			after, refunds := balance(t, s, "a")
			if refunds != tt.refunds || (tt.refunds == 1 && after != before+std.Price) {
				t.Errorf("%d refunds, balance %d → %d; want %d refunds", refunds, before, after, tt.refunds)
			}
			checkBooks(t, s, "a")
		})
	}
}

// Takeover gives an orphaned run's task to the next run, exactly once even
// when several sweepers try at once; the old run is then superseded.
func TestTakeover(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	create(t, s, "a", "t")
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
	progress(t, s, "a", "t", "t", 40)

	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[task.Outcome]int{}
	runs := map[string]bool{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, run, err := s.tasks.Takeover(ctx, "a", "t", "t", runName)
			if err != nil {
				t.Error(err)
			}
			if c.Refunded != 0 || c.Hooked {
				t.Errorf("takeover %v refunded %d, hooked %v", c.Outcome, c.Refunded, c.Hooked)
			}
			mu.Lock()
			won[c.Outcome]++
			runs[run] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if won[task.Applied] != 1 || won[task.Superseded] != 7 || len(runs) != 1 || !runs["t.r1"] {
		t.Fatalf("outcomes %v, runs %v; want one takeover to t.r1 and the rest told so", won, runs)
	}
	// The old run is out; the new one starts where the task was.
	mustOutcome(t, task.Superseded)(start(s, "a", "t", "t"))
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t.r1"))
	if got, _ := s.tasks.Get(ctx, "a", "t"); got.Status != task.Processing || got.Progress != 40 {
		t.Errorf("after the takeover: %+v; want processing at 40", got)
	}
	// Its worker dies too: the second crash fails the task.
	before, _ := balance(t, s, "a")
	c, run, err := s.tasks.Takeover(ctx, "a", "t", "t.r1", runName)
	mustOutcome(t, task.Poisoned)(c, err)
	if c.Refunded != std.Price || c.Hooked || run != "" {
		t.Errorf("poisoned takeover: refunded %d, hooked %v, run %q; want %d, false, none", c.Refunded, c.Hooked, run, std.Price)
	}
	if after, _ := balance(t, s, "a"); after != before+std.Price {
		t.Errorf("balance %d → %d; want the price back", before, after)
	}
	if got, _ := s.tasks.Get(ctx, "a", "t"); got.Status != task.Failed || got.Failure.Code != string(task.WorkerCrashed) || !got.Refunded {
		t.Errorf("task %+v %+v", got, got.Failure)
	}
	c, _, err = s.tasks.Takeover(ctx, "a", "t", "t.r1", runName)
	mustOutcome(t, task.AlreadyFinal)(c, err)
	if c.Refunded != 0 {
		t.Errorf("a takeover of a final task refunded %d", c.Refunded)
	}
	checkBooks(t, s, "a")
}

// Every admitted task is due for a queue check FirstQueueCheck after it
// was admitted, with what it takes to queue its job again (its queue, run
// and deadline; its input stays in its record), and QueueRecheck after a
// run starts it, until it ends; a check moves itself on (QueueRecheck
// later).
func TestQueueChecks(t *testing.T) {
	t.Parallel()
	created := time.Now().Truncate(time.Millisecond)
	s, _ := newStoreWith(t, Options{Now: func() time.Time { return created }})
	ctx := context.Background()
	for _, id := range []string{"waiting", "started", "failed", "queued"} {
		c := std
		if id == "queued" {
			c.Queue = "standard"
		}
		if _, err := s.tasks.Create(ctx, pending("a", id), c, []byte("job of "+id)); err != nil {
			t.Fatal(err)
		}
	}
	mustOutcome(t, task.Applied)(start(s, "a", "started", "started"))
	mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "failed", "", task.Failure{Code: "x", Message: "y"}))
	shard := ShardOf("a")

	if got, _ := s.tasks.Due(ctx, shard, created.Add(FirstQueueCheck-time.Millisecond), 100); len(got.Entries) != 0 ||
		!got.Next.Equal(created.Add(FirstQueueCheck)) {
		t.Errorf("due before FirstQueueCheck: %+v; want none, the next at %v", got, created.Add(FirstQueueCheck))
	}
	at := created.Add(FirstQueueCheck + time.Second)
	got, err := s.tasks.Due(ctx, shard, at, 100)
	if err != nil {
		t.Fatal(err)
	}
	dl := time.UnixMilli(std.CountUntil.UnixMilli())
	want := []DueEntry{{Kind: DueCheck, AccountID: "a", TaskID: "waiting", Deadline: dl},
		{Kind: DueCheck, AccountID: "a", TaskID: "queued", Queue: "standard", Deadline: dl}}
	if !sameEntries(got.Entries, want) {
		t.Fatalf("Due = %+v; want the two waiting tasks' checks", got.Entries)
	}
	// A task keeps its input in its record: an unfinished one (a started
	// one for a run after a crash), and an ended one, whose record shows
	// it. None keeps a job apart from its record.
	for _, id := range []string{"waiting", "queued", "started"} {
		if in, ok := inputOf(t, s, "a", id); !ok || in != "job of "+id {
			t.Errorf("the input of %s = %q (kept %v)", id, in, ok)
		}
	}
	if in, ok := inputOf(t, s, "a", "failed"); !ok || in != "job of failed" {
		t.Errorf("the input of the failed task = %q (kept %v)", in, ok)
	}
	for _, id := range []string{"waiting", "queued", "started", "failed"} {
		if n := s.rdb.Exists(ctx, separateJobKey("a", id)).Val(); n != 0 {
			t.Errorf("%s keeps a job key", id)
		}
	}
	// The checks moved on: due again QueueRecheck later, not before. The
	// started task is checked for its run's job QueueRecheck after its
	// start (a failover can lose the job of a task that started).
	before := at.Add(QueueRecheck - time.Millisecond)
	startedCheck := []DueEntry{{Kind: DueCheck, AccountID: "a", TaskID: "started", Run: "started", Deadline: dl}}
	if got, _ := s.tasks.Due(ctx, shard, before, 100); !sameEntries(got.Entries, startedCheck) || !got.Next.Equal(at.Add(QueueRecheck)) {
		t.Errorf("due before the recheck: %+v; want the started task's check, the next at %v", got, at.Add(QueueRecheck))
	}
	later, _ := s.tasks.Due(ctx, shard, at.Add(QueueRecheck), 100)
	if !sameEntries(later.Entries, want) {
		t.Errorf("due at the recheck: %+v; want %+v", later.Entries, want)
	}
	// The started task's check moved on too, every QueueRecheck.
	if sc := s.rdb.ZScore(ctx, dueKey(shard), taskDue("a", "started")).Val(); int64(sc) != before.Add(QueueRecheck).UnixMilli() {
		t.Errorf("the started task is due at %v; want %v", int64(sc), before.Add(QueueRecheck).UnixMilli())
	}
}

// sameEntries reports whether got holds the entries of want, in any order.
func sameEntries(got, want []DueEntry) bool {
	if len(got) != len(want) {
		return false
	}
	left := append([]DueEntry(nil), want...)
	for _, g := range got {
		found := false
		for i, w := range left {
			if sameEntry(g, w) {
				left = append(left[:i], left[i+1:]...)
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// sameEntry reports whether two due entries are the same (their deadlines
// the same instant).
func sameEntry(a, b DueEntry) bool {
	d := a.Deadline.Equal(b.Deadline)
	a.Deadline, b.Deadline = time.Time{}, time.Time{}
	return d && a == b
}
