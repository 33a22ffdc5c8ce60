package processor

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redisproc"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/imagegen/procedural"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// paced is a generation of took on clk that reports progress as the
// Gemini generator paces it (gemini.go, pace): every 500 ms, on a curve
// that nears 95 % as expected passes, whenever the percentage rises.
func paced(t *testing.T, clk *fakeClock, expected, took time.Duration) imagegen.Generator {
	g, err := procedural.New(procedural.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return genFunc(func(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error) {
		last := 0
		for at := 500 * time.Millisecond; at <= took; at += 500 * time.Millisecond {
			clk.advance(500 * time.Millisecond)
			pct := int(95 * (1 - math.Exp(-2*at.Seconds()/expected.Seconds())))
			if pct > last {
				progress(pct)
				last = pct
			}
		}
		return g.Generate(ctx, req, nil)
	})
}

// commands reads INFO commandstats: the calls of each command since the
// last CONFIG RESETSTAT, the counting's own left out.
func (f *fixture) commands(t *testing.T) map[string]int64 {
	t.Helper()
	info, err := f.srv.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for name, st := range redisproc.ParseCommandstats(info) {
		switch {
		case name == "info", name == "config|resetstat", name == "hello", strings.HasPrefix(name, "client|"):
			// the counting's own, and a new connection's greeting
		default:
			out[name] = st.Calls
		}
	}
	return out
}

func total(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

func breakdown(m map[string]int64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return b.String()
}

// A 20-second generation paced like Gemini's (10 s expected for the
// standard tier, 25 s for pro) costs at most 10 progress writes, and the
// whole task, created to completed, at most 60 Redis commands (INFO
// commandstats: the scripts' own commands counted; Asynq's queueing is
// not in this test).
func TestLongGenerationWritesLittle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		model    string
		expected time.Duration
		callback bool
	}{
		{"standard", std, 10 * time.Second, false},
		{"pro", pro, 25 * time.Second, false},
		{"pro with a progress callback", pro, 25 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			f := newFixture(t, paced(t, clk, tc.expected, 20*time.Second))
			f.proc.Now = clk.Now
			// A task first, for the counts to leave out what only the first
			// pays (the scripts loaded, the day's usage key made).
			warm := f.job(t, "task_lumen_0", tc.model, nil)
			if err := f.proc.Process(context.Background(), jobs.RefOf(warm), Attempt{MaxRetry: 3}); err != nil {
				t.Fatal(err)
			}
			f.store.mu.Lock()
			f.store.progress = nil
			f.store.mu.Unlock()
			if err := f.srv.Client(t).ConfigResetStat(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			var cb task.Callback
			if tc.callback {
				cb = task.Callback{URL: "https://hooks.example.com/x", Events: task.Events}
			}
			j := f.jobWith(t, "task_lumen_1", tc.model, cb, "", nil)
			if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
				t.Fatal(err)
			}
			cmds := f.commands(t)
			f.store.mu.Lock()
			writes := append([]int(nil), f.store.progress...)
			f.store.mu.Unlock()
			t.Logf("%d progress writes %v; %d Redis commands: %s", len(writes), writes, total(cmds), breakdown(cmds))
			if got := f.get(t, j.TaskID); got.Status != task.Completed || got.Progress != 100 {
				t.Fatalf("task %+v", got)
			}
			if len(writes) > 10 {
				t.Errorf("%d progress writes; want at most 10", len(writes))
			}
			if n := total(cmds); n > 60 {
				t.Errorf("%d Redis commands for the task; want at most 60", n)
			}
		})
	}
}

// watched is the store of a run whose every progress write waits until a
// watcher of the task's events (store.Tasks.Watch, what a stream and a
// wait follow) has read the value written back.
type watched struct {
	*recorder
	seen chan int
	last int
}

func (w *watched) Progress(ctx context.Context, a, id, run string, pct int) (bool, error) {
	hook, err := w.recorder.Progress(ctx, a, id, run, pct)
	if err != nil || pct <= w.last {
		return hook, err // no change: nothing published
	}
	w.last = pct
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-w.seen:
			if got >= pct {
				return hook, nil
			}
		case <-timeout:
			panic("a progress write was not seen by the task's watcher")
		}
	}
}

// Streams and waits see every change written: each progress write is
// published and read back by a watcher before the run goes on.
func TestWatchersSeeEveryProgressWrite(t *testing.T) {
	clk := newFakeClock()
	f := newFixture(t, paced(t, clk, 10*time.Second, 20*time.Second))
	w := &watched{recorder: f.store, seen: make(chan int, 64)}
	f.proc.store = w
	f.proc.Now = clk.Now
	j := f.job(t, "task_lumen_1", std, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribed := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var observed []int
	go func() {
		_ = f.store.Watch(ctx, func(ev store.TaskEvent) {
			if ev.TaskID != j.TaskID {
				return
			}
			got, err := f.store.Get(context.Background(), ev.AccountID, ev.TaskID)
			if err != nil {
				return
			}
			mu.Lock()
			observed = append(observed, got.Progress)
			mu.Unlock()
			w.seen <- got.Progress
		}, func() { once.Do(func() { close(subscribed) }) })
	}()
	<-subscribed
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	f.store.mu.Lock()
	writes := append([]int(nil), f.store.progress...)
	f.store.mu.Unlock()
	if len(writes) < 3 {
		t.Fatalf("progress writes %v; want the curve to show", writes)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range writes {
		found := false
		for _, o := range observed {
			found = found || o == p
		}
		if !found {
			t.Errorf("progress %d was written but no watcher read it (they read %v)", p, observed)
		}
	}
}

// A generation done within the quiet period (a drain's, EASEL_SIM_DELAY=0)
// writes no progress at all: its start and its completion are all its
// watchers see.
func TestFastGenerationWritesNoProgress(t *testing.T) {
	clk := newFakeClock()
	f := newFixture(t, paced(t, clk, 10*time.Second, 0))
	f.proc.Now = func() time.Time { clk.advance(time.Millisecond); return clk.Now() }
	for _, id := range []string{"task_lumen_1", "task_lumen_2"} {
		j := f.job(t, id, std, func(in *task.Input) { in.Prompt = "a fast one" })
		if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
			t.Fatal(err)
		}
		if got := f.get(t, id); got.Status != task.Completed {
			t.Fatalf("task %+v", got)
		}
	}
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	if len(f.store.progress) != 0 {
		t.Errorf("progress written %v; want none", f.store.progress)
	}
}
