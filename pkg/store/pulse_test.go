package store

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// worker is a worker process's task store and liveness.
type worker struct {
	tasks *Tasks
	pulse *Pulse
}

// steadyWorkers returns workers of the ids, their keys renewed without a
// break for long enough that they judge others.
func steadyWorkers(t *testing.T, s *stores, clock *testClock, ids ...string) []worker {
	t.Helper()
	var out []worker
	for _, id := range ids {
		p := NewPulse(s.db, id)
		p.now = clock.now
		out = append(out, worker{tasks: s.tasks.WithPulse(p), pulse: p})
	}
	for i := 0; ; i++ {
		for _, w := range out {
			must(t, w.pulse.Beat(context.Background()))
		}
		if i == 4 {
			return out
		}
		clock.add(PulseEvery)
	}
}

// A run that never let go counts as a crash only when the worker that
// started it died; a run cut by Redis being away (its own worker retries
// it), one whose worker lives or stopped gracefully, one that let go, and
// one that never started are run again with no crash counted.
func TestOnlyAWorkersDeathIsACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	startBy := func(t *testing.T, w worker, run string) task.Outcome {
		t.Helper()
		st, err := w.tasks.Start(ctx, "a", "t", run)
		must(t, err)
		return st.Outcome
	}
	takeoverBy := func(t *testing.T, w worker, orphan string) (task.Outcome, string) {
		t.Helper()
		c, run, err := w.tasks.Takeover(ctx, "a", "t", orphan, func(n int) string { return "t.r" + strconv.Itoa(n) })
		must(t, err)
		return c.Outcome, run
	}
	die := func(t *testing.T, s *stores, w worker) {
		t.Helper()
		must(t, s.rdb.Del(ctx, workerKey(w.pulse.ID())).Err())
	}
	tests := []struct {
		name string
		// steps drives three workers; it returns what the test expects of
		// the task: its crashes, and whether the last step found it
		// poisoned.
		steps       func(t *testing.T, s *stores, w1, w2, w3 worker) task.Outcome
		wantCrashes int
		want        task.Outcome
	}{
		{"its own worker starts it again (its release was lost)", func(t *testing.T, s *stores, w1, _, _ worker) task.Outcome {
			startBy(t, w1, "t")
			startBy(t, w1, "t")
			return startBy(t, w1, "t")
		}, 0, task.Applied},
		{"another worker starts it, the first alive", func(t *testing.T, s *stores, w1, w2, w3 worker) task.Outcome {
			startBy(t, w1, "t")
			startBy(t, w2, "t")
			return startBy(t, w3, "t")
		}, 0, task.Applied},
		{"the worker stopped gracefully without letting go", func(t *testing.T, s *stores, w1, w2, _ worker) task.Outcome {
			startBy(t, w1, "t")
			must(t, w1.pulse.Stop(ctx))
			return startBy(t, w2, "t")
		}, 0, task.Applied},
		{"the worker died", func(t *testing.T, s *stores, w1, w2, _ worker) task.Outcome {
			startBy(t, w1, "t")
			die(t, s, w1)
			return startBy(t, w2, "t")
		}, 1, task.Applied},
		{"two workers died running it", func(t *testing.T, s *stores, w1, w2, w3 worker) task.Outcome {
			startBy(t, w1, "t")
			die(t, s, w1)
			startBy(t, w2, "t")
			die(t, s, w2)
			return startBy(t, w3, "t")
		}, 1, task.Poisoned},
		{"the judge is not steady yet (Redis just came back)", func(t *testing.T, s *stores, w1, w2, _ worker) task.Outcome {
			startBy(t, w1, "t")
			die(t, s, w1)
			w2.pulse.since = w2.pulse.now()
			return startBy(t, w2, "t")
		}, 0, task.Applied},
		{"orphaned, its worker alive (its lease lapsed)", func(t *testing.T, s *stores, w1, w2, _ worker) task.Outcome {
			startBy(t, w1, "t")
			got, run := takeoverBy(t, w2, "t")
			if got != task.Applied || run != "t.r1" {
				t.Fatalf("takeover = %s, %s; want applied, t.r1", got, run)
			}
			startBy(t, w2, run)
			got, _ = takeoverBy(t, w1, run)
			return got
		}, 0, task.Applied},
		{"orphaned after it let go", func(t *testing.T, s *stores, w1, w2, _ worker) task.Outcome {
			startBy(t, w1, "t")
			must(t, w1.tasks.Release(ctx, "a", "t", "t"))
			die(t, s, w1)
			got, _ := takeoverBy(t, w2, "t")
			return got
		}, 0, task.Applied},
		{"orphaned before it started, twice", func(t *testing.T, s *stores, w1, w2, _ worker) task.Outcome {
			_, run := takeoverBy(t, w2, "t")
			got, _ := takeoverBy(t, w1, run)
			return got
		}, 0, task.Applied},
		{"orphaned by two dead workers", func(t *testing.T, s *stores, w1, w2, w3 worker) task.Outcome {
			startBy(t, w1, "t")
			die(t, s, w1)
			_, run := takeoverBy(t, w2, "t")
			startBy(t, w2, run)
			die(t, s, w2)
			got, _ := takeoverBy(t, w3, run)
			return got
		}, 1, task.Poisoned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			create(t, s, "a", "t")
			clock := &testClock{t: time.Now()}
			w := steadyWorkers(t, s, clock, "w1", "w2", "w3")
			if got := tt.steps(t, s, w[0], w[1], w[2]); got != tt.want {
				t.Errorf("last step: %s; want %s", got, tt.want)
			}
			if tt.want == task.Poisoned {
				tk, err := s.tasks.Get(ctx, "a", "t")
				must(t, err)
				if tk.Status != task.Failed || tk.Failure.Code != string(task.WorkerCrashed) {
					t.Errorf("task %s %+v; want failed worker_crashed", tk.Status, tk.Failure)
				}
				return
			}
			crashes, _ := s.rdb.HGet(ctx, taskKey("a", "t"), fTaskCrashes).Int()
			if crashes != tt.wantCrashes {
				t.Errorf("crashes %d; want %d", crashes, tt.wantCrashes)
			}
		})
	}
}
