package tasks

import (
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

// queue records the jobs, the webhook deliveries and the stopped runs it
// is given, or fails.
type queue struct {
	mu        sync.Mutex
	jobs      []jobs.GenerateImage
	deadlines []time.Time
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

func (q *queue) EnqueueGenerateImage(_ context.Context, j jobs.GenerateImage, run string) error {
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
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	db := store.NewDB(rdb, store.Options{})
	accounts := store.NewAccounts(db)
	a, err := accounts.Create(context.Background(), account.Spec{Name: "t", Credits: credits})
	if err != nil {
		t.Fatal(err)
	}
	prices, _ := pricing.Parse(pricing.Default)
	f := &fixture{st: store.NewTasks(db), accounts: accounts, q: &queue{entered: make(chan struct{})}, ids: &ids{}, acct: a.ID}
	// The service gets its own client, so a test can break it alone.
	svcRDB := srv.Client(t)
	svcDB := store.NewDB(svcRDB, store.Options{})
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
	f := newFixture(t, 100)
	ctx := context.Background()
	in := task.Input{Model: pro, Prompt: "a cat", AspectRatio: "16:9", ImageSize: "4K"}
	before := time.Now()
	c, err := f.svc.Create(ctx, f.acct, in, task.Idempotency{})
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
	// The job: the same task, the input as given, the deadline from now.
	if len(f.q.jobs) != 1 {
		t.Fatalf("%d jobs queued", len(f.q.jobs))
	}
	j := f.q.jobs[0]
	if j.TaskID != id || j.AccountID != f.acct || j.Input.Prompt != "a cat" || j.Input.ImageSize != "4K" || j.Input.AspectRatio != "16:9" || j.Input.Model != pro {
		t.Errorf("job %+v", j)
	}
	if d := f.q.deadlines[0].Sub(j.CreateTime); d != 10*time.Minute {
		t.Errorf("deadline %v after creation; want 10m", d)
	}
	if n, _ := f.st.Inflight(ctx, f.acct); n != 1 {
		t.Errorf("%d in flight; want 1", n)
	}
	// Its queue check is due after store.FirstQueueCheck, not before.
	if c, _ := f.st.QueueChecks(ctx, time.Now(), 10); len(c) != 0 {
		t.Errorf("queue checks due at once: %+v", c)
	}
	if c, _ := f.st.QueueChecks(ctx, time.Now().Add(store.FirstQueueCheck), 10); len(c) != 1 || c[0].TaskID != id {
		t.Errorf("queue checks due after %v: %+v; want the task", store.FirstQueueCheck, c)
	}
}

// A gateway that dies after charging and before queueing leaves the task
// with its job for the reconciler: here the queue never answers.
func TestCreateLeavesTheJobForTheReconciler(t *testing.T) {
	f := newFixture(t, 100)
	ctx, cancel := context.WithCancel(context.Background())
	f.q.block = make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := f.svc.Create(ctx, f.acct, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}, task.Idempotency{})
		errc <- err
	}()
	<-f.q.entered // charged and recorded; the enqueue hangs: the process "dies" here
	u, err := f.st.QueueChecks(context.Background(), time.Now().Add(store.FirstQueueCheck), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(u) != 1 || !u[0].Pending || len(u[0].Job) == 0 {
		t.Fatalf("QueueChecks = %+v; want the task with its job", u)
	}
	j, err := jobs.DecodeGenerateImage(u[0].Job)
	if err != nil || j.TaskID != u[0].TaskID || j.Input.Prompt != "p" || j.Deadline.IsZero() {
		t.Errorf("stored job %+v, %v", j, err)
	}
	cancel()
	close(f.q.block)
	<-errc
}

// lostReply is a store whose creates run but whose replies are lost, as a
// read timeout after Redis ran the script.
type lostReply struct{ Store }

func (l lostReply) Create(ctx context.Context, t *task.Task, c task.Charge, job []byte) (int64, error) {
	if _, err := l.Store.Create(ctx, t, c, job); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("store: create %s: read tcp: i/o timeout", t.ID)
}

func TestCreateFailures(t *testing.T) {
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
			c, err := f.svc.Create(context.Background(), f.acct, in, task.Idempotency{})
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
	f := newFixture(t, 100)
	ctx := context.Background()
	c, err := f.svc.Create(ctx, f.acct, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}, task.Idempotency{})
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
	f := newFixture(t, 100)
	ctx := context.Background()
	in := task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K",
		Callback: task.Callback{URL: "https://hooks.example.com/x", Events: []string{task.EventCanceled}}}
	pending, err := f.svc.Create(ctx, f.acct, in, task.Idempotency{})
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

	processing, err := f.svc.Create(ctx, f.acct, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}, task.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	run := jobs.RunID(processing.ID, 0)
	if ch, err := f.st.Start(ctx, f.acct, processing.ID, run, store.Place{}); err != nil || ch.Outcome != task.Applied {
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
