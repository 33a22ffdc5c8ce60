package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

type sweepEnv struct {
	tasks    *store.Tasks
	accounts *store.Accounts
	leases   *store.Leases
	rdb      *redis.Client
	q        *jobs.Enqueuer
	notes    *notifyLog
	acct     string
}

// newSweepEnv is a store on a private Redis with an account holding 100
// credits.
func newSweepEnv(t *testing.T) *sweepEnv {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	db := store.NewDB(rdb, store.Options{})
	accounts := store.NewAccounts(db)
	a, err := accounts.Create(context.Background(), account.Spec{Name: "sweep", Credits: 100})
	if err != nil {
		t.Fatal(err)
	}
	return &sweepEnv{tasks: store.NewTasks(db), accounts: accounts, leases: store.NewLeases(db), rdb: rdb, q: jobs.NewEnqueuer(rdb), notes: &notifyLog{}, acct: a.ID}
}

// notifyLog records the webhook events the sweeper queues (hookNotifier).
type notifyLog struct {
	mu     sync.Mutex
	events []string
}

func (n *notifyLog) Notify(_ context.Context, _, taskID, event string, seq int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, taskID+" "+event+" "+strconv.Itoa(seq))
}

func (n *notifyLog) got() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.events...)
}

// charge records a pending task as the gateway does, job payload and all,
// counting in flight until until, without queueing its job.
func (e *sweepEnv) charge(t *testing.T, id string, until time.Time) jobs.GenerateImage {
	t.Helper()
	return e.chargeWith(t, id, until, task.Callback{})
}

// chargeWith is charge for a task with a callback (kept in the record).
func (e *sweepEnv) chargeWith(t *testing.T, id string, until time.Time, cb task.Callback) jobs.GenerateImage {
	t.Helper()
	now := time.Now()
	j := jobs.GenerateImage{TaskID: id, AccountID: e.acct, CreateTime: now, Deadline: now.Add(10 * time.Minute),
		Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
	payload, err := jobs.EncodeGenerateImage(j)
	if err != nil {
		t.Fatal(err)
	}
	rec := &task.Task{ID: id, AccountID: e.acct, Type: task.Type, Model: j.Input.Model.ID, CreateTime: now, Callback: cb}
	if _, err := e.tasks.Create(context.Background(), rec, task.Charge{Price: 10, Tier: "standard", CountUntil: until}, payload); err != nil {
		t.Fatal(err)
	}
	return j
}

func (e *sweepEnv) sweeper(q sweepQueue) *sweeper {
	if q == nil {
		q = e.q
	}
	return newSweeper(e.tasks, q, e.notes, nil, zap.NewNop())
}

// refunds counts the refunds in the account's ledger.
func (e *sweepEnv) refunds(t *testing.T) int {
	t.Helper()
	entries, err := e.accounts.Ledger(context.Background(), e.acct, 100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range entries {
		if en.Kind == account.Refund {
			n++
		}
	}
	return n
}

var hooksWanted = task.Callback{URL: "https://hooks.example.com/x", Events: task.DefaultEvents}

func TestSweepFailsAndRefundsOverdueTasks(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	e.chargeWith(t, "task_lumen_1", time.Now().Add(-time.Second), hooksWanted)
	e.charge(t, "task_lumen_2", time.Now().Add(time.Hour))
	if r := e.sweeper(nil).round(ctx); r.expired != 1 {
		t.Fatalf("round %+v; want 1 task expired", r)
	}
	overdue, _ := e.tasks.Get(ctx, e.acct, "task_lumen_1")
	if overdue.Status != task.Failed || overdue.Failure == nil || overdue.Failure.Code != string(task.Timeout) || !overdue.Refunded {
		t.Errorf("overdue task %+v", overdue)
	}
	if running, _ := e.tasks.Get(ctx, e.acct, "task_lumen_2"); running.Status != task.Pending {
		t.Errorf("a task within its deadline was swept: %+v", running)
	}
	if a, _ := e.accounts.Get(ctx, e.acct); a.Credits != 100-10 {
		t.Errorf("balance %d; want 90 (one task charged, one refunded)", a.Credits)
	}
	// The store said the failure's webhook event is due; the sweeper
	// queued it.
	if got := e.notes.got(); len(got) != 1 || got[0] != "task_lumen_1 "+task.EventFailed+" 0" {
		t.Errorf("webhook events %v; want task_lumen_1's failure", got)
	}
}

// sweepLoops runs n sweepers, each in its own lease-and-tick loop on the
// sweeper's lease (as n workers do), until ctx is done, and returns a
// function that waits for them.
func sweepLoops(ctx context.Context, e *sweepEnv, n int, every time.Duration, round func(sweepReport)) (wait func()) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		s := e.sweeper(nil)
		wg.Go(func() {
			everyUnderLease(ctx, e.leases, "sweeper", every, func(ctx context.Context) { round(s.round(ctx)) })
		})
	}
	return wg.Wait
}

// Workers sweep one at a time: of many sweeping at once, one takes the lease
// and the overdue task is failed, and refunded, once.
func TestSweepOneWorkerAtATime(t *testing.T) {
	e := newSweepEnv(t)
	e.charge(t, "task_lumen_1", time.Now().Add(-time.Second))
	const every = 500 * time.Millisecond
	var mu sync.Mutex
	total, rounds := 0, 0
	ctx, cancel := context.WithCancel(context.Background())
	wait := sweepLoops(ctx, e, 8, every, func(r sweepReport) {
		mu.Lock()
		defer mu.Unlock()
		total += r.expired
		rounds++
	})
	// The first tick: one of the eight takes the lease and sweeps.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := rounds
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sweeper ever took the lease")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wait()
	if rounds != 1 || total != 1 {
		t.Errorf("%d rounds failed %d tasks on the first tick of 8 sweepers; want 1 round failing 1", rounds, total)
	}
	if n := e.refunds(t); n != 1 {
		t.Errorf("%d refunds; want 1", n)
	}
	// The lease holds until it runs out: sweepers ticking meanwhile do
	// nothing, even with a new overdue task.
	e.charge(t, "task_lumen_3", time.Now().Add(-time.Second))
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	sweepLoops(ctx, e, 8, 10*time.Millisecond, func(r sweepReport) {
		mu.Lock()
		defer mu.Unlock()
		total += r.expired
		rounds++
	})()
	if rounds != 1 || total != 1 {
		t.Errorf("rounds under another's lease: %d rounds in all failing %d tasks; want the first one only", rounds, total)
	}
	if got, _ := e.tasks.Get(context.Background(), e.acct, "task_lumen_3"); got.Status != task.Pending {
		t.Errorf("a task was swept under another's lease: %s", got.Status)
	}
	// Once it runs out, a sweeper takes the lease and sweeps it.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	wait = sweepLoops(ctx, e, 8, 10*time.Millisecond, func(sweepReport) {})
	deadline = time.Now().Add(10 * time.Second)
	for {
		if got, _ := e.tasks.Get(context.Background(), e.acct, "task_lumen_3"); got.Status == task.Failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the overdue task was never swept once the lease ran out")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wait()
	if n := e.refunds(t); n != 2 {
		t.Errorf("%d refunds; want 2 (each overdue task once)", n)
	}
}

// The loop sweeps every period and stops with its context.
func TestRunSweeperLoop(t *testing.T) {
	e := newSweepEnv(t)
	e.charge(t, "task_lumen_1", time.Now().Add(-time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := e.sweeper(nil)
	go func() {
		everyUnderLease(ctx, e.leases, "sweeper", 100*time.Millisecond, func(ctx context.Context) { s.round(ctx) })
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := e.tasks.Get(context.Background(), e.acct, "task_lumen_1")
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

// Two loops on one lease (two workers): each tick, one round runs, on one
// of them; a lease a worker took and never gave back (it died) holds the
// rounds off until it runs out, and then the rounds go on.
func TestEveryUnderLease(t *testing.T) {
	e := newSweepEnv(t)
	const every = 100 * time.Millisecond
	const held = 350 * time.Millisecond
	// A worker that died holding the lease.
	if got, err := e.leases.TryLock(context.Background(), "test", held); err != nil || !got {
		t.Fatalf("TryLock = %v, %v", got, err)
	}
	begin := time.Now()
	var mu sync.Mutex
	var starts []time.Time
	var by []int
	ctx, cancel := context.WithTimeout(context.Background(), held+6*every+every/2)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			everyUnderLease(ctx, e.leases, "test", every, func(context.Context) {
				mu.Lock()
				starts = append(starts, time.Now())
				by = append(by, i)
				mu.Unlock()
				time.Sleep(every / 5) // a round takes a while
			})
		})
	}
	wg.Wait()
	if len(starts) == 0 {
		t.Fatal("no round ran once the dead worker's lease ran out")
	}
	if first := starts[0].Sub(begin); first < held-5*time.Millisecond {
		t.Errorf("a round ran %v in, under another worker's lease of %v", first, held)
	}
	// One round a tick: rounds at least the lease apart (its ttl is
	// every less a tenth), never two on one tick.
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < every-every/10-5*time.Millisecond {
			t.Errorf("rounds %d and %d (loops %d and %d) %v apart: two rounds on one tick", i-1, i, by[i-1], by[i], gap)
		}
	}
	// After the dead worker's lease, about 6 ticks: a round on each (the
	// lease runs out before the next tick).
	if len(starts) < 4 || len(starts) > 7 {
		t.Errorf("%d rounds in the %d ticks after the lease ran out; want one a tick", len(starts), 6)
	}
}

// A gateway that died after charging a task and before queueing its job:
// the recovery queues the job (from the record), once, however many rounds
// run; a task whose job is queued already is left as it is; a job the queue
// lost later (a failover) is queued again at the next check.
func TestSweepQueuesMissingJobs(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	lost := e.chargeWith(t, "task_lumen_1", time.Now().Add(time.Hour), hooksWanted)
	queued := e.charge(t, "task_lumen_2", time.Now().Add(time.Hour))
	e.charge(t, "task_lumen_3", time.Now().Add(time.Hour))
	if err := e.q.EnqueueGenerateImage(ctx, queued, queued.TaskID); err != nil { // its gateway queued it, then died
		t.Fatal(err)
	}
	if c, err := e.tasks.Start(ctx, e.acct, "task_lumen_3", "task_lumen_3", store.Place{}); err != nil || c.Outcome != task.Applied {
		t.Fatalf("Start = %v, %v", c.Outcome, err)
	}
	s := e.sweeper(nil)
	if r := s.round(ctx); r.queued != 0 {
		t.Fatalf("round %+v: queued tasks younger than %s", r, store.FirstQueueCheck)
	}
	clock := time.Now().Add(store.FirstQueueCheck + time.Second)
	s.now = func() time.Time { return clock }
	rounds := func() (queued int) {
		for i := 0; i < 3; i++ {
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
		if got.Input.Callback.URL != "" {
			t.Errorf("%s queued with the callback %+v; the record keeps it", j.TaskID, got.Input.Callback)
		}
	}
	if rec, _ := e.tasks.Get(ctx, e.acct, lost.TaskID); rec.Callback.URL != hooksWanted.URL {
		t.Errorf("the record of %s has the callback %+v; want %s", lost.TaskID, rec.Callback, hooksWanted.URL)
	}
	if infos, _ := ins.ListPendingTasks(jobs.Queue(catalog.Standard)); len(infos) != 2 {
		t.Errorf("%d jobs pending; want 2 (each task once)", len(infos))
	}
	// Checked: not again until later; the started task not at all.
	if c, _ := e.tasks.QueueChecks(ctx, clock, 10); len(c) != 0 {
		t.Errorf("checks still due: %+v", c)
	}
	later, _ := e.tasks.QueueChecks(ctx, clock.Add(time.Hour), 10)
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
	j := e.chargeWith(t, "task_lumen_1", time.Now().Add(time.Hour), hooksWanted)
	if c, err := e.tasks.Start(ctx, e.acct, j.TaskID, j.TaskID, store.Place{}); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	q := &orphanQueue{orphans: []jobs.Orphan{{Run: j.TaskID, Job: j}}, err: errors.New("redis down")}
	s := e.sweeper(q)
	if r := s.round(ctx); r.takenOver != 0 {
		t.Errorf("round %+v with the queue down; want no takeover reported", r)
	}
	q.err = nil
	r := s.round(ctx)
	// The first round took the task over but could not queue the run; this
	// one queues it.
	if len(q.queued) != 1 || q.queued[0] != j.TaskID+".r1" {
		t.Fatalf("round %+v queued %v; want the new run %s.r1", r, q.queued, j.TaskID)
	}
	// The new run dies too: the second crash fails the task.
	if len(e.notes.got()) != 0 {
		t.Errorf("webhook events %v for a task taken over; want none", e.notes.got())
	}
	if c, err := e.tasks.Start(ctx, e.acct, j.TaskID, j.TaskID+".r1", store.Place{}); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	q.orphans = []jobs.Orphan{{Run: j.TaskID + ".r1", Job: j}}
	if r := s.round(ctx); r.poisoned != 1 {
		t.Fatalf("round %+v; want the task poisoned", r)
	}
	got, _ := e.tasks.Get(ctx, e.acct, j.TaskID)
	if got.Status != task.Failed || got.Failure.Code != string(task.WorkerCrashed) || !got.Refunded {
		t.Errorf("task %+v %+v", got, got.Failure)
	}
	// The store said the failure's webhook event is due; the sweeper
	// queued it.
	if got := e.notes.got(); len(got) != 1 || got[0] != j.TaskID+" "+task.EventFailed+" 0" {
		t.Errorf("webhook events %v; want the task's failure", got)
	}
}
