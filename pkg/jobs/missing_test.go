package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// imageJob is a valid job of a task of the given tier.
func imageJob(id string, tier catalog.Tier) GenerateImage {
	now := time.Now()
	model := "lumen-2.5-flash-image"
	if tier == catalog.Pro {
		model = "lumen-3-pro-image-preview"
	}
	return GenerateImage{TaskID: id, AccountID: "acct_x", CreateTime: now, Deadline: now.Add(time.Hour),
		Input: task.Input{Model: catalog.Model{ID: model, Tier: tier}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
}

// waitState waits until Asynq has the task id of queue in state.
func waitState(t *testing.T, ins *asynq.Inspector, queue, id string, state asynq.TaskState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := ins.GetTaskInfo(queue, id)
		if err == nil && info.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never %s (%+v, %v)", id, state, info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Missing tells runs on their queue, in any state Asynq keeps them in
// (pending, active, waiting for a retry, archived), from runs the queue
// does not have: never queued, or deleted (an operator, a failover that
// lost the write). It checks Asynq's own keys: a real Asynq's.
func TestMissing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	e := NewEnqueuer(rdb)
	ins := asynq.NewInspectorFromRedisClient(rdb)
	ctx := context.Background()
	std, pro := Queue(catalog.Standard), Queue(catalog.Pro)

	// A server of the standard queue holds one run (active) and fails
	// another, retried an hour later.
	held := make(chan struct{})
	server := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       2,
		Queues:            map[string]int{std: 1},
		TaskCheckInterval: 10 * time.Millisecond,
		RetryDelayFunc:    func(int, error, *asynq.Task) time.Duration { return time.Hour },
		ShutdownTimeout:   time.Second,
		LogLevel:          asynq.FatalLevel,
	})
	if err := server.Start(asynq.HandlerFunc(func(ctx context.Context, at *asynq.Task) error {
		if id, _ := asynq.GetTaskID(ctx); id == "task_lumen_3" {
			select {
			case <-held:
			case <-ctx.Done():
			}
			return nil
		}
		return errors.New("upstream down")
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(held)
		server.Shutdown()
	})
	for _, id := range []string{"task_lumen_3", "task_lumen_4"} {
		if err := e.EnqueueGenerateImage(ctx, RefOf(imageJob(id, catalog.Standard)), id); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, ins, std, "task_lumen_3", asynq.TaskStateActive)
	waitState(t, ins, std, "task_lumen_4", asynq.TaskStateRetry)

	// Pending runs, archived ones and deleted ones, on the pro queue no
	// server serves.
	for _, run := range []string{"task_lumen_1", RunID("task_lumen_2", 1), "task_lumen_5", "task_lumen_6"} {
		id := run[:len("task_lumen_1")]
		if err := e.EnqueueGenerateImage(ctx, RefOf(imageJob(id, catalog.Pro)), run); err != nil {
			t.Fatal(err)
		}
	}
	if err := ins.ArchiveTask(pro, "task_lumen_5"); err != nil {
		t.Fatal(err)
	}
	if err := ins.DeleteTask(pro, "task_lumen_6"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		run     Run
		missing bool
	}{
		{Run{pro, "task_lumen_1"}, false},           // pending
		{Run{pro, RunID("task_lumen_2", 1)}, false}, // a later run, pending
		{Run{pro, "task_lumen_2"}, true},            // its first run: never queued
		{Run{std, "task_lumen_3"}, false},           // active
		{Run{std, "task_lumen_4"}, false},           // waiting for its retry
		{Run{pro, "task_lumen_5"}, false},           // archived
		{Run{pro, "task_lumen_6"}, true},            // deleted
		{Run{std, "task_lumen_9"}, true},            // never queued
		{Run{std, "task_lumen_1"}, true},            // queued, on another queue
		{Run{jobsNoQueue, "task_lumen_1"}, true},    // a queue Asynq never saw
	}
	runs := make([]Run, len(tests))
	for i, tt := range tests {
		runs[i] = tt.run
	}
	got, err := e.Missing(ctx, runs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(tests) {
		t.Fatalf("Missing returned %d answers for %d runs", len(got), len(tests))
	}
	for i, tt := range tests {
		if got[i] != tt.missing {
			t.Errorf("Missing(%+v) = %v; want %v", tt.run, got[i], tt.missing)
		}
	}
	if got, err := e.Missing(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("Missing(nil) = %v, %v; want nothing", got, err)
	}

	// Redis unreachable: an error, not runs reported missing.
	down := srv.Client(t)
	_ = down.Close()
	if got, err := NewEnqueuer(down).Missing(ctx, runs); err == nil {
		t.Errorf("Missing with Redis unreachable = %v, no error", got)
	}
}

// jobsNoQueue is a queue name no job is ever put on.
const jobsNoQueue = "no-such-queue"

// EnqueueAdmitted queues the first run of each task admitted, on the
// queue the task's record gave it, by the task's deadline (the record
// counts it until CountMargin later); the job carries no more: the run
// reads the input from the record. A run queued already is no error, and
// a run that cannot be queued (no queue, an unknown one, no deadline) is
// reported after trying them all.
func TestEnqueueAdmitted(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	e := NewEnqueuer(rdb)
	ins := asynq.NewInspectorFromRedisClient(rdb)
	ctx := context.Background()
	admittedOf := func(j GenerateImage) task.Admitted {
		// As the store says it: the time the task counts until.
		return task.Admitted{AccountID: j.AccountID, TaskID: j.TaskID, Queue: Queue(j.Input.Model.Tier), Deadline: j.Deadline.Add(CountMargin)}
	}
	std, pro := imageJob("task_lumen_1", catalog.Standard), imageJob("task_lumen_2", catalog.Pro)
	admitted := []task.Admitted{admittedOf(std), admittedOf(pro)}
	if err := e.EnqueueAdmitted(ctx, admitted); err != nil {
		t.Fatal(err)
	}
	for _, j := range []GenerateImage{std, pro} {
		info, err := ins.GetTaskInfo(Queue(j.Input.Model.Tier), RunID(j.TaskID, 0))
		if err != nil {
			t.Fatalf("%s not queued: %v", j.TaskID, err)
		}
		// What a worker reads of it: Asynq keeps deadlines to the second.
		got, err := ParseGenerateImage(asynq.NewTask(info.Type, info.Payload), info.ID, info.Queue, info.Deadline)
		if err != nil || got.TaskID != j.TaskID || got.AccountID != j.AccountID || got.Queue != Queue(j.Input.Model.Tier) ||
			got.Deadline.Unix() != j.Deadline.Unix() || info.State != asynq.TaskStatePending || info.MaxRetry != MaxRetry {
			t.Errorf("%s queued as %+v (%+v), %v", j.TaskID, got, info, err)
		}
	}
	for _, q := range []string{Queue(catalog.Standard), Queue(catalog.Pro)} {
		if infos, err := ins.ListPendingTasks(q); err != nil || len(infos) != 1 {
			t.Errorf("%d runs pending on %s (%v); want 1", len(infos), q, err)
		}
	}
	// Again: the runs are queued already.
	if err := e.EnqueueAdmitted(ctx, admitted); err != nil {
		t.Errorf("EnqueueAdmitted of runs queued already: %v", err)
	}
	if err := e.EnqueueAdmitted(ctx, nil); err != nil {
		t.Errorf("EnqueueAdmitted(nil): %v", err)
	}

	// Runs that cannot be queued (no queue, an unknown queue, no
	// deadline) are reported, after the others are queued.
	other := imageJob("task_lumen_5", catalog.Standard)
	noQueue, unknownQueue := admittedOf(imageJob("task_lumen_9", catalog.Standard)), admittedOf(imageJob("task_lumen_10", catalog.Standard))
	noDeadline, unixZero := admittedOf(imageJob("task_lumen_11", catalog.Standard)), admittedOf(imageJob("task_lumen_12", catalog.Standard))
	noQueue.Queue, unknownQueue.Queue, noDeadline.Deadline, unixZero.Deadline = "", jobsNoQueue, time.Time{}, time.UnixMilli(0)
	err := e.EnqueueAdmitted(ctx, []task.Admitted{noQueue, unknownQueue, noDeadline, unixZero, admittedOf(other)})
	if err == nil {
		t.Error("EnqueueAdmitted of runs that cannot be queued: no error")
	}
	if _, err := ins.GetTaskInfo(Queue(catalog.Standard), other.TaskID); err != nil {
		t.Errorf("the run after the ones that failed was not queued: %v", err)
	}
	for _, a := range []task.Admitted{noQueue, unknownQueue, noDeadline, unixZero} {
		for _, q := range []string{Queue(catalog.Standard), Queue(catalog.Pro), jobsNoQueue} {
			if _, err := ins.GetTaskInfo(q, a.TaskID); err == nil {
				t.Errorf("a run of %s was queued on %s (%+v)", a.TaskID, q, a)
			}
		}
	}

	// The queue unreachable: an error.
	down := srv.Client(t)
	_ = down.Close()
	if err := NewEnqueuer(down).EnqueueAdmitted(ctx, admitted); err == nil {
		t.Error("EnqueueAdmitted with the queue unreachable: no error")
	}
}
