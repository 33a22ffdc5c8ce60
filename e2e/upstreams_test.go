package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/upstream"
)

// poolUpstream is one upstream of a pool: a Gemini API stand-in answering
// every call with one status (200: an image), counting its calls.
type poolUpstream struct {
	name   string
	status atomic.Int64
	delay  time.Duration
	calls  atomic.Int64
	last   atomic.Int64 // the last call's time, Unix ns
	url    string
}

// sinceLast is the time since the upstream's last call.
func (u *poolUpstream) sinceLast() time.Duration {
	return time.Since(time.Unix(0, u.last.Load()))
}

func newPoolUpstream(t *testing.T, name string, status int, delay time.Duration) *poolUpstream {
	u := &poolUpstream{name: name, delay: delay}
	u.status.Store(int64(status))
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

func (u *poolUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.calls.Add(1)
	u.last.Store(time.Now().UnixNano())
	if u.delay > 0 {
		select {
		case <-time.After(u.delay):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	status := int(u.status.Load())
	if status != 200 {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": status, "status": http.StatusText(status), "message": u.name + " is broken"}})
		return
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 32, 32)))
	_ = json.NewEncoder(w).Encode(map[string]any{"candidates": []any{map[string]any{
		"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(buf.Bytes())}}}},
		"finishReason": "STOP",
	}}})
}

// poolFile writes the upstreams file of ups (with the breaker's settings,
// "" for the defaults) and returns its path.
func poolFile(t *testing.T, breaker string, ups ...*poolUpstream) string {
	t.Helper()
	var list []map[string]any
	for _, u := range ups {
		list = append(list, map[string]any{"name": u.name, "provider": "gemini", "api_key": "key-of-" + u.name, "base_url": u.url, "weight": 1})
	}
	f := map[string]any{"upstreams": list}
	if breaker != "" {
		f["breaker"] = json.RawMessage(breaker)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "upstreams.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// poolCalls reads each worker's easel_upstream_pool_calls_total of one
// upstream and outcome.
func poolCalls(t *testing.T, s *stack, name, outcome string) []float64 {
	t.Helper()
	out := make([]float64, len(s.workerAddr))
	for i, a := range s.workerAddr {
		for k, v := range scrapeMetrics(t, "http://"+a+"/metrics") {
			if strings.HasPrefix(k, "easel_upstream_pool_calls_total{") && strings.Contains(k, `upstream="`+name+`"`) && strings.Contains(k, `outcome="`+outcome+`"`) {
				out[i] += v
			}
		}
	}
	return out
}

// runPoolTasks creates n standard tasks on a new account, waits until every
// one has ended (at most within), and checks that each completed and was
// charged exactly once, never refunded.
func runPoolTasks(t *testing.T, s *stack, n int, within time.Duration) {
	t.Helper()
	const credits = 100_000
	id, key := s.newAccount(t, account.Spec{Name: fmt.Sprintf("pool-%d", n), Credits: credits, RateLimit: 10_000, MaxInflight: 10_000})
	c := newClient(t, s.base, key)
	start := time.Now()
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		ids[c.create(createBody(std, fmt.Sprintf(`{"prompt":"a fox, number %d"}`, i)))] = true
	}
	ctx := context.Background()
	var done map[string]*task.Task
	for {
		all, err := accountTasks(ctx, s.tasks, id)
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for tid, tk := range all {
			if ids[tid] && tk.Status.Final() {
				ended++
			}
		}
		if ended == n {
			done = all
			break
		}
		if time.Since(start) > within {
			counts := map[task.Status]int{}
			for _, tk := range all {
				counts[tk.Status]++
			}
			t.Fatalf("after %v: tasks %v; want all %d completed", within, counts, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d tasks ended in %v", n, time.Since(start).Round(time.Millisecond))
	for tid := range ids {
		if tk := done[tid]; tk.Status != task.Completed {
			t.Errorf("task %s: %s (%+v); want completed", tid, tk.Status, tk.Failure)
		}
	}

	// Charged exactly once each: one debit per task, no refund, the
	// balance down by the tasks' price and no more.
	entries, err := s.accounts.Ledger(ctx, id, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	debits := map[string]int{}
	var price, spent int64
	for _, e := range entries {
		switch e.Kind {
		case account.Debit:
			debits[e.TaskID]++
			spent -= e.Amount
			if price == 0 {
				price = -e.Amount
			} else if -e.Amount != price {
				t.Errorf("debit of %d for task %s; others cost %d", -e.Amount, e.TaskID, price)
			}
		case account.Refund:
			t.Errorf("refund of task %s (%s)", e.TaskID, e.Note)
		}
	}
	for tid := range ids {
		if debits[tid] != 1 {
			t.Errorf("task %s charged %d times; want once", tid, debits[tid])
		}
	}
	a, err := s.accounts.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if price <= 0 || spent != int64(n)*price || a.Credits != credits-spent {
		t.Errorf("balance %d, spent %d (price %d) for %d tasks; want %d × %d charged once", a.Credits, spent, price, n, n, price)
	}
}

func poolStack(t *testing.T, file string, workers, concurrency int) *stack {
	return startStack(t, stackOptions{workers: workers, env: map[string]string{
		"EASEL_GENERATOR":              "gemini",
		"EASEL_UPSTREAMS_FILE":         file,
		"EASEL_UPSTREAMS_RELOAD":       "1s",
		"EASEL_WORKER_CONCURRENCY":     fmt.Sprint(concurrency),
		"EASEL_RETRY_INITIAL_INTERVAL": "100ms",
	}})
}

// A pool with broken upstreams serves every task: three upstreams (one
// answering 500, one 429, one healthy), 60 tasks all completed within
// 60 s, each charged exactly once, and each broken upstream called at most
// 20 times (the breaker decides, not every task's first try), with two
// workers sharing it.
func TestUpstreamPoolFailover(t *testing.T) {
	t.Parallel()
	down := newPoolUpstream(t, "down", 500, 0)
	busy := newPoolUpstream(t, "busy", 429, 0)
	healthy := newPoolUpstream(t, "healthy", 200, 5*time.Millisecond)
	// The default breaker: 5 failures open it for 10 s, a 429 cools 10 s.
	s := poolStack(t, poolFile(t, "", down, busy, healthy), 2, 4)

	runPoolTasks(t, s, 60, 60*time.Second)

	d, b, h := down.calls.Load(), busy.calls.Load(), healthy.calls.Load()
	t.Logf("calls: down %d, busy %d, healthy %d", d, b, h)
	if d > 20 || b > 20 {
		t.Errorf("the broken upstreams got %d (500) and %d (429) calls; want at most 20 each", d, b)
	}
	if h != 60 {
		t.Errorf("healthy: %d calls; want one a task, 60", h)
	}
	// Both workers worked, and their metrics count every call.
	succ := poolCalls(t, s, "healthy", "success")
	for i, n := range succ {
		if n == 0 {
			t.Errorf("worker %d made no call: the test does not show two workers sharing the breaker", i)
		}
	}
	if f := poolCalls(t, s, "down", "failure"); int64(f[0]+f[1]) != d {
		t.Errorf("workers counted %v failures of down; the fake saw %d", f, d)
	}
	if f := poolCalls(t, s, "busy", "throttled"); int64(f[0]+f[1]) != b {
		t.Errorf("workers counted %v 429s of busy; the fake saw %d", f, b)
	}

	// What operators read.
	rdb, err := redisconn.Open(context.Background(), s.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	st, err := upstream.Statuses(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	// The breaker opens for 10 s and a 429 cools 10 s: on a slow machine
	// the tasks may end after that, so they are checked only while the
	// last failure is well within it.
	const within = 9 * time.Second
	for _, u := range st {
		switch u.Name {
		case "down":
			if d >= 5 && u.Breaker != upstream.Open && down.sinceLast() < within {
				t.Errorf("down: breaker %s after %d failures, the last %v ago; want open", u.Breaker, d, down.sinceLast())
			}
		case "busy":
			if u.CoolingUntil == nil && b > 0 && busy.sinceLast() < within {
				t.Errorf("busy: not cooling after %d 429s, the last %v ago", b, busy.sinceLast())
			}
		case "healthy":
			if u.Breaker != upstream.Closed || u.Disabled {
				t.Errorf("healthy: %+v", u)
			}
		}
	}
	if len(st) != 3 {
		t.Errorf("%d upstreams published; want 3", len(st))
	}
}

// Every worker honours one shared breaker: with one job at a time per
// worker, a breaker shared in Redis opens after its 3 failures plus at
// most the other worker's call in flight (4 calls); breakers of each
// worker's own would let 3 failures through each (6 or more).
func TestUpstreamBreakerSharedByWorkers(t *testing.T) {
	t.Parallel()
	down := newPoolUpstream(t, "down", 500, 20*time.Millisecond)
	healthy := newPoolUpstream(t, "healthy", 200, 20*time.Millisecond)
	s := poolStack(t, poolFile(t, `{"failures":3,"cooldown":"60s"}`, down, healthy), 2, 1)

	runPoolTasks(t, s, 40, 60*time.Second)

	d := down.calls.Load()
	f := poolCalls(t, s, "down", "failure")
	succ := poolCalls(t, s, "healthy", "success")
	t.Logf("down: %d calls (per worker %v); healthy per worker %v", d, f, succ)
	if succ[0] == 0 || succ[1] == 0 {
		t.Fatalf("healthy calls per worker %v: both workers must take tasks for this test to say anything", succ)
	}
	if d > 4 {
		t.Errorf("down: %d calls (per worker %v); want at most 4: the workers do not share one breaker", d, f)
	}

	// The breaker is open in Redis for 60 s: neither worker calls down
	// again, whichever takes the tasks.
	before := poolCalls(t, s, "healthy", "success")
	runPoolTasks(t, s, 20, 30*time.Second)
	after := poolCalls(t, s, "healthy", "success")
	t.Logf("second round: healthy calls per worker %v → %v", before, after)
	if n := down.calls.Load(); n != d {
		t.Errorf("down got %d more calls while its breaker was open", n-d)
	}
}
