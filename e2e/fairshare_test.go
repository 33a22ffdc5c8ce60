package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/task"
)

// An account's tasks beyond its share of the workers wait parked: they
// never take a worker slot and are never in Asynq (nothing spins through
// retries), and run, oldest first, as the account's places free; another
// account's task starts at once meanwhile; a weight of 2 doubles the
// share. Every task runs once and is charged once. On any Redis the suite
// runs on (a cluster too).
func TestFairShareEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 1500 * time.Millisecond, env: map[string]string{
		"EASEL_ACCOUNT_MAX_RUNNING": "2",
		"EASEL_WORKER_CONCURRENCY":  "8",
	}})
	ctx := context.Background()
	heavyID, heavyKey := s.newAccount(t, account.Spec{Name: "heavy", Credits: 10_000, RateLimit: 100, MaxInflight: 100})
	heavy := newClient(t, s.base, heavyKey)
	rdb, err := redisconn.Open(ctx, s.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	inspector := asynq.NewInspectorFromRedisClient(rdb)

	// What the heavy account holds, sampled until its tasks end: tasks
	// processing, and jobs of it anywhere in Asynq.
	var mu sync.Mutex
	maxProcessing, maxJobs := 0, 0
	sample := func(ctx context.Context) {
		// Each job (run) once: the lists are read one after another, so a
		// job that a worker picks up between two reads is in both.
		jobsOf := map[string]string{} // run → task
		for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){inspector.ListPendingTasks, inspector.ListActiveTasks, inspector.ListRetryTasks} {
			infos, _ := list("standard", asynq.PageSize(1000))
			for _, ti := range infos {
				if r, err := jobs.ParseGenerateImage(asynq.NewTask(ti.Type, ti.Payload), ti.ID, ti.Queue, ti.Deadline); err == nil && r.AccountID == heavyID {
					jobsOf[ti.ID] = r.TaskID
				}
			}
		}
		// The tasks, read after the jobs: a job whose task has ended by
		// then is one Asynq has not yet let go of after its run returned
		// (its place is free, and the next task's job may be queued), not
		// a task beyond the account's places.
		tasks, err := accountTasks(ctx, s.tasks, heavyID)
		if err != nil {
			return
		}
		processing := 0
		for _, tk := range tasks {
			if tk.Status == task.Processing {
				processing++
			}
		}
		for run, id := range jobsOf {
			if tk, ok := tasks[id]; ok && tk.Status.Final() {
				delete(jobsOf, run)
			}
		}
		mu.Lock()
		maxProcessing, maxJobs = max(maxProcessing, processing), max(maxJobs, len(jobsOf))
		mu.Unlock()
	}
	watch := func() (stop func() (int, int)) {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for wctx.Err() == nil {
				sample(wctx)
				time.Sleep(50 * time.Millisecond)
			}
		}()
		return func() (int, int) {
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			p, j := maxProcessing, maxJobs
			maxProcessing, maxJobs = 0, 0
			return p, j
		}
	}

	stop := watch()
	var ids []string
	for range 6 {
		ids = append(ids, heavy.create(stdBody("a heavy backlog")))
	}
	// Another account's task starts at once, whatever the heavy backlog.
	other := newClient(t, s.base, s.keyOther)
	start := time.Now()
	light := other.create(stdBody("a light account"))
	other.waitStatus(light, "processing")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("another account's task waited %v behind a backlog to start", d)
	}
	for _, id := range ids {
		heavy.waitStatus(id, "completed")
	}
	processing, inAsynq := stop()
	if processing > 2 || inAsynq > 2 {
		t.Errorf("share 2: the account had up to %d tasks processing and %d jobs in Asynq", processing, inAsynq)
	}
	if processing < 2 {
		t.Errorf("share 2: never more than %d of the account's tasks ran at once", processing)
	}

	// Weight 2: twice the places.
	two := 2
	if _, err := s.accounts.SetLimits(ctx, heavyID, account.LimitsUpdate{Weight: &two}); err != nil {
		t.Fatal(err)
	}
	stop = watch()
	ids = ids[:0]
	for range 8 {
		ids = append(ids, heavy.create(stdBody("a heavier backlog")))
	}
	for _, id := range ids {
		heavy.waitStatus(id, "completed")
	}
	processing, inAsynq = stop()
	if processing > 4 || inAsynq > 4 {
		t.Errorf("share 2, weight 2: the account had up to %d tasks processing and %d jobs in Asynq", processing, inAsynq)
	}
	if processing < 3 {
		t.Errorf("share 2, weight 2: never more than %d of the account's tasks ran at once", processing)
	}

	// Each task charged once; nothing of the account unfinished or parked.
	a, err := s.accounts.Get(ctx, heavyID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Credits != 10_000-14*4 {
		t.Errorf("balance %d; want %d: 14 tasks charged 4 each, once", a.Credits, 10_000-14*4)
	}
	for name, read := range map[string]func(context.Context, string) (int64, error){
		"unfinished": s.tasks.Inflight, "holding a place": s.tasks.Running, "parked": s.tasks.Parked,
	} {
		if n, err := read(ctx, heavyID); err != nil || n != 0 {
			t.Errorf("tasks %s after all ended: %d, %v", name, n, err)
		}
	}
}
