package worker

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
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
	return newSweepEnvWith(t, store.Options{})
}

// newSweepEnvWith is newSweepEnv with the store's options o (its share,
// its clock).
func newSweepEnvWith(t *testing.T, o store.Options) *sweepEnv {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	db := store.NewDB(rdb, o)
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

// charge records a pending task as the gateway does, input and all,
// counting in flight until until (jobs.CountMargin past the job's
// deadline, as the gateway's create counts it), without queueing its job.
func (e *sweepEnv) charge(t *testing.T, id string, until time.Time) jobs.GenerateImage {
	t.Helper()
	return e.chargeWith(t, id, until, task.Callback{})
}

// chargeWith is charge for a task with a callback (kept in the record).
func (e *sweepEnv) chargeWith(t *testing.T, id string, until time.Time, cb task.Callback) jobs.GenerateImage {
	t.Helper()
	j, _ := e.create(t, id, until, cb)
	return j
}

// create is chargeWith, reporting whether the task was admitted (else it
// waits parked).
func (e *sweepEnv) create(t *testing.T, id string, until time.Time, cb task.Callback) (jobs.GenerateImage, bool) {
	t.Helper()
	now := time.Now()
	j := jobs.GenerateImage{TaskID: id, AccountID: e.acct, CreateTime: now, Deadline: jobs.RunDeadline(until),
		Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}.WithDefaults()}
	// The client's input, callback and all: the store keeps it without
	// the callback (jobs.EncodeInput), which the record keeps apart.
	sent := j.Input
	sent.Callback = cb
	input, err := jobs.EncodeInput(sent)
	if err != nil {
		t.Fatal(err)
	}
	rec := &task.Task{ID: id, AccountID: e.acct, Type: task.Type, Model: j.Input.Model.ID, CreateTime: now, Callback: cb}
	c, err := e.tasks.Create(context.Background(), rec, task.Charge{Price: 10, Tier: "standard", CountUntil: until, Queue: jobs.Queue(catalog.Standard)}, input)
	if err != nil {
		t.Fatal(err)
	}
	return j, c.Admitted
}

func (e *sweepEnv) sweeper(q sweepQueue) *sweeper {
	if q == nil {
		q = e.q
	}
	return newSweeper(e.tasks, q, e.notes, nil, zap.NewNop())
}

// dueSpy is the task store with the due work it gave the recovery, and
// the batches the recovery expired, written down.
type dueSpy struct {
	*store.Tasks
	mu      sync.Mutex
	read    []store.DueEntry
	batches [][]store.TaskRef
}

func (d *dueSpy) Due(ctx context.Context, shard int, now time.Time, limit int) (store.DueWork, error) {
	w, err := d.Tasks.Due(ctx, shard, now, limit)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.read = append(d.read, w.Entries...)
	return w, err
}

func (d *dueSpy) ExpireAll(ctx context.Context, refs []store.TaskRef) ([]store.Change, []error) {
	d.mu.Lock()
	d.batches = append(d.batches, append([]store.TaskRef(nil), refs...))
	d.mu.Unlock()
	return d.Tasks.ExpireAll(ctx, refs)
}

// taken returns the due entries of a kind read since the last call.
func (d *dueSpy) taken(kind store.DueKind) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, e := range d.read {
		if e.Kind == kind {
			out = append(out, e.TaskID)
		}
	}
	d.read = nil
	slices.Sort(out)
	return out
}

// recovery returns a recovery on the env's store (through spy, if not
// nil), named holder, queueing on q (nil: the env's queue).
func (e *sweepEnv) recovery(holder string, spy *dueSpy, q recoveryQueue) *recovery {
	var st recoveryStore = e.tasks
	if spy != nil {
		st = spy
	}
	if q == nil {
		q = e.q
	}
	return newRecovery(st, e.leases, q, e.notes, nil, holder, zap.NewNop())
}

// readAll makes every shard the recovery holds due for a read at its next
// poll, however recently it read it.
func readAll(r *recovery) {
	for n := range r.held {
		r.held[n] = time.Time{}
	}
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

// Tasks past their deadline, whether their job never ran, their worker
// hangs or they waited parked all along, are failed and refunded by one
// poll, in one batch; their webhook events are queued, and the tasks
// their places admit are queued, but for those the batch fails too. A
// task within its deadline is left as it is.
func TestRecoveryFailsOverdueTasks(t *testing.T) {
	e := newSweepEnvWith(t, store.Options{Share: 2})
	ctx := context.Background()
	now := time.Now()
	for _, c := range []struct {
		id       string
		until    time.Time
		admitted bool
	}{
		{"task_lumen_1", now.Add(-3 * time.Second), true}, // its job never ran
		{"task_lumen_2", now.Add(-2 * time.Second), true}, // its worker hangs
		{"task_lumen_3", now.Add(-time.Second), false},    // parked all along
		{"task_lumen_4", now.Add(time.Hour), false},       // parked, within its deadline
	} {
		if _, admitted := e.create(t, c.id, c.until, hooksWanted); admitted != c.admitted {
			t.Fatalf("%s admitted: %v; want %v (a share of 2)", c.id, admitted, c.admitted)
		}
	}
	if c, err := e.tasks.Start(ctx, e.acct, "task_lumen_2", "task_lumen_2"); err != nil || c.Outcome != task.Applied {
		t.Fatalf("Start = %v, %v", c.Outcome, err)
	}
	spy := &dueSpy{Tasks: e.tasks}
	r := e.recovery("w1", spy, nil)
	// An admitted task is due for its first queue check before its
	// deadline is looked at again: polls once that is past, as any poll
	// of a task admitted longer ago than that (its deadline was minutes
	// later) would be.
	clock := now.Add(store.FirstQueueCheck + time.Second)
	r.now = func() time.Time { return clock }
	r.lease(ctx)
	if n := len(r.shards()); n != store.Shards {
		t.Fatalf("a lone worker holds %d shards; want all %d", n, store.Shards)
	}
	if rep := r.poll(ctx); rep.expired != 3 || rep.queued != 0 {
		t.Fatalf("poll %+v; want 3 tasks expired", rep)
	}
	if len(spy.batches) != 1 || len(spy.batches[0]) != 3 {
		t.Errorf("expired in batches %v; want one of 3", spy.batches)
	}
	for _, id := range []string{"task_lumen_1", "task_lumen_2", "task_lumen_3"} {
		got, _ := e.tasks.Get(ctx, e.acct, id)
		if got.Status != task.Failed || got.Failure == nil || got.Failure.Code != string(task.Timeout) || !got.Refunded {
			t.Errorf("overdue task %s: %+v %+v", id, got, got.Failure)
		}
	}
	if a, _ := e.accounts.Get(ctx, e.acct); a.Credits != 100-40+30 || e.refunds(t) != 3 {
		t.Errorf("balance %d, %d refunds; want 90 and 3 (four tasks charged, three refunded)", a.Credits, e.refunds(t))
	}
	// The store said the failures' webhook events are due; the recovery
	// queued them.
	want := []string{"task_lumen_1 " + task.EventFailed + " 0", "task_lumen_2 " + task.EventFailed + " 0", "task_lumen_3 " + task.EventFailed + " 0"}
	if got := e.notes.got(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("webhook events %v; want %v", got, want)
	}
	// The places freed admitted the parked task within its deadline, whose
	// job is queued; the parked task failed in the same batch is not.
	in, _ := e.tasks.Get(ctx, e.acct, "task_lumen_4")
	if in.Status != task.Pending {
		t.Errorf("a task within its deadline was failed: %+v", in)
	}
	if n, _ := e.tasks.Running(ctx, e.acct); n != 1 {
		t.Errorf("%d places held; want 1 (task_lumen_4's)", n)
	}
	if n, _ := e.tasks.Parked(ctx, e.acct); n != 0 {
		t.Errorf("%d tasks parked; want 0", n)
	}
	ins := asynq.NewInspectorFromRedisClient(e.rdb)
	infos, err := ins.ListPendingTasks(jobs.Queue(catalog.Standard))
	if err != nil || len(infos) != 1 || infos[0].ID != "task_lumen_4" {
		var ids []string
		for _, ti := range infos {
			ids = append(ids, ti.ID)
		}
		t.Errorf("jobs queued %v (%v); want task_lumen_4's only", ids, err)
	}
	// Done: the next poll fails and queues nothing more (the events the
	// test's notifier never queued stay in the outbox, for it to queue).
	readAll(r)
	if rep := r.poll(ctx); rep.expired != 0 || rep.queued != 0 {
		t.Errorf("the next poll %+v; want nothing more expired or queued", rep)
	}
}

// A gateway that died after charging a task and before queueing its job:
// the recovery queues the job (from the record), once, however many polls
// run; a task whose job is queued already is left as it is; a job the
// queue lost later (a failover, an operator's delete) is queued again at
// the next check, and so is the job of a task that started (checked
// store.QueueRecheck after its start).
func TestRecoveryQueuesMissingJobs(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	lost := e.chargeWith(t, "task_lumen_1", time.Now().Add(time.Hour), hooksWanted)
	queued := e.charge(t, "task_lumen_2", time.Now().Add(time.Hour))
	started := e.charge(t, "task_lumen_3", time.Now().Add(time.Hour))
	for _, j := range []jobs.GenerateImage{queued, started} { // their gateway queued them, then died
		if err := e.q.EnqueueGenerateImage(ctx, jobs.RefOf(j), j.TaskID); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := e.tasks.Start(ctx, e.acct, "task_lumen_3", "task_lumen_3"); err != nil || c.Outcome != task.Applied {
		t.Fatalf("Start = %v, %v", c.Outcome, err)
	}
	spy := &dueSpy{Tasks: e.tasks}
	r := e.recovery("w1", spy, nil)
	r.lease(ctx)
	if rep := r.poll(ctx); rep.queued != 0 {
		t.Fatalf("poll %+v: queued tasks younger than %s", rep, store.FirstQueueCheck)
	}
	clock := time.Now().Add(store.FirstQueueCheck + time.Second)
	r.now = func() time.Time { return clock }
	polls := func() (queued int) {
		for i := 0; i < 3; i++ {
			readAll(r)
			queued += r.poll(ctx).queued
		}
		return queued
	}
	if n := polls(); n != 1 {
		t.Errorf("polls queued %d jobs; want 1 (the lost one)", n)
	}
	if got := spy.taken(store.DueCheck); !slices.Equal(got, []string{"task_lumen_1", "task_lumen_2"}) {
		t.Errorf("checked %v; want the two pending tasks, once each", got)
	}
	ins := asynq.NewInspectorFromRedisClient(e.rdb)
	for _, j := range []jobs.GenerateImage{lost, queued} {
		info, err := ins.GetTaskInfo(jobs.Queue(catalog.Standard), j.TaskID)
		if err != nil {
			t.Fatalf("%s is not queued: %v", j.TaskID, err)
		}
		// As a worker reads it: the run's id, queue and deadline are
		// Asynq's (its deadlines are to the second). The job's deadline is
		// the task's, as its gateway queues it: not the time the store
		// counts the task until (jobs.CountMargin later).
		got, err := jobs.ParseGenerateImage(asynq.NewTask(info.Type, info.Payload), info.ID, info.Queue, info.Deadline)
		if err != nil || got.TaskID != j.TaskID || got.AccountID != e.acct || got.Queue != jobs.Queue(catalog.Standard) || info.Deadline.Unix() != j.Deadline.Unix() {
			t.Errorf("%s queued as %+v (deadline %v; want %v), %v", j.TaskID, got, info.Deadline, j.Deadline, err)
		}
	}
	if rec, _ := e.tasks.Get(ctx, e.acct, lost.TaskID); rec.Callback.URL != hooksWanted.URL {
		t.Errorf("the record of %s has the callback %+v; want %s", lost.TaskID, rec.Callback, hooksWanted.URL)
	}
	if infos, _ := ins.ListPendingTasks(jobs.Queue(catalog.Standard)); len(infos) != 3 {
		t.Errorf("%d jobs pending; want 3 (each task once)", len(infos))
	}

	// The queue loses two jobs (a failover, or an operator deletes them),
	// one of a task pending, one of the task processing. The processing
	// one is checked store.QueueRecheck after its start, and its job
	// queued again; the pending one is not checked again before
	// store.QueueRecheck after its last check, then its job is queued
	// again.
	for _, j := range []jobs.GenerateImage{queued, started} {
		if err := ins.DeleteTask(jobs.Queue(catalog.Standard), j.TaskID); err != nil {
			t.Fatal(err)
		}
	}
	clock = clock.Add(store.QueueRecheck - time.Second)
	if n := polls(); n != 1 {
		t.Errorf("polls queued %d jobs; want 1 (the processing task's)", n)
	}
	if got := spy.taken(store.DueCheck); !slices.Equal(got, []string{"task_lumen_3"}) {
		t.Errorf("checked %v; want only the processing task, its check due", got)
	}
	clock = clock.Add(time.Second)
	if n := polls(); n != 1 {
		t.Errorf("polls queued %d jobs; want 1 (the pending one lost)", n)
	}
	if got := spy.taken(store.DueCheck); !slices.Equal(got, []string{"task_lumen_1", "task_lumen_2"}) {
		t.Errorf("checked %v; want the two pending tasks, once each", got)
	}
	for _, j := range []jobs.GenerateImage{queued, started} {
		if _, err := ins.GetTaskInfo(jobs.Queue(catalog.Standard), j.TaskID); err != nil {
			t.Errorf("the lost job of %s was not queued again: %v", j.TaskID, err)
		}
	}
	if infos, _ := ins.ListPendingTasks(jobs.Queue(catalog.Standard)); len(infos) != 3 {
		t.Errorf("%d jobs pending; want 3 (each task once)", len(infos))
	}
	// The processing task's run, queued again, starts it again: its
	// holder (this test's store) let go of nothing, and is alive.
	if st, err := e.tasks.Start(ctx, e.acct, started.TaskID, started.TaskID); err != nil || st.Outcome != task.Applied {
		t.Errorf("Start of the processing task's run, queued again = %v, %v", st.Outcome, err)
	}

	// Their runs start them with the input the record kept: the task's,
	// without the callback (the record keeps that apart), and with the
	// model the record keeps, the input naming none.
	for _, j := range []jobs.GenerateImage{lost, queued} {
		st, err := e.tasks.Start(ctx, e.acct, j.TaskID, j.TaskID)
		if err != nil || st.Outcome != task.Applied {
			t.Fatalf("Start %s = %v, %v", j.TaskID, st.Outcome, err)
		}
		if st.Model != j.Input.Model.ID || bytes.Contains(st.Input, []byte(st.Model)) {
			t.Errorf("%s starts with the model %q and the input %q; want %s once, from the record", j.TaskID, st.Model, st.Input, j.Input.Model.ID)
		}
		in, err := jobs.DecodeInput(st.Input, catalog.Model{ID: st.Model, Tier: jobs.QueueTier(jobs.RefOf(j).Queue)})
		if err != nil || in.Prompt != "p" || !reflect.DeepEqual(in, j.Input) {
			t.Errorf("%s runs the input %+v, %v; want %+v", j.TaskID, in, err, j.Input)
		}
		if in.Callback.URL != "" || len(in.Callback.Events) != 0 {
			t.Errorf("%s runs with the callback %+v; the record keeps it", j.TaskID, in.Callback)
		}
	}
}

// shardView is what each recovery said it holds after its last lease
// round.
type shardView struct {
	mu   sync.Mutex
	held map[string][]int
}

func (v *shardView) set(holder string, shards []int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.held[holder] = shards
}

func (v *shardView) get(holder string) []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.held[holder]
}

// waitFor polls cond every few milliseconds until it holds, and fails the
// test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two workers share the shards: each holds half, none is held twice; the
// shards of one that stops are all the other's within the lease's TTL,
// and those of one that dies holding them (never renewed, never given
// back) within the TTL of its last renewal and a round.
func TestRecoverySharesTheShards(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	// slack is the test's own scheduling's share of what it measures.
	const every, ttl, slack = 50 * time.Millisecond, time.Second, 250 * time.Millisecond
	view := &shardView{held: map[string][]int{}}
	newRec := func(holder string) *recovery {
		r := e.recovery(holder, nil, nil)
		r.leaseEvery, r.leaseTTL, r.pollEvery = every, ttl, 20*time.Millisecond
		return r
	}
	start := func(holder string) (stop func()) {
		r := newRec(holder)
		r.observe = func(held []int) { view.set(holder, held) }
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.run(rctx)
		}()
		return func() {
			cancel()
			<-done
			view.set(holder, nil)
		}
	}
	// freeShards takes the shards no one holds for a moment, and gives
	// them back: none, while the workers hold them all.
	freeShards := func() []int {
		t.Helper()
		all := make([]int, store.Shards)
		for i := range all {
			all[i] = i
		}
		got, err := e.leases.TakeShards(ctx, "probe", all, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.leases.ReleaseShards(ctx, "probe", got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	stopA := start("worker-a")
	stopB := start("worker-b")
	defer stopB()
	waitFor(t, 10*time.Second, "two workers holding half the shards each", func() bool {
		return len(view.get("worker-a")) == store.Shards/2 && len(view.get("worker-b")) == store.Shards/2
	})
	a, b := view.get("worker-a"), view.get("worker-b")
	if both := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(a), b...)))); len(both) != store.Shards {
		t.Errorf("the two workers hold %d distinct shards of %d: some held twice", len(both), len(a)+len(b))
	}
	if free := freeShards(); len(free) != 0 {
		t.Errorf("shards %v held by neither worker", free)
	}

	// One stops (giving its shards back): within the TTL the other holds
	// them all.
	stopA()
	stopped := time.Now()
	waitFor(t, 10*time.Second, "the other worker holding every shard", func() bool {
		return len(view.get("worker-b")) == store.Shards
	})
	t.Logf("the shards of a worker that stopped were all taken %v after", time.Since(stopped))
	if took := time.Since(stopped); took > ttl+slack {
		t.Errorf("the shards of a worker that stopped were taken %v after; want within the lease TTL (%v)", took, ttl)
	}
	if free := freeShards(); len(free) != 0 {
		t.Errorf("shards %v held by no one", free)
	}

	// Another joins, takes its half (the first gives it up), and dies
	// holding it.
	d := newRec("worker-d")
	var renewed time.Time
	waitFor(t, 10*time.Second, "a new worker holding half the shards", func() bool {
		d.lease(ctx)
		renewed = time.Now()
		time.Sleep(every)
		return len(d.shards()) == store.Shards/2 && len(view.get("worker-b")) == store.Shards/2
	})
	waitFor(t, 10*time.Second, "the survivor holding every shard", func() bool {
		return len(view.get("worker-b")) == store.Shards
	})
	t.Logf("the shards of a worker that died were all taken %v after its last renewal", time.Since(renewed))
	if took := time.Since(renewed); took > ttl+every+slack {
		t.Errorf("the shards of a worker that died were taken %v after its last renewal; want within the lease TTL (%v) and a round", took, ttl)
	}
	if took := time.Since(renewed); took < ttl-every {
		t.Errorf("the shards of a worker that died were taken %v after its last renewal, before its leases (%v) ran out", took, ttl)
	}
}

// The recovery's loop does the due work of the shards it takes, and stops
// with its context, giving its shards back at once.
func TestRecoveryLoop(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	e.charge(t, "task_lumen_1", time.Now().Add(-time.Second))
	r := e.recovery("w1", nil, nil)
	r.leaseEvery, r.pollEvery = 100*time.Millisecond, 20*time.Millisecond
	// Past the task's first queue check (see TestRecoveryFailsOverdueTasks).
	r.now = func() time.Time { return time.Now().Add(store.FirstQueueCheck + time.Second) }
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(rctx)
	}()
	waitFor(t, 10*time.Second, "the recovery loop failing the overdue task", func() bool {
		got, _ := e.tasks.Get(ctx, e.acct, "task_lumen_1")
		return got != nil && got.Status == task.Failed
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the recovery loop did not stop with its context")
	}
	all := make([]int, store.Shards)
	for i := range all {
		all[i] = i
	}
	if got, err := e.leases.TakeShards(ctx, "w2", all, time.Second); err != nil || len(got) != store.Shards {
		t.Errorf("another worker took %d shards at once (%v); want all %d, given back", len(got), err, store.Shards)
	}
}

// crashedOnce charges a task whose first run died, which a second run
// took over and started, and returns that run as an orphan: its takeover
// fails the task (it crashed its workers twice).
func (e *sweepEnv) crashedOnce(t *testing.T, id string) jobs.Orphan {
	t.Helper()
	ctx := context.Background()
	j := e.charge(t, id, time.Now().Add(time.Hour))
	if c, err := e.tasks.Start(ctx, e.acct, id, id); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	c, run, err := e.tasks.Takeover(ctx, e.acct, id, id, func(n int) string { return jobs.RunID(id, n) })
	if err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	if c, err := e.tasks.Start(ctx, e.acct, id, run); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	return jobs.Orphan{Run: run, Ref: jobs.RefOf(j)}
}

// sweepLoops runs n sweepers, each in its own lease-and-tick loop on the
// orphans' lease (as n workers do), taking over the orphans q lists, until
// ctx is done, and returns a function that waits for them.
func sweepLoops(ctx context.Context, e *sweepEnv, q *orphanQueue, n int, every time.Duration, round func(takenOver, poisoned int)) (wait func()) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		s := e.sweeper(q)
		wg.Go(func() {
			everyUnderLease(ctx, e.leases, "orphans", every, func(ctx context.Context) { round(s.takeOverOrphans(ctx)) })
		})
	}
	return wg.Wait
}

// Workers take orphans over one at a time: of many looking at once, one
// takes the lease and the task that crashed its workers twice is failed,
// and refunded, once.
func TestSweepOneWorkerAtATime(t *testing.T) {
	e := newSweepEnv(t)
	q := &orphanQueue{orphans: []jobs.Orphan{e.crashedOnce(t, "task_lumen_1")}}
	const every = 500 * time.Millisecond
	var mu sync.Mutex
	total, rounds := 0, 0
	count := func(_, poisoned int) {
		mu.Lock()
		defer mu.Unlock()
		total += poisoned
		rounds++
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := sweepLoops(ctx, e, q, 8, every, count)
	// The first tick: one of the eight takes the lease and sweeps.
	waitFor(t, 10*time.Second, "a sweeper taking the lease", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rounds > 0
	})
	cancel()
	wait()
	if rounds != 1 || total != 1 {
		t.Errorf("%d rounds failed %d tasks on the first tick of 8 sweepers; want 1 round failing 1", rounds, total)
	}
	if n := e.refunds(t); n != 1 {
		t.Errorf("%d refunds; want 1", n)
	}
	// The lease holds until it runs out: sweepers ticking meanwhile do
	// nothing, even with a new orphan.
	q = &orphanQueue{orphans: []jobs.Orphan{e.crashedOnce(t, "task_lumen_3")}}
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	sweepLoops(ctx, e, q, 8, 10*time.Millisecond, count)()
	if rounds != 1 || total != 1 {
		t.Errorf("rounds under another's lease: %d rounds in all failing %d tasks; want the first one only", rounds, total)
	}
	if got, _ := e.tasks.Get(context.Background(), e.acct, "task_lumen_3"); got.Status != task.Processing {
		t.Errorf("a task was swept under another's lease: %s", got.Status)
	}
	// Once it runs out, a sweeper takes the lease and sweeps it.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	wait = sweepLoops(ctx, e, q, 8, 10*time.Millisecond, func(int, int) {})
	waitFor(t, 10*time.Second, "the orphan taken over once the lease ran out", func() bool {
		got, _ := e.tasks.Get(context.Background(), e.acct, "task_lumen_3")
		return got.Status == task.Failed
	})
	cancel()
	wait()
	if n := e.refunds(t); n != 2 {
		t.Errorf("%d refunds; want 2 (each poisoned task once)", n)
	}
}

// The orphans' loop takes orphans over every period and stops with its
// context.
func TestRunSweeperLoop(t *testing.T) {
	e := newSweepEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	j := e.charge(t, "task_lumen_1", time.Now().Add(time.Hour))
	if c, err := e.tasks.Start(ctx, e.acct, j.TaskID, j.TaskID); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	q := &orphanQueue{orphans: []jobs.Orphan{{Run: j.TaskID, Ref: jobs.RefOf(j)}}}
	done := make(chan struct{})
	s := e.sweeper(q)
	go func() {
		everyUnderLease(ctx, e.leases, "orphans", 100*time.Millisecond, func(ctx context.Context) { s.takeOverOrphans(ctx) })
		close(done)
	}()
	waitFor(t, 10*time.Second, "the orphans' loop taking the task over", func() bool {
		return slices.Contains(q.runs(), j.TaskID+".r1")
	})
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

// orphanQueue lists fixed orphans and records the runs queued (and what
// each was queued with) and the tasks admitted.
type orphanQueue struct {
	orphans  []jobs.Orphan
	mu       sync.Mutex
	queued   []string
	refs     []jobs.Ref
	admitted []task.Admitted
	err      error
}

func (q *orphanQueue) EnqueueGenerateImage(_ context.Context, r jobs.Ref, run string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	q.queued = append(q.queued, run)
	q.refs = append(q.refs, r)
	return nil
}

func (q *orphanQueue) EnqueueAdmitted(_ context.Context, admitted []task.Admitted) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	q.admitted = append(q.admitted, admitted...)
	return nil
}

func (q *orphanQueue) Orphans(context.Context, []string) ([]jobs.Orphan, error) {
	return q.orphans, nil
}

func (q *orphanQueue) runs() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.queued...)
}

// A run whose worker died is handed to a new run, queued; the next round,
// with the orphan still listed (Asynq recovers it only later), queues that
// run again harmlessly and takes nothing over twice. A task whose runs
// crashed twice is failed instead, and its place admits the account's
// parked task.
func TestSweepTakesOverOrphans(t *testing.T) {
	e := newSweepEnvWith(t, store.Options{Share: 1})
	ctx := context.Background()
	j := e.chargeWith(t, "task_lumen_1", time.Now().Add(time.Hour), hooksWanted)
	parked, admitted := e.create(t, "task_lumen_2", time.Now().Add(time.Hour), task.Callback{})
	if admitted {
		t.Fatal("the account's second task was admitted with a share of 1")
	}
	if c, err := e.tasks.Start(ctx, e.acct, j.TaskID, j.TaskID); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	q := &orphanQueue{orphans: []jobs.Orphan{{Run: j.TaskID, Ref: jobs.RefOf(j)}}, err: errors.New("redis down")}
	s := e.sweeper(q)
	if takenOver, _ := s.takeOverOrphans(ctx); takenOver != 0 {
		t.Errorf("%d taken over with the queue down; want no takeover reported", takenOver)
	}
	q.err = nil
	takenOver, poisoned := s.takeOverOrphans(ctx)
	// The first round took the task over but could not queue the run; this
	// one queues it.
	if len(q.queued) != 1 || q.queued[0] != j.TaskID+".r1" {
		t.Fatalf("round (%d taken over, %d poisoned) queued %v; want the new run %s.r1", takenOver, poisoned, q.queued, j.TaskID)
	}
	// The new run is of the orphan's task, on its queue, by its deadline.
	if q.refs[0] != jobs.RefOf(j) {
		t.Errorf("the new run queued with %+v; want the orphan's %+v", q.refs[0], jobs.RefOf(j))
	}
	// The new run dies too: the second crash fails the task.
	if len(e.notes.got()) != 0 {
		t.Errorf("webhook events %v for a task taken over; want none", e.notes.got())
	}
	if len(q.admitted) != 0 {
		t.Errorf("admitted %+v while the task runs on", q.admitted)
	}
	if c, err := e.tasks.Start(ctx, e.acct, j.TaskID, j.TaskID+".r1"); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	q.orphans = []jobs.Orphan{{Run: j.TaskID + ".r1", Ref: jobs.RefOf(j)}}
	if _, poisoned := s.takeOverOrphans(ctx); poisoned != 1 {
		t.Fatalf("%d poisoned; want the task poisoned", poisoned)
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
	// Its place admitted the parked task, whose job the sweeper queued.
	// It is to be queued on its queue, by its deadline (the store counts it
	// jobs.CountMargin longer: jobs.Enqueuer.EnqueueAdmitted's run ends at
	// jobs.RunDeadline).
	if len(q.admitted) != 1 || q.admitted[0].TaskID != parked.TaskID || q.admitted[0].AccountID != e.acct || q.admitted[0].Queue != jobs.Queue(catalog.Standard) ||
		jobs.RunDeadline(q.admitted[0].Deadline).UnixMilli() != parked.Deadline.UnixMilli() {
		t.Errorf("admitted %+v; want %s with what its job is queued with", q.admitted, parked.TaskID)
	}
}
