package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// sweepFixture is a store with an account holding one overdue task (its
// in-flight time is past: no worker will finish it) and one that is not.
func sweepFixture(t *testing.T) (*store.Store, string) {
	t.Helper()
	st := store.New(redistest.Start(t).Client(t))
	ctx := context.Background()
	a, err := st.CreateAccount(ctx, store.NewAccount{Name: "sweep", Credits: 100})
	if err != nil {
		t.Fatal(err)
	}
	for id, until := range map[string]time.Time{"task_lumen_1": time.Now().Add(-time.Second), "task_lumen_2": time.Now().Add(time.Hour)} {
		rec := &task.Task{ID: id, AccountID: a.ID, Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: time.Now()}
		if _, err := st.CreateTask(ctx, rec, store.Charge{Price: 10, Tier: "standard", CountUntil: until}); err != nil {
			t.Fatal(err)
		}
	}
	return st, a.ID
}

func TestSweepFailsAndRefundsOverdueTasks(t *testing.T) {
	st, acct := sweepFixture(t)
	ctx := context.Background()
	if n := sweep(ctx, st, time.Minute, zap.NewNop()); n != 1 {
		t.Fatalf("sweep failed %d tasks; want 1", n)
	}
	overdue, _ := st.Task(ctx, acct, "task_lumen_1")
	if overdue.Status != task.Failed || overdue.Failure == nil || overdue.Failure.Code != string(task.Timeout) || !overdue.Refunded {
		t.Errorf("overdue task %+v", overdue)
	}
	if running, _ := st.Task(ctx, acct, "task_lumen_2"); running.Status != task.Pending {
		t.Errorf("a task within its deadline was swept: %+v", running)
	}
	if a, _ := st.Account(ctx, acct); a.Credits != 100-10 {
		t.Errorf("balance %d; want 90 (one task charged, one refunded)", a.Credits)
	}
}

// Workers sweep one at a time: of many sweeping at once, one takes the lease
// and the overdue task is failed, and refunded, once.
func TestSweepOneWorkerAtATime(t *testing.T) {
	st, acct := sweepFixture(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := sweep(ctx, st, time.Minute, zap.NewNop())
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 1 {
		t.Errorf("%d tasks failed by 8 concurrent sweeps; want 1", total)
	}
	entries, _ := st.Ledger(ctx, acct, 100)
	refunds := 0
	for _, e := range entries {
		if e.Kind == store.KindRefund {
			refunds++
		}
	}
	if refunds != 1 {
		t.Errorf("%d refunds; want 1", refunds)
	}
	// The lease holds until it runs out: an immediate second round does
	// nothing, even with a new overdue task.
	rec := &task.Task{ID: "task_lumen_3", AccountID: acct, Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: time.Now()}
	if _, err := st.CreateTask(ctx, rec, store.Charge{Price: 10, Tier: "standard", CountUntil: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if n := sweep(ctx, st, time.Minute, zap.NewNop()); n != 0 {
		t.Errorf("a second round under the lease failed %d tasks", n)
	}
}

// The loop sweeps every period and stops with its context.
func TestRunSweeperLoop(t *testing.T) {
	st, acct := sweepFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		runSweeper(ctx, st, 100*time.Millisecond, zap.NewNop())
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := st.Task(context.Background(), acct, "task_lumen_1")
		if got != nil && got.Status == task.Failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweeper loop never failed the overdue task")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the sweeper loop did not stop with its context")
	}
}
