package processor

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

type hookLog struct {
	mu     sync.Mutex
	events []string
}

func (h *hookLog) Notify(_ context.Context, _, _, event string, seq int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if event == task.EventProgress {
		event += "@" + string(rune('0'+seq/10))
	}
	h.events = append(h.events, event)
}

func (h *hookLog) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...)
}

// A run whose context is canceled because its owner canceled the task
// ends: the job is done (nil), the task stays canceled, and a shutdown
// (the same canceled context, the task not canceled) still hands the task
// back.
func TestCanceledRunStops(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cancelTask bool
		wantErr    bool
		wantStatus task.Status
	}{
		{"owner canceled", true, false, task.Canceled},
		{"shutdown", false, true, task.Processing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{})
			f := newFixture(t, genFunc(func(ctx context.Context, _ imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			}))
			j := f.job(t, "task_lumen_1", std, nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.proc.Process(ctx, jobs.RefOf(j), Attempt{MaxRetry: 3}) }()
			<-started
			if tc.cancelTask {
				c, err := f.store.Cancel(context.Background(), f.acct, j.TaskID)
				if err != nil || c.Was != task.Processing || c.Refunded != 0 {
					t.Fatalf("cancel = %+v, %v; want processing, nothing refunded", c, err)
				}
			}
			cancel()
			select {
			case err := <-done:
				if (err != nil) != tc.wantErr {
					t.Fatalf("Process = %v, want error %v", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not stop")
			}
			if got := f.get(t, j.TaskID).Status; got != tc.wantStatus {
				t.Fatalf("status %s, want %s", got, tc.wantStatus)
			}
		})
	}
}

// A canceled pending task is never run: its job is dropped.
func TestCanceledPendingTaskNeverRuns(t *testing.T) {
	ran := false
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		ran = true
		return nil, errors.New("must not run")
	}))
	j := f.job(t, "task_lumen_2", std, nil)
	c, err := f.store.Cancel(context.Background(), f.acct, j.TaskID)
	if err != nil || c.Was != task.Pending || c.Refunded != price {
		t.Fatalf("cancel = %+v, %v; want pending, %d refunded", c, err, price)
	}
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Fatal("a canceled task ran")
	}
	if bal, refunds := f.credits(t); bal != startCredits || refunds != 1 {
		t.Fatalf("balance %d with %d refunds, want %d with 1", bal, refunds, startCredits)
	}
}

// Hooks hear the events the task's callback asks for, and only those: the
// store decides which are due (the callback is in the task's record, not
// in the job), and the processor notifies those.
func TestHooksHearWantedEvents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  []string
		fail    bool
		crashes int // runs that died holding the task before this one
		want    []string
	}{
		{"final only", task.DefaultEvents, false, 0, []string{task.EventCompleted}},
		{"failed", task.DefaultEvents, true, 0, []string{task.EventFailed}},
		{"progress too", task.Events, false, 0, []string{task.EventProgress + "@1", task.EventCompleted}},
		{"crashed its workers twice", task.DefaultEvents, false, 2, []string{task.EventFailed}},
		{"not the event that happened", []string{task.EventFailed}, false, 0, nil},
		{"no callback", nil, false, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gen imagegen.Generator // nil: the procedural generator
			if tc.fail {
				gen = genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
					return nil, apperr.New(task.GenerationFailed, "no image")
				})
			}
			f := newFixture(t, gen)
			var mu sync.Mutex
			clock := time.Now()
			f.proc.Now = func() time.Time { // a second passes at each reading: every progress write is due
				mu.Lock()
				defer mu.Unlock()
				clock = clock.Add(time.Second)
				return clock
			}
			hooks := &hookLog{}
			f.proc.Hooks = hooks
			var cb task.Callback
			if tc.events != nil {
				cb = task.Callback{URL: "https://hooks.example.com/x", Events: tc.events}
			}
			j := f.jobWith(t, "task_lumen_3", std, cb, "", nil)
			for range tc.crashes {
				if c, err := f.store.Start(context.Background(), f.acct, j.TaskID, j.TaskID); err != nil || c.Outcome != task.Applied {
					t.Fatal(c, err)
				}
			}
			if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 0}); err != nil {
				t.Fatal(err)
			}
			// The client sent the callback with the input; the input the
			// run read back does not carry it: the record keeps it apart.
			if in := f.input(t, j.TaskID); in.Callback.URL != "" || len(in.Callback.Events) != 0 || !reflect.DeepEqual(in, j.Input) {
				t.Fatalf("the run read the input %+v; want %+v, without the callback (the record keeps it)", in, j.Input)
			}
			got := hooks.got()
			// Progress events: at least the fetched milestone (10 %); the
			// exact set depends on timing, so compare the first and last.
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("events %v, want none", got)
				}
				return
			}
			if len(got) == 0 || got[len(got)-1] != tc.want[len(tc.want)-1] || got[0] != tc.want[0] {
				t.Fatalf("events %v, want %v (first and last)", got, tc.want)
			}
		})
	}
}
