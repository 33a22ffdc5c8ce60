package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
)

// A task charged and recorded by a gateway that died before queueing its
// job is queued by the workers' recovery and runs; a task past its deadline
// that nothing runs is failed and refunded by it. On any Redis the suite
// runs on (a cluster too).
func TestRecoveryQueuesAndExpires(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 100 * time.Millisecond})
	ctx := context.Background()
	acct, _ := s.newAccount(t, account.Spec{Name: "recovery", Credits: 100})
	charge := func(id string, countUntil time.Time) {
		now := time.Now()
		input, err := jobs.EncodeInput(task.Input{Model: catalog.Model{ID: std, Tier: catalog.Standard}, Prompt: "recovered", AspectRatio: "1:1", ImageSize: "1K"})
		if err != nil {
			t.Fatal(err)
		}
		// As the gateway records it: its input, and the queue its job goes
		// on (which the recovery queues it on).
		rec := &task.Task{ID: id, AccountID: acct, Type: task.Type, Model: std, CreateTime: now}
		c := task.Charge{Price: 4, Tier: "standard", MaxInflight: 10, CountUntil: countUntil, Queue: jobs.Queue(catalog.Standard)}
		if _, err := s.tasks.Create(ctx, rec, c, input); err != nil {
			t.Fatal(err)
		}
	}
	charge("task_lumen_9000000000000000001", time.Now().Add(time.Hour)) // its gateway died: never queued
	// Overdue: its deadline passed before its first check is due, so the
	// check finds it past its deadline and fails it instead of queueing it.
	charge("task_lumen_9000000000000000002", time.Now().Add(-time.Second))
	deadline := time.Now().Add(75 * time.Second) // the first check after 10 s, shards read at least every 5 s
	for {
		a, _ := s.tasks.Get(ctx, acct, "task_lumen_9000000000000000001")
		b, _ := s.tasks.Get(ctx, acct, "task_lumen_9000000000000000002")
		if a != nil && b != nil && a.Status == task.Completed && b.Status == task.Failed {
			if b.Failure.Code != string(task.Timeout) || !b.Refunded {
				t.Errorf("the overdue task: %+v", b.Failure)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 75 s: the task never queued is %v, the overdue one %v", status(a), status(b))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if a, _ := s.accounts.Get(ctx, acct); a.Credits != 100-4 {
		t.Errorf("balance %d; want 96 (one task ran, one was refunded)", a.Credits)
	}
}

func status(t *task.Task) task.Status {
	if t == nil {
		return "missing"
	}
	return t.Status
}
