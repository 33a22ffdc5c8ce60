package tasks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/api-gateway/internal/pricing"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// queue records the jobs, the tasks admitted, the webhook deliveries and
// the stopped runs it is given, or fails.
type queue struct {
	mu        sync.Mutex
	jobs      []jobs.Ref
	deadlines []time.Time
	admitted  []task.Admitted
	hooks     []jobs.DeliverWebhook
	outboxes  []jobs.Outbox
	stopped   []string
	err       error
	// block, when set, makes an enqueue wait for it to close, after
	// signalling entered.
	block, entered chan struct{}
}

func (q *queue) CancelRun(_ context.Context, run string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = append(q.stopped, run)
	return nil
}

func (q *queue) QueueHook(_ context.Context, o jobs.Outbox, d jobs.DeliverWebhook) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.hooks = append(q.hooks, d)
	q.outboxes = append(q.outboxes, o)
	return nil
}

func (q *queue) EnqueueGenerateImage(_ context.Context, j jobs.Ref, run string) error {
	if q.block != nil {
		close(q.entered)
		<-q.block
		return errors.New("the gateway is gone")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	if run != j.TaskID {
		return errors.New("the gateway queues run 0")
	}
	q.jobs = append(q.jobs, j)
	q.deadlines = append(q.deadlines, j.Deadline)
	return nil
}

func (q *queue) EnqueueAdmitted(_ context.Context, admitted []task.Admitted) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	q.admitted = append(q.admitted, admitted...)
	return nil
}

func (q *queue) admittedIDs() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, a := range q.admitted {
		out = append(out, a.TaskID)
	}
	return out
}

type ids struct {
	n   int
	err error
}

func (g *ids) New() (string, error) {
	g.n++
	return "task_lumen_" + strings.Repeat("1", g.n), g.err
}

var (
	std = catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}
	pro = catalog.Model{ID: "lumen-3-pro-image-preview", Tier: catalog.Pro}
)

type fixture struct {
	svc      *Service
	st       *store.Tasks
	accounts *store.Accounts
	q        *queue
	ids      *ids
	acct     string
	close    func() // closes the service's Redis client
}

func newFixture(t *testing.T, credits int64) *fixture {
	t.Helper()
	return newFixtureWith(t, credits, store.Options{})
}

// newFixtureWith is newFixture with the store's options o (its share).
func newFixtureWith(t *testing.T, credits int64, o store.Options) *fixture {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	db := store.NewDB(rdb, o)
	accounts := store.NewAccounts(db)
	a, err := accounts.Create(context.Background(), account.Spec{Name: "t", Credits: credits})
	if err != nil {
		t.Fatal(err)
	}
	prices, _ := pricing.Parse(pricing.Default)
	f := &fixture{st: store.NewTasks(db), accounts: accounts, q: &queue{entered: make(chan struct{})}, ids: &ids{}, acct: a.ID}
	// The service gets its own client, so a test can break it alone.
	svcRDB := srv.Client(t)
	svcDB := store.NewDB(svcRDB, o)
	f.svc = NewService(Deps{
		Store: store.NewTasks(svcDB), Queues: store.NewQueues(svcDB), Outbox: store.NewHooks(svcDB),
		Queue: f.q, IDs: f.ids, Prices: prices,
	}, Config{Deadline: 10 * time.Minute, MaxInflight: 5})
	f.close = func() { _ = svcRDB.Close() }
	return f
}

func (f *fixture) balance(t *testing.T) int64 {
	t.Helper()
	a, err := f.accounts.Get(context.Background(), f.acct)
	if err != nil {
		t.Fatal(err)
	}
	return a.Credits
}

func TestCreate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 100)
	ctx := context.Background()
	in := task.Input{Model: pro, Prompt: "a cat", AspectRatio: "16:9", ImageSize: "4K"}
	before := time.Now()
	c, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, in, task.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	id := c.ID
	if c.Price != 24 || c.Replayed {
		t.Errorf("Create = %+v; want price 24, not replayed", c)
	}
	// The record: pending, charged the pro 4K price.
	rec, err := f.st.Get(ctx, f.acct, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != task.Pending || rec.Model != pro.ID || rec.Price != 24 || rec.Type != task.Type || rec.CreateTime.Before(before.Truncate(time.Millisecond)) {
		t.Errorf("record %+v", rec)
	}
	if b := f.balance(t); b != 100-24 {
		t.Errorf("balance %d; want 76", b)
	}
	// The job: the same task, on its tier's queue, the deadline from now.
	if len(f.q.jobs) != 1 {
		t.Fatalf("%d jobs queued", len(f.q.jobs))
	}
	j := f.q.jobs[0]
	if j.TaskID != id || j.AccountID != f.acct || j.Queue != jobs.Queue(pro.Tier) {
		t.Errorf("job %+v", j)
	}
	if d := f.q.deadlines[0].Truncate(time.Millisecond).Sub(rec.CreateTime); d != 10*time.Minute {
		t.Errorf("deadline %v after creation; want 10m", d)
	}
	if n, _ := f.st.Inflight(ctx, f.acct); n != 1 {
		t.Errorf("%d in flight; want 1", n)
	}
	// Its queue check is due after store.FirstQueueCheck, not before.
	if c := f.checks(t, time.Now()); len(c) != 0 {
		t.Errorf("queue checks due at once: %+v", c)
	}
	if c := f.checks(t, time.Now().Add(store.FirstQueueCheck)); len(c) != 1 || c[0].TaskID != id || c[0].Queue != jobs.Queue(pro.Tier) {
		t.Errorf("queue checks due after %v: %+v; want the task, on its queue", store.FirstQueueCheck, c)
	}
	// The input as given is kept with the record: its run reads it back
	// when it starts the task, with the model once, the record's (the
	// input kept names none).
	st, err := f.st.Start(ctx, f.acct, id, jobs.RunID(id, 0))
	if err != nil || st.Outcome != task.Applied {
		t.Fatalf("Start = %+v, %v", st, err)
	}
	if st.Model != pro.ID || bytes.Contains(st.Input, []byte(pro.ID)) {
		t.Errorf("the run starts with the model %q and the input %q; want %s once, from the record", st.Model, st.Input, pro.ID)
	}
	got, err := jobs.DecodeInput(st.Input, catalog.Model{ID: st.Model, Tier: jobs.QueueTier(jobs.Queue(pro.Tier))})
	if err != nil || got.Prompt != "a cat" || got.ImageSize != "4K" || got.AspectRatio != "16:9" || got.Model != pro {
		t.Errorf("the task's input %+v, %v", got, err)
	}
	if !st.Created.Equal(rec.CreateTime) || st.Deadline.Before(j.Deadline.Truncate(time.Millisecond)) {
		t.Errorf("started a task created %v, due %v; want created %v, due no sooner than its job's %v", st.Created, st.Deadline, rec.CreateTime, j.Deadline)
	}
}

// checks returns the queue checks of the account's tasks due by at (the
// recovery's due work; reading moves them on).
func (f *fixture) checks(t *testing.T, at time.Time) []store.DueEntry {
	t.Helper()
	w, err := f.st.Due(context.Background(), store.ShardOf(f.acct), at, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.DueEntry
	for _, e := range w.Entries {
		if e.Kind == store.DueCheck {
			out = append(out, e)
		}
	}
	return out
}

// A gateway that dies after charging and before queueing leaves the task
// with what its job needs for the reconciler (its queue check: its queue
// and deadline; its record: its input): here the queue never answers.
func TestCreateLeavesTheJobForTheReconciler(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 100)
	ctx, cancel := context.WithCancel(context.Background())
	f.q.block = make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}, task.Idempotency{})
		errc <- err
	}()
	<-f.q.entered // charged and recorded; the enqueue hangs: the process "dies" here
	u := f.checks(t, time.Now().Add(store.FirstQueueCheck))
	if len(u) != 1 {
		t.Fatalf("queue checks %+v; want the task's", u)
	}
	if c := u[0]; c.Queue != jobs.Queue(std.Tier) || c.Run != "" || c.Deadline.IsZero() {
		t.Errorf("queue check %+v; want the task's queue, its first run, its deadline", c)
	}
	// What the reconciler queues is a job that Asynq takes...
	ref := jobs.Ref{AccountID: u[0].AccountID, TaskID: u[0].TaskID, Queue: u[0].Queue, Deadline: u[0].Deadline}
	if _, err := jobs.NewGenerateImageTask(ref, jobs.RunID(u[0].TaskID, 0)); err != nil {
		t.Errorf("the job of queue check %+v: %v", u[0], err)
	}
	// ...and its run finds the input kept with the record.
	st, err := f.st.Start(context.Background(), f.acct, u[0].TaskID, jobs.RunID(u[0].TaskID, 0))
	if err != nil || st.Outcome != task.Applied || len(st.Input) == 0 {
		t.Fatalf("Start = %+v, %v; want the task's input kept", st, err)
	}
	in, err := jobs.DecodeInput(st.Input, catalog.Model{ID: st.Model, Tier: jobs.QueueTier(u[0].Queue)})
	if err != nil || in.Prompt != "p" || in.Model != std || st.Deadline.IsZero() {
		t.Errorf("stored input %+v (deadline %v), %v", in, st.Deadline, err)
	}
	cancel()
	close(f.q.block)
	<-errc
}

// lostReply is a store whose creates run but whose replies are lost, as a
// read timeout after Redis ran the script.
type lostReply struct{ Store }

func (l lostReply) Create(ctx context.Context, t *task.Task, c task.Charge, input []byte) (store.Creation, error) {
	if _, err := l.Store.Create(ctx, t, c, input); err != nil {
		return store.Creation{}, err
	}
	return store.Creation{}, fmt.Errorf("store: create %s: read tcp: i/o timeout", t.ID)
}

func TestCreateFailures(t *testing.T) {
	t.Parallel()
	in := task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}
	tests := []struct {
		name    string
		credits int64
		setup   func(f *fixture)
		check   func(t *testing.T, err error)
		balance int64 // after
	}{
		{"insufficient credits passes the store's refusal through", 3, nil, func(t *testing.T, err error) {
			var e *apperr.InsufficientCreditsError
			if !errors.As(err, &e) || e.Price != 4 || e.Balance != 3 {
				t.Errorf("err %v; want insufficient credits, price 4, balance 3", err)
			}
		}, 3},
		{"a disabled account", 100, func(f *fixture) {
			_ = f.accounts.SetStatus(context.Background(), f.acct, account.Disabled)
		}, func(t *testing.T, err error) {
			if !errors.Is(err, apperr.ErrAccountDisabled) {
				t.Errorf("err %v", err)
			}
		}, 100},
		{"Redis unreachable is unavailable", 100, func(f *fixture) { f.close() }, func(t *testing.T, err error) {
			if apperr.CodeOf(err) != apperr.Unavailable || !apperr.IsRetryable(err) {
				t.Errorf("err %v; want a retryable Unavailable", err)
			}
		}, 100},
		{"the queue down: unavailable, aborted and refunded", 100, func(f *fixture) { f.q.err = errors.New("connection refused") }, func(t *testing.T, err error) {
			if apperr.CodeOf(err) != apperr.Unavailable || !strings.Contains(apperr.MessageOf(err), "queue") {
				t.Errorf("err %v; want Unavailable naming the queue", err)
			}
		}, 100},
		{"the store's reply lost after its script ran: unavailable, undone", 100, func(f *fixture) {
			f.svc.Store = lostReply{f.svc.Store}
		}, func(t *testing.T, err error) {
			if apperr.CodeOf(err) != apperr.Unavailable || !apperr.IsRetryable(err) {
				t.Errorf("err %v; want a retryable Unavailable", err)
			}
		}, 100},
		{"no task id", 100, func(f *fixture) { f.ids.err = errors.New("entropy") }, func(t *testing.T, err error) {
			if apperr.CodeOf(err) != apperr.Internal {
				t.Errorf("err %v; want Internal", err)
			}
		}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.credits)
			if tt.setup != nil {
				tt.setup(f)
			}
			c, err := f.svc.Create(context.Background(), task.Caller{AccountID: f.acct}, in, task.Idempotency{})
			if err == nil || c != (task.Created{}) {
				t.Fatalf("Create = %+v, %v; want an error", c, err)
			}
			tt.check(t, err)
			if b := f.balance(t); b != tt.balance {
				t.Errorf("balance %d; want %d", b, tt.balance)
			}
			if n, _ := f.st.Inflight(context.Background(), f.acct); n != 0 {
				t.Errorf("%d tasks left in flight", n)
			}
			if f.q.err == nil && len(f.q.jobs) != 0 {
				t.Errorf("a job was queued: %+v", f.q.jobs)
			}
		})
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 100)
	ctx := context.Background()
	c, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}, task.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	id := c.ID
	if got, err := f.svc.Get(ctx, f.acct, id); err != nil || got.ID != id {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	other, _ := f.accounts.Create(ctx, account.Spec{Name: "other"})
	for name, acct := range map[string]string{"another account's": other.ID, "an unknown account's": "acct_none"} {
		if _, err := f.svc.Get(ctx, acct, id); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("%s view: %v; want NotFound", name, err)
		}
	}
	f.close()
	if _, err := f.svc.Get(ctx, f.acct, id); apperr.CodeOf(err) != apperr.Unavailable {
		t.Errorf("with Redis gone: %v; want Unavailable", err)
	}
}

// Cancel refunds a pending task and queues the task.canceled webhook its
// callback wants, through the outbox; a processing one has its run
// stopped, and is not refunded.
func TestCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 100)
	ctx := context.Background()
	in := task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K",
		Callback: task.Callback{URL: "https://hooks.example.com/x", Events: []string{task.EventCanceled}}}
	pending, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, in, task.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.svc.Cancel(ctx, f.acct, pending.ID)
	if err != nil || c.Was != task.Pending || c.Refunded != pending.Price || !c.Hooked || c.Run != "" {
		t.Fatalf("Cancel(pending) = %+v, %v; want pending, refunded %d, hooked, no run", c, err, pending.Price)
	}
	if b := f.balance(t); b != 100 {
		t.Errorf("balance %d; want 100", b)
	}
	want := jobs.DeliverWebhook{AccountID: f.acct, TaskID: pending.ID, Event: task.EventCanceled}
	if len(f.q.hooks) != 1 || f.q.hooks[0] != want || f.q.outboxes[0] != f.svc.Outbox {
		t.Errorf("webhooks queued %+v; want %+v through the service's outbox", f.q.hooks, want)
	}
	if len(f.q.stopped) != 0 {
		t.Errorf("runs stopped for a pending task: %v", f.q.stopped)
	}

	processing, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}, task.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	run := jobs.RunID(processing.ID, 0)
	if ch, err := f.st.Start(ctx, f.acct, processing.ID, run); err != nil || ch.Outcome != task.Applied {
		t.Fatalf("Start = %+v, %v", ch, err)
	}
	c, err = f.svc.Cancel(ctx, f.acct, processing.ID)
	if err != nil || c.Was != task.Processing || c.Refunded != 0 || c.Hooked || c.Run != run {
		t.Fatalf("Cancel(processing) = %+v, %v; want processing, not refunded, no webhook, run %s", c, err, run)
	}
	if len(f.q.stopped) != 1 || f.q.stopped[0] != run {
		t.Errorf("runs stopped %v; want [%s]", f.q.stopped, run)
	}
	if len(f.q.hooks) != 1 {
		t.Errorf("a webhook queued for a task whose callback wants none: %+v", f.q.hooks)
	}
	if b := f.balance(t); b != 100-processing.Price {
		t.Errorf("balance %d; want %d", b, 100-processing.Price)
	}

	// Final: a conflict; another account's: not found.
	if _, err := f.svc.Cancel(ctx, f.acct, pending.ID); apperr.CodeOf(err) != apperr.Conflict {
		t.Errorf("Cancel(canceled) = %v; want Conflict", err)
	}
	if _, err := f.svc.Cancel(ctx, "acct_none", processing.ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("another account's Cancel = %v; want NotFound", err)
	}
}

// A task its account's window has no place for waits parked: the create
// stands (charged, pending) with no job queued and no queue check; the
// end of an admitted task (here its cancel) admits it, and the service
// queues its job. If that cannot be queued, the cancel stands all the
// same and the admitted task's queue check is due: the recovery queues it.
func TestCreateParkedThenAdmitted(t *testing.T) {
	t.Parallel()
	for _, queueDown := range []bool{false, true} {
		t.Run(map[bool]string{false: "queued", true: "queue down"}[queueDown], func(t *testing.T) {
			f := newFixtureWith(t, 100, store.Options{Share: 1})
			ctx := context.Background()
			in := task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}
			first, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, in, task.Idempotency{})
			if err != nil {
				t.Fatal(err)
			}
			parked, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, in, task.Idempotency{})
			if err != nil || parked.ID == "" || parked.Price != 4 || parked.Replayed {
				t.Fatalf("Create past the account's share = %+v, %v; want it to stand, charged 4", parked, err)
			}
			if rec, err := f.st.Get(ctx, f.acct, parked.ID); err != nil || rec.Status != task.Pending {
				t.Fatalf("the parked task's record %+v, %v; want pending", rec, err)
			}
			if b := f.balance(t); b != 100-8 {
				t.Errorf("balance %d; want 92 (both charged)", b)
			}
			if len(f.q.jobs) != 1 || f.q.jobs[0].TaskID != first.ID {
				t.Errorf("jobs queued %+v; want the first task's only", f.q.jobs)
			}
			if n, _ := f.st.Parked(ctx, f.acct); n != 1 {
				t.Errorf("%d tasks parked; want 1", n)
			}
			if c := f.checks(t, time.Now().Add(store.FirstQueueCheck)); len(c) != 1 || c[0].TaskID != first.ID {
				t.Errorf("queue checks %+v; want the first task's only (a parked task has no job to check)", c)
			}

			if queueDown {
				f.q.err = errors.New("connection refused")
			}
			c, err := f.svc.Cancel(ctx, f.acct, first.ID)
			if err != nil || c.Was != task.Pending {
				t.Fatalf("Cancel = %+v, %v", c, err)
			}
			if n, _ := f.st.Running(ctx, f.acct); n != 1 {
				t.Errorf("%d places held after the cancel; want 1 (the task it admitted)", n)
			}
			if n, _ := f.st.Parked(ctx, f.acct); n != 0 {
				t.Errorf("%d tasks parked after the cancel; want 0", n)
			}
			if queueDown {
				if got := f.q.admittedIDs(); len(got) != 0 {
					t.Errorf("admitted %v queued with the queue down", got)
				}
				if c := f.checks(t, time.Now().Add(store.FirstQueueCheck+time.Second)); len(c) != 1 || c[0].TaskID != parked.ID {
					t.Errorf("queue checks %+v; want the admitted task's", c)
				}
				return
			}
			if got := f.q.admittedIDs(); len(got) != 1 || got[0] != parked.ID {
				t.Fatalf("admitted %v; want [%s]", got, parked.ID)
			}
			a := f.q.admitted[0]
			if a.TaskID != parked.ID || a.AccountID != f.acct || a.Queue != jobs.Queue(std.Tier) || a.Deadline.IsZero() {
				t.Errorf("the admitted task's job %+v", a)
			}
			ref := jobs.Ref{AccountID: a.AccountID, TaskID: a.TaskID, Queue: a.Queue, Deadline: a.Deadline}
			if _, err := jobs.NewGenerateImageTask(ref, jobs.RunID(a.TaskID, 0)); err != nil {
				t.Errorf("the admitted task's job %+v: %v", a, err)
			}
			st, err := f.st.Start(ctx, f.acct, parked.ID, jobs.RunID(parked.ID, 0))
			if err != nil || st.Outcome != task.Applied {
				t.Fatalf("Start(admitted) = %+v, %v", st, err)
			}
			if in, err := jobs.DecodeInput(st.Input, catalog.Model{ID: st.Model, Tier: jobs.QueueTier(a.Queue)}); err != nil || in.Prompt != "p" || in.Model != std || st.Deadline.IsZero() {
				t.Errorf("the admitted task's input %+v (deadline %v), %v", in, st.Deadline, err)
			}
		})
	}
}

// The undo of a create whose job could not be queued frees its place: the
// task parked behind it meanwhile is admitted, and its job queued.
func TestAbortAdmitsTheNextTask(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, 100, store.Options{Share: 1})
	ctx := context.Background()
	in := task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}
	f.q.block = make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, in, task.Idempotency{})
		errc <- err
	}()
	<-f.q.entered // the first is admitted; its enqueue hangs
	parked, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, in, task.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	close(f.q.block) // the first's enqueue fails: it is undone
	if err := <-errc; apperr.CodeOf(err) != apperr.Unavailable {
		t.Fatalf("the first create: %v; want Unavailable", err)
	}
	if got := f.q.admittedIDs(); len(got) != 1 || got[0] != parked.ID {
		t.Errorf("admitted %v; want [%s]", got, parked.ID)
	}
	if b := f.balance(t); b != 100-4 {
		t.Errorf("balance %d; want 96 (the first refunded)", b)
	}
	if n, _ := f.st.Running(ctx, f.acct); n != 1 {
		t.Errorf("%d places held; want 1 (the task admitted)", n)
	}
	if n, _ := f.st.Inflight(ctx, f.acct); n != 1 {
		t.Errorf("%d tasks in flight; want 1", n)
	}
}

// heldStore is a store whose create's reply is lost (after the create ran,
// or before it reached Redis), with what happens meanwhile (a worker
// starts the task), and whose undo may be lost too.
type heldStore struct {
	Store
	ran       bool               // the create reached Redis
	meanwhile func(t *task.Task) // before the reply is lost
	abortErr  error              // the undo's failure, if any
}

func (h heldStore) Create(ctx context.Context, t *task.Task, c task.Charge, input []byte) (store.Creation, error) {
	if h.ran {
		if _, err := h.Store.Create(ctx, t, c, input); err != nil {
			return store.Creation{}, err
		}
	}
	if h.meanwhile != nil {
		h.meanwhile(t)
	}
	return store.Creation{}, fmt.Errorf("store: create %s: read tcp: i/o timeout", t.ID)
}

func (h heldStore) Abort(ctx context.Context, accountID, taskID, idemKey string) (bool, []task.Admitted, error) {
	if h.abortErr != nil {
		return false, nil, h.abortErr
	}
	return h.Store.Abort(ctx, accountID, taskID, idemKey)
}

// A create whose reply is lost is answered as its undo leaves it, never
// "not created" for a task that exists: undone or never
// made (the undo's tombstone keeps it so), not created; gone on, created;
// the undo lost too, outcome unknown with the task's id, and a query after
// its settled time tells.
func TestCreateWithItsReplyLost(t *testing.T) {
	t.Parallel()
	in := task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}
	timeout := errors.New("store: abort: i/o timeout")
	for _, tt := range []struct {
		name    string
		held    func(f *fixture) heldStore
		created bool // answered created
		unknown bool // answered outcome unknown
		exists  bool // the task exists after
	}{
		{"ran, undone", func(f *fixture) heldStore { return heldStore{ran: true} }, false, false, false},
		{"never ran, undone", func(f *fixture) heldStore { return heldStore{} }, false, false, false},
		{"ran, and a worker started it", func(f *fixture) heldStore {
			return heldStore{ran: true, meanwhile: func(tk *task.Task) {
				if st, err := f.st.Start(context.Background(), tk.AccountID, tk.ID, jobs.RunID(tk.ID, 0)); err != nil || st.Outcome != task.Applied {
					t.Fatalf("Start = %+v, %v", st, err)
				}
			}}
		}, true, false, true},
		{"ran, the undo lost", func(f *fixture) heldStore { return heldStore{ran: true, abortErr: timeout} }, false, true, true},
		{"never ran, the undo lost", func(f *fixture) heldStore { return heldStore{abortErr: timeout} }, false, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 100)
			h := tt.held(f)
			h.Store = f.svc.Store
			f.svc.Store = h
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			c, err := f.svc.Create(ctx, task.Caller{AccountID: f.acct}, in, task.Idempotency{})
			var unknown *apperr.OutcomeUnknownError
			switch {
			case tt.created:
				if err != nil || c.ID == "" {
					t.Fatalf("Create = %+v, %v; want the task, created", c, err)
				}
			case tt.unknown:
				if !errors.As(err, &unknown) || unknown.TaskID == "" || apperr.CodeOf(err) != apperr.OutcomeUnknown {
					t.Fatalf("Create = %+v, %v; want outcome unknown naming the task", c, err)
				}
				if min := start.Add(time.Second + store.ClockSkew); unknown.SettledBy.Before(min) {
					t.Errorf("settled by %v; want no sooner than the create's own bound %v", unknown.SettledBy, min)
				}
			default:
				if apperr.CodeOf(err) != apperr.Unavailable || !strings.Contains(apperr.MessageOf(err), "not created") {
					t.Fatalf("Create = %+v, %v; want unavailable, not created", c, err)
				}
			}
			n, _ := f.st.Inflight(context.Background(), f.acct)
			if (n == 1) != tt.exists {
				t.Errorf("%d tasks in flight; want the task to exist: %v", n, tt.exists)
			}
			if unknown != nil {
				_, gerr := f.st.Get(context.Background(), f.acct, unknown.TaskID)
				if (gerr == nil) != tt.exists {
					t.Errorf("a query of the unknown task: %v; want found %v", gerr, tt.exists)
				}
			}
			want := int64(100)
			if tt.exists {
				want = 96
			}
			if b := f.balance(t); b != want {
				t.Errorf("balance %d; want %d", b, want)
			}
		})
	}
}
