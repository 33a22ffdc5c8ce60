package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// balance returns the account's credits and how many refunds its ledger has.
func balance(t *testing.T, s *Store, acct string) (int64, int) {
	t.Helper()
	a, err := s.Account(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := s.Ledger(context.Background(), acct, 1000)
	if err != nil {
		t.Fatal(err)
	}
	refunds := 0
	for _, e := range entries {
		if e.Kind == KindRefund {
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
	s, _ := newStore(t)
	ctx := context.Background()
	create(t, s, "a", "t")
	mustOutcome(t, Applied)(s.StartTask(ctx, "a", "t", "t"))
	mustOutcome(t, Superseded)(s.StartTask(ctx, "a", "t", "t.r1"))
	must(t, s.SetProgress(ctx, "a", "t", "t.r1", 60))
	if got, _ := s.Task(ctx, "a", "t"); got.Progress != 0 {
		t.Errorf("another run moved progress to %d", got.Progress)
	}
	o, _, err := s.CompleteTask(ctx, "a", "t", "t.r1", nil)
	mustOutcome(t, Superseded)(o, err)
	mustOutcome(t, Superseded)(s.FailTask(ctx, "a", "t", "t.r1", task.Failure{Code: "x", Message: "y"}))
	// The owner can; so can the sweeper, whoever owns the task.
	must(t, s.SetProgress(ctx, "a", "t", "t", 60))
	if got, _ := s.Task(ctx, "a", "t"); got.Status != task.Processing || got.Progress != 60 {
		t.Errorf("task %+v", got)
	}
	mustOutcome(t, Applied)(s.FailTask(ctx, "a", "t", "", task.Failure{Code: "timeout", Message: "late"}))
}

// A run that starts again without having let go crashed its worker; the
// second crash fails the task, refunded once, instead of a third run.
func TestCrashesPoisonATask(t *testing.T) {
	tests := []struct {
		name    string
		steps   func(s *Store) []Outcome
		want    []Outcome
		status  task.Status
		refunds int
	}{
		{"released between attempts is no crash", func(s *Store) []Outcome {
			var out []Outcome
			for i := 0; i < 4; i++ {
				o, _ := s.StartTask(context.Background(), "a", "t", "t")
				out = append(out, o)
				_ = s.ReleaseTask(context.Background(), "a", "t", "t")
			}
			return out
		}, []Outcome{Applied, Applied, Applied, Applied}, task.Processing, 0},
		{"two crashes fail the task", func(s *Store) []Outcome {
			var out []Outcome
			for i := 0; i < 3; i++ {
				o, _ := s.StartTask(context.Background(), "a", "t", "t")
				out = append(out, o)
			}
			return out
		}, []Outcome{Applied, Applied, Poisoned}, task.Failed, 1},
		{"a crash, a release, a crash", func(s *Store) []Outcome {
			ctx := context.Background()
			o1, _ := s.StartTask(ctx, "a", "t", "t")
			o2, _ := s.StartTask(ctx, "a", "t", "t") // crash 1
			_ = s.ReleaseTask(ctx, "a", "t", "t")
			o3, _ := s.StartTask(ctx, "a", "t", "t")
			o4, _ := s.StartTask(ctx, "a", "t", "t") // crash 2
			o5, _ := s.StartTask(ctx, "a", "t", "t")
			return []Outcome{o1, o2, o3, o4, o5}
		}, []Outcome{Applied, Applied, Applied, Poisoned, AlreadyFinal}, task.Failed, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			create(t, s, "a", "t")
			before, _ := balance(t, s, "a")
			got := tt.steps(s)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("outcomes %v; want %v", got, tt.want)
			}
			rec, _ := s.Task(context.Background(), "a", "t")
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
		})
	}
}

// Takeover gives an orphaned run's task to the next run, exactly once even
// when several sweepers try at once; the old run is then superseded.
func TestTakeover(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	create(t, s, "a", "t")
	mustOutcome(t, Applied)(s.StartTask(ctx, "a", "t", "t"))
	must(t, s.SetProgress(ctx, "a", "t", "t", 40))

	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[Outcome]int{}
	runs := map[string]bool{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, run, err := s.Takeover(ctx, "a", "t", "t", runName)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			won[o]++
			runs[run] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if won[Applied] != 1 || won[Superseded] != 7 || len(runs) != 1 || !runs["t.r1"] {
		t.Fatalf("outcomes %v, runs %v; want one takeover to t.r1 and the rest told so", won, runs)
	}
	// The old run is out; the new one starts where the task was.
	mustOutcome(t, Superseded)(s.StartTask(ctx, "a", "t", "t"))
	mustOutcome(t, Applied)(s.StartTask(ctx, "a", "t", "t.r1"))
	if got, _ := s.Task(ctx, "a", "t"); got.Status != task.Processing || got.Progress != 40 {
		t.Errorf("after the takeover: %+v; want processing at 40", got)
	}
	// Its worker dies too: the second crash fails the task.
	o, _, err := s.Takeover(ctx, "a", "t", "t.r1", runName)
	mustOutcome(t, Poisoned)(o, err)
	if got, _ := s.Task(ctx, "a", "t"); got.Status != task.Failed || got.Failure.Code != string(task.WorkerCrashed) || !got.Refunded {
		t.Errorf("task %+v %+v", got, got.Failure)
	}
	o, _, err = s.Takeover(ctx, "a", "t", "t.r1", runName)
	mustOutcome(t, AlreadyFinal)(o, err)
}

// A task charged but never queued is found with its job; queued or started
// tasks are not.
// Every task is listed for a queue check FirstQueueCheck after its
// creation, with its job, until a run starts it or it ends; the checker
// moves a check on or drops it.
func TestQueueChecks(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	created := time.Now()
	for _, id := range []string{"waiting", "started", "failed", "moved", "dropped"} {
		if _, err := s.CreateTask(ctx, pending("a", id), std, []byte("job of "+id)); err != nil {
			t.Fatal(err)
		}
	}
	mustOutcome(t, Applied)(s.StartTask(ctx, "a", "started", "started"))
	mustOutcome(t, Applied)(s.FailTask(ctx, "a", "failed", "", task.Failure{Code: "x", Message: "y"}))
	must(t, s.ScheduleQueueCheck(ctx, "a", "moved", created.Add(time.Hour)))
	must(t, s.DropQueueCheck(ctx, "a", "dropped"))
	// Moving the check of a task no longer listed does not list it again.
	must(t, s.ScheduleQueueCheck(ctx, "a", "started", created))

	if got, _ := s.QueueChecks(ctx, created.Add(FirstQueueCheck-time.Second), 100); len(got) != 0 {
		t.Errorf("checks due before FirstQueueCheck: %+v; want none", got)
	}
	got, err := s.QueueChecks(ctx, created.Add(FirstQueueCheck+time.Second), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].TaskID != "waiting" || got[0].AccountID != "a" || !got[0].Pending || string(got[0].Job) != "job of waiting" ||
		got[0].Run != "" || !got[0].Created.Equal(pending("a", "waiting").CreateTime) {
		t.Fatalf("QueueChecks = %+v; want the waiting task with its job", got)
	}
	// A started task no longer carries its job.
	if v := s.rdb.HGet(ctx, taskKey("a", "started"), fTaskJob).Val(); v != "" {
		t.Errorf("a started task still holds its job payload: %q", v)
	}
	later, _ := s.QueueChecks(ctx, created.Add(2*time.Hour), 100)
	if len(later) != 2 {
		t.Errorf("checks due in two hours: %+v; want waiting and moved", later)
	}
}
