package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

type sweepEnv struct {
	st   *store.Store
	rdb  *redis.Client
	q    *jobs.Enqueuer
	acct string
}

// newSweepEnv is a store on a private Redis with an account holding 100
// credits.
func newSweepEnv(t *testing.T) *sweepEnv {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	st := store.New(rdb)
	a, err := st.CreateAccount(context.Background(), store.NewAccount{Name: "sweep", Credits: 100})
	if err != nil {
		t.Fatal(err)
	}
	return &sweepEnv{st: st, rdb: rdb, q: jobs.NewEnqueuer(rdb), acct: a.ID}
}

// charge records a pending task as the gateway does, job payload and all,
// counting in flight until until, without queueing its job.
func (e *sweepEnv) charge(t *testing.T, id string, until time.Time) jobs.GenerateImage {
	t.Helper()
	now := time.Now()
	j := jobs.GenerateImage{TaskID: id, AccountID: e.acct, CreateTime: now, Deadline: now.Add(10 * time.Minute),
		Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
	payload, err := jobs.EncodeGenerateImage(j)
	if err != nil {
		t.Fatal(err)
	}
	rec := &task.Task{ID: id, AccountID: e.acct, Type: task.Type, Model: j.Input.Model.ID, CreateTime: now}
	if _, err := e.st.CreateTask(context.Background(), rec, store.Charge{Price: 10, Tier: "standard", CountUntil: until}, payload); err != nil {
		t.Fatal(err)
	}
	return j
}

func (e *sweepEnv) sweeper(q sweepQueue) *sweeper {
	if q == nil {
		q = e.q
	}
	return newSweeper(e.st, q, time.Minute, zap.NewNop())
}

func TestSweepFailsAndRefundsOverdueTasks(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	e.charge(t, "task_lumen_1", time.Now().Add(-time.Second))
	e.charge(t, "task_lumen_2", time.Now().Add(time.Hour))
	if r := e.sweeper(nil).round(ctx); r.expired != 1 {
		t.Fatalf("round %+v; want 1 task expired", r)
	}
	overdue, _ := e.st.Task(ctx, e.acct, "task_lumen_1")
	if overdue.Status != task.Failed || overdue.Failure == nil || overdue.Failure.Code != string(task.Timeout) || !overdue.Refunded {
		t.Errorf("overdue task %+v", overdue)
	}
	if running, _ := e.st.Task(ctx, e.acct, "task_lumen_2"); running.Status != task.Pending {
		t.Errorf("a task within its deadline was swept: %+v", running)
	}
	if a, _ := e.st.Account(ctx, e.acct); a.Credits != 100-10 {
		t.Errorf("balance %d; want 90 (one task charged, one refunded)", a.Credits)
	}
}

// Workers sweep one at a time: of many sweeping at once, one takes the lease
// and the overdue task is failed, and refunded, once.
func TestSweepOneWorkerAtATime(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	e.charge(t, "task_lumen_1", time.Now().Add(-time.Second))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := e.sweeper(nil).round(ctx).expired
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 1 {
		t.Errorf("%d tasks failed by 8 concurrent sweeps; want 1", total)
	}
	entries, _ := e.st.Ledger(ctx, e.acct, 100)
	refunds := 0
	for _, en := range entries {
		if en.Kind == store.KindRefund {
			refunds++
		}
	}
	if refunds != 1 {
		t.Errorf("%d refunds; want 1", refunds)
	}
	// The lease holds until it runs out: an immediate second round does
	// nothing, even with a new overdue task.
	e.charge(t, "task_lumen_3", time.Now().Add(-time.Second))
	if n := e.sweeper(nil).round(ctx).expired; n != 0 {
		t.Errorf("a second round under the lease failed %d tasks", n)
	}
}

// The loop sweeps every period and stops with its context.
func TestRunSweeperLoop(t *testing.T) {
	e := newSweepEnv(t)
	e.charge(t, "task_lumen_1", time.Now().Add(-time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := newSweeper(e.st, e.q, 100*time.Millisecond, zap.NewNop())
	go func() {
		s.run(ctx)
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := e.st.Task(context.Background(), e.acct, "task_lumen_1")
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

// A gateway that died after charging a task and before queueing its job:
// the recovery queues the job (from the record), once, however many rounds
// run; a task whose job is queued already is left as it is; a job the queue
// lost later (a failover) is queued again at the next check.
func TestSweepQueuesMissingJobs(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	lost := e.charge(t, "task_lumen_1", time.Now().Add(time.Hour))
	queued := e.charge(t, "task_lumen_2", time.Now().Add(time.Hour))
	e.charge(t, "task_lumen_3", time.Now().Add(time.Hour))
	if err := e.q.EnqueueGenerateImage(ctx, queued, queued.TaskID); err != nil { // its gateway queued it, then died
		t.Fatal(err)
	}
	if o, err := e.st.StartTask(ctx, e.acct, "task_lumen_3", "task_lumen_3"); err != nil || o != store.Applied {
		t.Fatalf("StartTask = %v, %v", o, err)
	}
	s := e.sweeper(nil)
	if r := s.round(ctx); r.queued != 0 {
		t.Fatalf("round %+v: queued tasks younger than %s", r, store.FirstQueueCheck)
	}
	clock := time.Now().Add(store.FirstQueueCheck + time.Second)
	s.now = func() time.Time { return clock }
	rounds := func() (queued int) {
		for i := 0; i < 3; i++ {
			_ = e.st.Unlock(ctx, "sweeper") // let each round run
			queued += s.round(ctx).queued
		}
		return queued
	}
	if n := rounds(); n != 1 {
		t.Errorf("rounds queued %d jobs; want 1 (the lost one)", n)
	}
	ins := asynq.NewInspectorFromRedisClient(e.rdb)
	for _, j := range []jobs.GenerateImage{lost, queued} {
		info, err := ins.GetTaskInfo(jobs.Queue(catalog.Standard), j.TaskID)
		if err != nil {
			t.Fatalf("%s is not queued: %v", j.TaskID, err)
		}
		got, err := jobs.ParseGenerateImage(asynq.NewTask(info.Type, info.Payload))
		if err != nil || got.Input.Prompt != "p" || !info.Deadline.Equal(j.Deadline.Truncate(time.Second)) && info.Deadline.Unix() != j.Deadline.Unix() {
			t.Errorf("%s queued as %+v (deadline %v), %v", j.TaskID, got, info.Deadline, err)
		}
	}
	if infos, _ := ins.ListPendingTasks(jobs.Queue(catalog.Standard)); len(infos) != 2 {
		t.Errorf("%d jobs pending; want 2 (each task once)", len(infos))
	}
	// Checked: not again until later; the started task not at all.
	if c, _ := e.st.QueueChecks(ctx, clock, 10); len(c) != 0 {
		t.Errorf("checks still due: %+v", c)
	}
	later, _ := e.st.QueueChecks(ctx, clock.Add(time.Hour), 10)
	if len(later) != 2 {
		t.Errorf("checks scheduled: %+v; want the two pending tasks", later)
	}

	// The queue loses a job (a failover); the next check queues it again.
	if err := ins.DeleteTask(jobs.Queue(catalog.Standard), queued.TaskID); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(maxRecheck)
	if n := rounds(); n != 1 {
		t.Errorf("rounds queued %d jobs; want 1 (the one lost)", n)
	}
	if _, err := ins.GetTaskInfo(jobs.Queue(catalog.Standard), queued.TaskID); err != nil {
		t.Errorf("the lost job was not queued again: %v", err)
	}
}

// orphanQueue lists fixed orphans and records the runs queued.
type orphanQueue struct {
	orphans []jobs.Orphan
	mu      sync.Mutex
	queued  []string
	err     error
}

func (q *orphanQueue) EnsureGenerateImage(ctx context.Context, j jobs.GenerateImage, run string) (bool, error) {
	return false, q.EnqueueGenerateImage(ctx, j, run)
}

func (q *orphanQueue) EnqueueGenerateImage(_ context.Context, j jobs.GenerateImage, run string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	q.queued = append(q.queued, run)
	return nil
}

func (q *orphanQueue) Orphans(context.Context, []string) ([]jobs.Orphan, error) {
	return q.orphans, nil
}

// A run whose worker died is handed to a new run, queued; the next round,
// with the orphan still listed (Asynq recovers it only later), queues that
// run again harmlessly and takes nothing over twice. A task whose runs
// crashed twice is failed instead.
func TestSweepTakesOverOrphans(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	j := e.charge(t, "task_lumen_1", time.Now().Add(time.Hour))
	if o, err := e.st.StartTask(ctx, e.acct, j.TaskID, j.TaskID); err != nil || o != store.Applied {
		t.Fatal(o, err)
	}
	q := &orphanQueue{orphans: []jobs.Orphan{{Run: j.TaskID, Job: j}}, err: errors.New("redis down")}
	s := e.sweeper(q)
	if r := s.round(ctx); r.takenOver != 0 {
		t.Errorf("round %+v with the queue down; want no takeover reported", r)
	}
	q.err = nil
	_ = e.st.Unlock(ctx, "sweeper")
	r := s.round(ctx)
	// The first round took the task over but could not queue the run; this
	// one queues it.
	if len(q.queued) != 1 || q.queued[0] != j.TaskID+".r1" {
		t.Fatalf("round %+v queued %v; want the new run %s.r1", r, q.queued, j.TaskID)
	}
	// The new run dies too: the second crash fails the task.
	if o, err := e.st.StartTask(ctx, e.acct, j.TaskID, j.TaskID+".r1"); err != nil || o != store.Applied {
		t.Fatal(o, err)
	}
	q.orphans = []jobs.Orphan{{Run: j.TaskID + ".r1", Job: j}}
	_ = e.st.Unlock(ctx, "sweeper")
	if r := s.round(ctx); r.poisoned != 1 {
		t.Fatalf("round %+v; want the task poisoned", r)
	}
	got, _ := e.st.Task(ctx, e.acct, j.TaskID)
	if got.Status != task.Failed || got.Failure.Code != string(task.WorkerCrashed) || !got.Refunded {
		t.Errorf("task %+v %+v", got, got.Failure)
	}
}
