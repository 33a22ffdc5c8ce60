package processor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/quota"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen"
)

type sharedQuota struct{ q *quota.Quota }

func (s sharedQuota) Acquire(ctx context.Context, model string) (func(), error) {
	slot, err := s.q.Acquire(ctx, model)
	if err != nil {
		return nil, err
	}
	return slot.Release, nil
}

func (s sharedQuota) Throttled(ctx context.Context, model string, d time.Duration) error {
	return s.q.Throttled(ctx, model, d)
}

// Generation calls go through the shared upstream quota: with one call at
// a time allowed, tasks run in parallel never call the upstream two at
// once; a 429 stops the calls for the cooldown, after which the task's
// retry succeeds.
func TestUpstreamQuota(t *testing.T) {
	var running, most, calls atomic.Int64
	throttleFirst := atomic.Bool{}
	f := newFixture(t, genFunc(func(ctx context.Context, _ imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
		calls.Add(1)
		if throttleFirst.CompareAndSwap(true, false) {
			return nil, apperr.Transient(fmt.Errorf("%w: 429", imagegen.ErrThrottled), task.UpstreamUnavailable, "over capacity")
		}
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond)
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	limits, err := quota.ParseLimits("", "*=1")
	if err != nil {
		t.Fatal(err)
	}
	q := quota.New(redistest.Start(t).Client(t), limits, quota.Options{Cooldown: 500 * time.Millisecond})
	f.proc.Quota = sharedQuota{q}
	ctx := context.Background()

	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		j := f.job(t, fmt.Sprintf("task_lumen_8%d", i), std, nil)
		wg.Go(func() {
			if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Run: j.TaskID}); err != nil {
				t.Error(err)
			}
			if got := f.get(t, j.TaskID); got.Status != task.Completed {
				t.Errorf("task %s: %s", j.TaskID, got.Status)
			}
		})
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d upstream calls at once; the quota allows 1", most.Load())
	}

	throttleFirst.Store(true)
	calls.Store(0)
	j := f.job(t, "task_lumen_90", std, nil)
	start := time.Now()
	if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Run: j.TaskID}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 500*time.Millisecond || calls.Load() != 2 {
		t.Errorf("after a 429: %d calls in %v; want the retry after the 500 ms cooldown", calls.Load(), took)
	}
	if got := f.get(t, j.TaskID); got.Status != task.Completed {
		t.Errorf("task after a 429 and a retry: %s", got.Status)
	}
}

// Time spent waiting for the shared quota does not use up the retry budget
// (EASEL_RETRY_MAX_ELAPSED): a task that queued longer than the budget for
// its first call still gets its retry after a 429.
func TestQuotaWaitIsNotRetryTime(t *testing.T) {
	var calls atomic.Int64
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		if calls.Add(1) == 1 {
			return nil, apperr.Transient(fmt.Errorf("%w: 429", imagegen.ErrThrottled), task.UpstreamUnavailable, "over capacity")
		}
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	f.proc.Retry.MaxElapsed = 300 * time.Millisecond
	limits, _ := quota.ParseLimits("", "*=1")
	q := quota.New(redistest.Start(t).Client(t), limits, quota.Options{Cooldown: 100 * time.Millisecond})
	f.proc.Quota = sharedQuota{q}
	ctx := context.Background()
	// Another worker holds the one slot for longer than the whole budget.
	other, err := q.Acquire(ctx, std)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(800*time.Millisecond, other.Release)
	j := f.job(t, "task_lumen_95", std, nil)
	if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Run: j.TaskID}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, j.TaskID); got.Status != task.Completed || calls.Load() != 2 {
		t.Errorf("task %s (%+v) after %d calls; want completed on the retry", got.Status, got.Failure, calls.Load())
	}
}
