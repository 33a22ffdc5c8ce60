package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
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

func (u *unconfirmedStarts) Start(ctx context.Context, acct, id, run string, p store.Place) (store.Change, error) {
	c, err := u.Store.Start(ctx, acct, id, run, p)
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
		if err := f.proc.Process(ctx, j, Attempt{Retry: retry, MaxRetry: 5, Run: j.TaskID}); err == nil {
			t.Fatalf("attempt %d: no error from a start that was not confirmed", retry)
		}
	}
	if err := f.proc.Process(ctx, j, Attempt{Retry: 3, MaxRetry: 5, Run: j.TaskID}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, j.TaskID); got.Status != task.Completed || calls != 1 {
		t.Errorf("task %s (%+v) after %d generations; want completed after 1, not failed as a crash", got.Status, got.Failure, calls)
	}
}

// An account's fair share: with its places all held (by its other tasks, on
// any worker), a job changes nothing and says ErrAccountBusy; once a place
// is free the job runs, and gives its place back when done.
func TestAccountShare(t *testing.T) {
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	f.proc.MaxRunning = 2
	ctx := context.Background()
	place := store.Place{Limit: 2, Until: time.Now().Add(time.Minute)}
	// Two of the account's tasks running, on other workers.
	for _, other := range []string{"task_lumen_70", "task_lumen_71"} {
		j := f.job(t, other, std, nil)
		if c, err := f.store.Start(ctx, f.acct, j.TaskID, j.TaskID, place); c.Outcome != task.Applied || err != nil {
			t.Fatalf("start %s: %v %v", other, c.Outcome, err)
		}
	}
	j := f.job(t, "task_lumen_72", std, nil)
	if err := f.proc.Process(ctx, j, Attempt{Run: j.TaskID, MaxRetry: 3}); !errors.Is(err, ErrAccountBusy) {
		t.Fatalf("Process with the account's places taken: %v; want ErrAccountBusy", err)
	}
	// The last try of a job runs past the share: Asynq would archive it,
	// and its task would hang until its deadline.
	last := f.job(t, "task_lumen_73", std, nil)
	if err := f.proc.Process(ctx, last, Attempt{Run: last.TaskID, Retry: 3, MaxRetry: 3}); err != nil {
		t.Fatalf("the last try with the places taken: %v", err)
	}
	if got := f.get(t, last.TaskID); got.Status != task.Completed {
		t.Errorf("the last try's task: %s; want completed", got.Status)
	}
	if got := f.get(t, j.TaskID); got.Status != task.Pending {
		t.Errorf("a job that waits for a place changed its task to %s", got.Status)
	}
	if _, err := f.store.Complete(ctx, f.acct, "task_lumen_70", "task_lumen_70", nil); err != nil {
		t.Fatal(err)
	}
	if err := f.proc.Process(ctx, j, Attempt{Run: j.TaskID}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, j.TaskID); got.Status != task.Completed {
		t.Errorf("task %s once a place was free", got.Status)
	}
	if n, _ := f.store.Running(ctx, f.acct); n != 1 {
		t.Errorf("%d places held after the task finished; want 1 (the other task's)", n)
	}
}
