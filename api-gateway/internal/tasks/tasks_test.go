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
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// queue records the jobs it is given, or fails.
type queue struct {
	mu        sync.Mutex
	jobs      []jobs.GenerateImage
	deadlines []time.Time
	err       error
	// block, when set, makes an enqueue wait for it to close, after
	// signalling entered.
	block, entered chan struct{}
}

func (q *queue) CancelRun(context.Context, string) error { return nil }

func (q *queue) QueueFinalHook(context.Context, jobs.HookOutbox, string, string, string) error {
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
	svc   *Service
	st    *store.Store
	q     *queue
	ids   *ids
	acct  string
	close func() // closes the service's Redis client
}

func newFixture(t *testing.T, credits int64) *fixture {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	st := store.New(rdb)
	a, err := st.CreateAccount(context.Background(), store.NewAccount{Name: "t", Credits: credits})
	if err != nil {
		t.Fatal(err)
	}
	prices, _ := pricing.Parse(pricing.Default)
	f := &fixture{st: st, q: &queue{entered: make(chan struct{})}, ids: &ids{}, acct: a.ID}
	// The service gets its own client, so a test can break it alone.
	svcRDB := srv.Client(t)
	f.svc = NewService(store.New(svcRDB), f.q, f.ids, prices, Config{Deadline: 10 * time.Minute, MaxInflight: 5})
	f.close = func() { _ = svcRDB.Close() }
	return f
}

func (f *fixture) balance(t *testing.T) int64 {
	t.Helper()
	a, err := f.st.Account(context.Background(), f.acct)
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
	id, err := f.svc.Create(ctx, f.acct, in)
	if err != nil {
		t.Fatal(err)
	}
	// The record: pending, charged the pro 4K price.
	rec, err := f.st.Task(ctx, f.acct, id)
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
		_, err := f.svc.Create(ctx, f.acct, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"})
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

func (l lostReply) CreateTask(ctx context.Context, t *task.Task, c store.Charge, job []byte) (int64, error) {
	if _, err := l.Store.CreateTask(ctx, t, c, job); err != nil {
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
			_ = f.st.SetAccountStatus(context.Background(), f.acct, store.Disabled)
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
			f.svc.store = lostReply{f.svc.store}
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
			id, err := f.svc.Create(context.Background(), f.acct, in)
			if err == nil || id != "" {
				t.Fatalf("Create = %q, %v; want an error", id, err)
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
	id, err := f.svc.Create(ctx, f.acct, task.Input{Model: std, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.svc.Get(ctx, f.acct, id); err != nil || got.ID != id {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	other, _ := f.st.CreateAccount(ctx, store.NewAccount{Name: "other"})
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
