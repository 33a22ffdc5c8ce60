package processor

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// unconfirmedStarts applies the first n Start calls but answers them
// with an error, as a start whose reply was lost, or that Redis applied but
// its replicas did not confirm (EASEL_REDIS_MIN_REPLICAS), is answered.
type unconfirmedStarts struct {
	Store
	n int
}

func (u *unconfirmedStarts) Start(ctx context.Context, acct, id, run string) (store.Started, error) {
	c, err := u.Store.Start(ctx, acct, id, run)
	if err == nil && u.n > 0 {
		u.n--
		return c, apperr.Transient(errors.New("store: not confirmed by enough replicas"), apperr.Unavailable, "try again")
	}
	return c, err
}

// A start that failed in reply only is no crash: the run hands the task
// back alive, and its retries start it again without counting one, however
// many times it happens (a failover can do it more than once).
func TestUnconfirmedStartIsNoCrash(t *testing.T) {
	calls := 0
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		calls++
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	f.proc.store = &unconfirmedStarts{Store: f.store, n: 3}
	ctx := context.Background()
	j := f.job(t, "task_lumen_60", std, nil)
	for retry := 0; retry < 3; retry++ {
		if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Retry: retry, MaxRetry: 5, Run: j.TaskID}); err == nil {
			t.Fatalf("attempt %d: no error from a start that was not confirmed", retry)
		}
	}
	if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Retry: 3, MaxRetry: 5, Run: j.TaskID}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, j.TaskID); got.Status != task.Completed || calls != 1 {
		t.Errorf("task %s (%+v) after %d generations; want completed after 1, not failed as a crash", got.Status, got.Failure, calls)
	}
}

// admitLog records the tasks whose admission a run's end passed on
// (Admitter), or fails.
type admitLog struct {
	mu  sync.Mutex
	got []task.Admitted
	err error
}

func (a *admitLog) EnqueueAdmitted(_ context.Context, admitted []task.Admitted) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, admitted...)
	return a.err
}

func (a *admitLog) admitted() []task.Admitted {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]task.Admitted(nil), a.got...)
}

// An account's fair share (EASEL_ACCOUNT_MAX_RUNNING 2): a third task of
// the account is parked, not queued; a job queued for it all the same is
// dropped at once, on its last try as on its first (it holds no worker
// and spends no retry, and the task stays parked); as soon as one of the
// first two ends, the run that ended it passes the third on to be queued
// (Admitter), and it runs. Another account's task runs at once meanwhile.
func TestAccountShare(t *testing.T) {
	var mu sync.Mutex
	var generated []string
	hold := map[string]chan struct{}{"task_lumen_70": make(chan struct{}), "task_lumen_71": make(chan struct{})}
	entered := make(chan string, 10)
	f := newFixtureWith(t, genFunc(func(_ context.Context, req imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
		mu.Lock()
		generated = append(generated, req.TaskID)
		mu.Unlock()
		entered <- req.TaskID
		if ch := hold[req.TaskID]; ch != nil {
			<-ch
		}
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}), store.Options{Share: 2})
	admit := &admitLog{}
	f.proc.Admitter = admit
	ctx := context.Background()
	ran := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(generated, id)
	}
	counts := func(acct string) (running, parked int64) {
		t.Helper()
		running, err := f.store.Running(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		if parked, err = f.store.Parked(ctx, acct); err != nil {
			t.Fatal(err)
		}
		return running, parked
	}

	// As the gateway's create, each joins its tier's queue: the queue its
	// job is queued on when it is admitted.
	queue := jobs.Queue(catalog.Standard)
	first, second := f.jobWith(t, "task_lumen_70", std, task.Callback{}, queue, nil), f.jobWith(t, "task_lumen_71", std, task.Callback{}, queue, nil)
	third := f.jobWith(t, "task_lumen_72", std, task.Callback{}, queue, func(in *task.Input) { in.Prompt = "the third task's prompt" })
	for _, j := range []jobs.GenerateImage{first, second} {
		if !f.created[j.TaskID].Admitted {
			t.Fatalf("%s was parked with the account's window empty", j.TaskID)
		}
	}
	if f.created[third.TaskID].Admitted {
		t.Fatalf("the account's third task was admitted with a share of 2")
	}
	if r, p := counts(f.acct); r != 2 || p != 1 {
		t.Fatalf("%d places held, %d parked; want 2 and 1", r, p)
	}

	// The first two run, and hold their places while they do.
	done := map[string]chan error{}
	for _, j := range []jobs.GenerateImage{first, second} {
		ch := make(chan error, 1)
		done[j.TaskID] = ch
		go func() { ch <- f.proc.Process(ctx, jobs.RefOf(j), Attempt{Run: j.TaskID, MaxRetry: 3}) }()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the account's first two tasks did not start")
		}
	}

	// A job of the parked task (queued early: an operator, a replay) is
	// dropped, whichever try it is: no error, so Asynq neither retries it
	// nor holds a worker for it.
	for _, at := range []Attempt{{Run: third.TaskID, MaxRetry: 3}, {Run: third.TaskID, Retry: 3, MaxRetry: 3}} {
		if err := f.proc.Process(ctx, jobs.RefOf(third), at); err != nil {
			t.Fatalf("Process of a parked task's job (%+v) = %v; want it dropped (nil)", at, err)
		}
	}
	if ran(third.TaskID) {
		t.Error("the parked task ran past its account's share")
	}
	if got := f.get(t, third.TaskID); got.Status != task.Pending {
		t.Errorf("the parked task is %s; want pending", got.Status)
	}
	if r, p := counts(f.acct); r != 2 || p != 1 {
		t.Errorf("after the parked task's job: %d places held, %d parked; want 2 and 1", r, p)
	}

	// Another account's task runs at once meanwhile.
	other, err := f.accounts.Create(ctx, account.Spec{Name: "other", Credits: startCredits})
	if err != nil {
		t.Fatal(err)
	}
	theirs := f.jobOf(t, other.ID, "task_lumen_80", std, task.Callback{}, "", nil)
	if !f.created[theirs.TaskID].Admitted {
		t.Fatal("another account's task was parked")
	}
	if err := f.proc.Process(ctx, jobs.RefOf(theirs), Attempt{Run: theirs.TaskID, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if got, err := f.store.Get(ctx, other.ID, theirs.TaskID); err != nil || got.Status != task.Completed {
		t.Fatalf("another account's task: %+v, %v; want completed while the first account's share is taken", got, err)
	}
	if got := admit.admitted(); len(got) != 0 {
		t.Errorf("admitted %+v before any of the account's tasks ended", got)
	}

	// The first ends: its place admits the third, which its run passes on.
	close(hold[first.TaskID])
	if err := <-done[first.TaskID]; err != nil {
		t.Fatal(err)
	}
	got := admit.admitted()
	if len(got) != 1 || got[0].TaskID != third.TaskID || got[0].AccountID != f.acct {
		t.Fatalf("admitted %+v; want %s", got, third.TaskID)
	}
	// What its job is queued with (jobs.Enqueuer.EnqueueAdmitted): its
	// queue, and its deadline (the store counts it until jobs.CountMargin
	// later). The job carries no more: the run reads the input from the
	// record.
	if got[0].Queue != queue || jobs.RunDeadline(got[0].Deadline).UnixMilli() != third.Deadline.UnixMilli() {
		t.Fatalf("the admitted task %+v; want queue %s, deadline %v", got[0], queue, third.Deadline)
	}
	j := jobs.Ref{AccountID: got[0].AccountID, TaskID: got[0].TaskID, Queue: got[0].Queue, Deadline: jobs.RunDeadline(got[0].Deadline)}
	if r, p := counts(f.acct); r != 2 || p != 0 {
		t.Errorf("after the first ended: %d places held, %d parked; want 2 (the second and the third) and 0", r, p)
	}
	if err := f.proc.Process(ctx, j, Attempt{Run: j.TaskID, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, third.TaskID); got.Status != task.Completed || !ran(third.TaskID) {
		t.Errorf("the admitted task is %s; want completed", got.Status)
	}
	if in := f.input(t, third.TaskID); !reflect.DeepEqual(in, third.Input) {
		t.Errorf("the admitted task ran the input %+v; want its own, %+v", in, third.Input)
	}
	close(hold[second.TaskID])
	if err := <-done[second.TaskID]; err != nil {
		t.Fatal(err)
	}
	if r, p := counts(f.acct); r != 0 || p != 0 {
		t.Errorf("%d places held, %d parked after every task ended; want none", r, p)
	}
	if n := len(admit.admitted()); n != 1 {
		t.Errorf("%d tasks admitted in all; want 1", n)
	}
}

// Every way a run ends its task frees its place: completed, failed, or
// found poisoned, the run passes the account's next parked task on to be
// queued; if that cannot be queued the run still ends well (the task's
// queue check queues it later).
func TestEveryEndAdmitsTheNextTask(t *testing.T) {
	ok := func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}
	blocked := func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return nil, apperr.New(task.ContentBlocked, "blocked")
	}
	tests := []struct {
		name     string
		gen      genFunc
		crashes  int
		queueErr error
		status   task.Status
	}{
		{"completed", ok, 0, nil, task.Completed},
		{"failed", blocked, 0, nil, task.Failed},
		{"poisoned", ok, 2, nil, task.Failed},
		{"completed, the admitted task not queued", ok, 0, errors.New("queue down"), task.Completed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureWith(t, tt.gen, store.Options{Share: 1})
			admit := &admitLog{err: tt.queueErr}
			f.proc.Admitter = admit
			ctx := context.Background()
			queue := jobs.Queue(catalog.Standard)
			j := f.jobWith(t, "task_lumen_60", std, task.Callback{}, queue, nil)
			next := f.jobWith(t, "task_lumen_61", std, task.Callback{}, queue, nil)
			if !f.created[j.TaskID].Admitted || f.created[next.TaskID].Admitted {
				t.Fatalf("creations %+v; want the first admitted, the second parked", f.created)
			}
			for range tt.crashes {
				if c, err := f.store.Start(ctx, f.acct, j.TaskID, j.TaskID); err != nil || c.Outcome != task.Applied {
					t.Fatal(c, err)
				}
			}
			if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Run: j.TaskID, Retry: tt.crashes, MaxRetry: 3}); err != nil {
				t.Fatal(err)
			}
			if got := f.get(t, j.TaskID); got.Status != tt.status {
				t.Fatalf("task %s; want %s", got.Status, tt.status)
			}
			if got := admit.admitted(); len(got) != 1 || got[0].TaskID != next.TaskID || got[0].AccountID != f.acct || got[0].Queue != queue ||
				jobs.RunDeadline(got[0].Deadline).UnixMilli() != next.Deadline.UnixMilli() {
				t.Errorf("admitted %+v; want %s with what its job is queued with (queue %s, deadline %v)", got, next.TaskID, queue, next.Deadline)
			}
			if n, _ := f.store.Parked(ctx, f.acct); n != 0 {
				t.Errorf("%d tasks parked; want 0", n)
			}
		})
	}
}
