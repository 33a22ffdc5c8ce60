package loadgen

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestScheduleFollowsTheStages(t *testing.T) {
	t.Parallel()
	count := func(s schedule) (n int64, last time.Duration) {
		for {
			off, ok := s.at(n)
			if !ok {
				return n, last
			}
			if off < last {
				t.Fatalf("arrival %d at %v, before the previous at %v", n, off, last)
			}
			last = off
			n++
		}
	}
	for _, tc := range []struct {
		stages   string
		arrivals int64 // the rate's integral
		rateAt   time.Duration
		rate     float64
	}{
		{"1s:100", 50, 500 * time.Millisecond, 50},                // a ramp from 0
		{"0s:100,1s:100", 100, 500 * time.Millisecond, 100},       // a jump, then steady
		{"1s:100,2s:100,1s:0", 300, 2 * time.Second, 100},         // up, hold, down
		{"30s:100,60s:500,30s:0", 27000, 60 * time.Second, 300},   // the documented example
		{"1s:10,1s:0,1s:0,1s:10", 15, 2500 * time.Millisecond, 0}, // a pause
	} {
		st, err := ParseStages(tc.stages)
		if err != nil {
			t.Fatalf("%s: %v", tc.stages, err)
		}
		s := newSchedule(st, 0, 0)
		n, last := count(s)
		if d := n - tc.arrivals; d < -1 || d > 1 {
			t.Errorf("%s: %d arrivals, want %d", tc.stages, n, tc.arrivals)
		}
		if last > s.length() {
			t.Errorf("%s: last arrival at %v, after the end %v", tc.stages, last, s.length())
		}
		if r := s.rateAt(tc.rateAt); r < tc.rate-0.5 || r > tc.rate+0.5 {
			t.Errorf("%s: rate at %v is %.1f, want %.1f", tc.stages, tc.rateAt, r, tc.rate)
		}
		if FormatStages(st) == "" {
			t.Errorf("%s: no format", tc.stages)
		}
	}
	// A constant rate with no duration never ends; one with a duration does.
	if off, ok := newSchedule(nil, 10, 0).at(1000); !ok || off != 100*time.Second {
		t.Errorf("constant rate: arrival 1000 at %v %v", off, ok)
	}
	if n, _ := count(newSchedule(nil, 10, time.Second)); n != 10 {
		t.Errorf("10/s for 1s: %d arrivals", n)
	}
	for _, bad := range []string{"", "10s", "x:1", "1s:-1", "0s:5", "1s:abc"} {
		if _, err := ParseStages(bad); err == nil {
			t.Errorf("ParseStages(%q) accepted", bad)
		}
	}
}

func TestRunWithStagesReportsTheTargetOverTime(t *testing.T) {
	t.Parallel()
	var st atomic.Int32
	st.Store(200)
	srv := fakeAPI(t, &st)
	stages, _ := ParseStages("0s:20,1s:20,1s:60")
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeCreate, Stages: stages, Mix: []MixEntry{{Model: "m", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounted(t, rep)
	// 20 in the first second, 40 (a ramp from 20 to 60) in the second.
	if rep.Offered < 58 || rep.Offered > 61 || len(rep.Series) < 2 {
		t.Fatalf("offered %d, series %+v", rep.Offered, rep.Series)
	}
	if p0, p1 := rep.Series[0], rep.Series[1]; p0.TargetRate != 20 || p1.TargetRate != 40 || p0.Offered < 19 || p0.Offered > 21 || p1.Offered < 38 || p1.Offered > 42 {
		t.Errorf("series %+v %+v", p0, p1)
	}
	if !strings.Contains(rep.Load, "stages 0s:20,1s:20,1s:60") {
		t.Errorf("load %q", rep.Load)
	}
}

func TestThresholds(t *testing.T) {
	t.Parallel()
	rep := &Report{Offered: 100, Sent: 90, Completed: 80, Failed: 5, Dropped: 10, Unfinished: 5,
		Latency: Percentiles{P50: 100, P90: 200, P99: 450, Max: 900}}
	for _, tc := range []struct {
		expr     string
		ok       bool
		measured float64
	}{
		{"p99<500ms", true, 450},
		{"p99<0.4s", false, 450},
		{"p50 <= 100", true, 100},
		{"max<1s", true, 900},
		{"p90>250ms", false, 200},
		{"errors<5%", false, 100 * 5.0 / 90},
		{"errors<6%", true, 100 * 5.0 / 90},
		{"achieved>=80%", true, 80},
		{"achieved>95%", false, 80},
		{"dropped<10%", false, 10},
		{"unfinished<=5%", true, 5},
	} {
		th, err := ParseThreshold(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		failed := rep.Check([]Threshold{th})
		if got := rep.Thresholds[0]; got.OK != tc.ok || got.Measured < tc.measured-0.001 || got.Measured > tc.measured+0.001 || (len(failed) == 0) != tc.ok {
			t.Errorf("%s: %+v, failed %v; want ok %v measured %.3f", tc.expr, got, failed, tc.ok, tc.measured)
		}
	}
	for _, bad := range []string{"p99", "p99<", "p98<5ms", "errors<5", "achieved>95ms", "p99<5parsecs", "p99=5ms"} {
		if _, err := ParseThreshold(bad); err == nil {
			t.Errorf("ParseThreshold(%q) accepted", bad)
		}
	}
	// Nothing completed: no latency objective is met.
	none := &Report{Offered: 10, Sent: 10, Failed: 10}
	th, _ := ParseThreshold("p99<1s")
	if failed := none.Check([]Threshold{th}); len(failed) != 1 || !strings.Contains(failed[0].String(), "p99<1s FAILED") {
		t.Errorf("nothing completed: %v", failed)
	}
}

// taskAPI is a gateway whose tasks move one state a query: pending, then
// processing, then their end (completed, or as the model says: "failing"
// fails, "canceling" is canceled). It honours wait= by answering each
// query with the next state, and counts the queries and the waits asked.
type taskAPI struct {
	*httptest.Server
	mu      sync.Mutex
	queries map[string]int
	waits   map[string]int
	cancels map[string]int
	models  map[string]string
	seq     atomic.Int64
}

func newTaskAPI(t *testing.T) *taskAPI {
	a := &taskAPI{queries: map[string]int{}, waits: map[string]int{}, cancels: map[string]int{}, models: map[string]string{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/task/create":
			var body struct{ Model string }
			_ = json.NewDecoder(r.Body).Decode(&body)
			id := "task_" + strings.Repeat("x", int(a.seq.Add(1)))
			a.mu.Lock()
			a.models[id] = body.Model
			a.mu.Unlock()
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 200, "msg": "success", "data": map[string]string{"task_id": id}})
		case "/v1/task/query":
			id := r.URL.Query().Get("task_id")
			a.mu.Lock()
			a.queries[id]++
			n, model := a.queries[id], a.models[id]
			a.waits[r.URL.Query().Get("wait")]++
			a.mu.Unlock()
			rec := map[string]any{"task_id": id, "status": "pending", "progress": 0, "create_time": 1_000_000, "complete_time": 0, "results": []string{}}
			switch {
			case model == "canceling":
				rec["status"], rec["complete_time"] = "canceled", 1_000_100
			case n == 1:
				rec["status"], rec["progress"] = "processing", 10
			case model == "failing":
				rec["status"], rec["complete_time"], rec["error"] = "failed", 1_000_200, map[string]string{"code": "content_blocked"}
			default:
				rec["status"], rec["progress"], rec["complete_time"], rec["results"] = "completed", 100, 1_000_250, []string{a.URL + "/files/a.png"}
			}
			_ = json.NewEncoder(w).Encode(rec)
		case "/v1/task/list":
			_, _ = w.Write([]byte(`{"tasks":[{"task_id":"task_x","status":"pending"}]}`))
		case "/v1/task/cancel":
			var body struct {
				TaskID string `json:"task_id"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			a.mu.Lock()
			a.cancels[body.TaskID]++
			n := a.cancels[body.TaskID]
			a.mu.Unlock()
			if n > 1 || len(body.TaskID)%2 == 0 {
				// Already ended (every other task, and any second cancel).
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"code":409,"msg":"the task has already ended","data":null}`))
				return
			}
			_, _ = w.Write([]byte(`{"code":200,"msg":"success","data":{"status":"canceled"}}`))
		default:
			_, _ = w.Write([]byte("png"))
		}
	}))
	t.Cleanup(a.Close)
	return a
}

// TestLifecycleLongPollsAndEndsAtOnce: tasks are followed with wait=
// long-polls (one query a change, no pause between them), a canceled or
// failed task ends its unit at the first sight, the task's time is split
// into queue wait and generation, and the units break down by model, key
// and gateway.
func TestLifecycleLongPollsAndEndsAtOnce(t *testing.T) {
	t.Parallel()
	a, b := newTaskAPI(t), newTaskAPI(t)
	mix, _ := ParseMix("ok=2,failing=1,canceling=1")
	rep, err := Run(context.Background(), Config{BaseURLs: []string{a.URL, b.URL}, Keys: []string{"key-one-123456", "key-two-123456"}, Mode: ModeLifecycle,
		Concurrency: 4, Requests: 40, Mix: mix, PollWait: 20 * time.Second, PollInterval: time.Hour, LifecycleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounted(t, rep)
	if rep.Completed+rep.Failed != 40 || rep.Unfinished != 0 {
		t.Fatalf("completed %d failed %d unfinished %d", rep.Completed, rep.Failed, rep.Unfinished)
	}
	if rep.Failures["task canceled"] != rep.TaskOutcome["canceled"] || rep.Failures["task failed: content_blocked"] != rep.TaskOutcome["failed:content_blocked"] || rep.TaskOutcome["completed"] != rep.Completed {
		t.Errorf("failures %v, outcomes %v", rep.Failures, rep.TaskOutcome)
	}
	for _, api := range []*taskAPI{a, b} {
		api.mu.Lock()
		for id, n := range api.queries {
			want := 2 // processing, then the end
			if api.models[id] == "canceling" {
				want = 1
			}
			if n != want {
				t.Errorf("task %s (%s) queried %d times, want %d", id, api.models[id], n, want)
			}
		}
		if len(api.waits) != 1 || api.waits["20"] == 0 {
			t.Errorf("waits asked %v, want all wait=20", api.waits)
		}
		api.mu.Unlock()
	}
	if rep.Ops[OpQueueWait] == nil || rep.Ops[OpGeneration] == nil || rep.Ops[OpQueueWait].OK != rep.Completed || rep.Ops[OpGeneration].OK != rep.Completed {
		t.Errorf("queue wait %+v, generation %+v for %d completed", rep.Ops[OpQueueWait], rep.Ops[OpGeneration], rep.Completed)
	}
	if tt := rep.Ops[OpTaskTime]; tt == nil || tt.Latency.P50 < 249 || tt.Latency.P50 > 251 {
		t.Errorf("task time from the record %+v, want 250ms", tt)
	}
	for dim, want := range map[string]int{"model": 3, "key": 2, "gateway": 2} {
		if len(rep.Breakdown[dim]) != want {
			t.Errorf("breakdown by %s: %v", dim, rep.Breakdown[dim])
		}
	}
	if g := rep.Breakdown["model"]["canceling"]; g == nil || g.Completed != 0 || g.Failed == 0 {
		t.Errorf("model canceling: %+v", g)
	}
	for k := range rep.Breakdown["key"] {
		if strings.Contains(k, "123456") {
			t.Errorf("the breakdown gives a key away: %q", k)
		}
	}
}

// TestMergeAddsRunsUp: two runs merged count every unit of both, and their
// latency percentiles come from the merged histograms.
func TestMergeAddsRunsUp(t *testing.T) {
	t.Parallel()
	fast := newFixedDelayServer(t, 8, time.Millisecond)
	slow := newFixedDelayServer(t, 8, 40*time.Millisecond)
	var reps []*Report
	for _, srv := range []*fixedDelayServer{fast, slow} {
		rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeCreate, Concurrency: 2, Requests: 30, Mix: []MixEntry{{Model: "m", Weight: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		// Through JSON, as the command reads them.
		b, _ := json.Marshal(rep)
		var back Report
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, &back)
	}
	m, err := Merge(reps)
	if err != nil {
		t.Fatal(err)
	}
	checkAccounted(t, m)
	if m.Offered != 60 || m.Completed != 60 || m.Ops[OpCreate].OK != 60 {
		t.Errorf("merged offered %d completed %d create %+v", m.Offered, m.Completed, m.Ops[OpCreate])
	}
	// Half the units took 40ms or more: the merged p90 is a slow one. The
	// median of two runs of equal size lies between their medians (a
	// loaded machine can make the fast run's the larger).
	lo, hi := min(reps[0].Latency.P50, reps[1].Latency.P50), max(reps[0].Latency.P50, reps[1].Latency.P50)
	if m.Latency.P90 < 40 || m.Latency.P50 < lo || m.Latency.P50 > hi || m.Latency.Max != max(reps[0].Latency.Max, reps[1].Latency.Max) {
		t.Errorf("merged latency %+v from %+v and %+v", m.Latency, reps[0].Latency, reps[1].Latency)
	}
	if _, err := Merge([]*Report{reps[0], {Mode: ModeLifecycle}}); err == nil {
		t.Error("merged runs of two modes")
	}
}

func TestCSVAndHTML(t *testing.T) {
	t.Parallel()
	srv := newFixedDelayServer(t, 4, 5*time.Millisecond)
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeCreate, Rate: 100, Duration: 1500 * time.Millisecond, Mix: []MixEntry{{Model: "m", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	th, _ := ParseThreshold("p99<1ms")
	rep.Check([]Threshold{th})
	var b bytes.Buffer
	if err := rep.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(rows) != len(rep.Series)+1 || len(rows) < 3 || rows[0][0] != "t" || rows[0][4] != "completed" {
		t.Fatalf("csv %v %v", rows, err)
	}
	b.Reset()
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"<svg", "Latency of the units completed each second", "Units a second", "Latency of completed units", "p99&lt;1ms", "not met", "<polyline"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// Nothing to fetch: no script, no source, no address but the SVG
	// namespace and the target's own.
	rest := strings.ReplaceAll(strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, ""), srv.URL, "")
	for _, bad := range []string{"<script", "src=", "href=", "http://", "https://", "url("} {
		if strings.Contains(rest, bad) {
			t.Errorf("the page has %q: it must need nothing from the network", bad)
		}
	}
}

func TestParseScenario(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario("create=2, query=10\n# a comment\nlist=1,cancel=1 # the rest\n")
	if err != nil || len(sc) != 4 || sc[0] != (ScenarioEntry{ActionCreate, 2}) || sc[1].Weight != 10 || sc[3] != (ScenarioEntry{ActionCancel, 1}) {
		t.Errorf("ParseScenario = %+v, %v", sc, err)
	}
	for _, bad := range []string{"", "# nothing", "create", "create=0", "create=x", "stream=1", "create=1,create=2"} {
		if _, err := ParseScenario(bad); err == nil {
			t.Errorf("ParseScenario(%q) accepted", bad)
		}
	}
}

// TestScenarioMixesActionsByWeight: a scenario run's units are creates,
// queries, lists and cancels in its weights' proportions; queries and
// cancels go to the tasks it created (each canceled once, a 409 for a task
// already ended being a right answer); the breakdown gives each action.
func TestScenarioMixesActionsByWeight(t *testing.T) {
	t.Parallel()
	api := newTaskAPI(t)
	const n = 4000
	sc, _ := ParseScenario("create=4,query=3,list=2,cancel=1")
	rep, err := Run(context.Background(), Config{BaseURL: api.URL, Keys: []string{"k"}, Mode: ModeScenario, Scenario: sc,
		Concurrency: 4, Requests: n, Mix: []MixEntry{{Model: "m", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounted(t, rep)
	if rep.Completed != n || rep.Failed != 0 {
		t.Fatalf("completed %d, failed %d %v", rep.Completed, rep.Failed, rep.Failures)
	}
	by := rep.Breakdown["action"]
	// Expected 4/10, 3/10, 2/10 and 1/10 of the units (queries and cancels
	// before any task exists are creates). Each count is binomial and is
	// allowed five standard deviations, sqrt(n·p·(1−p)): a right mix fails
	// about once in two million runs, and at n units a weight off by a
	// quarter (a cancel's ±25 % is 5.2 deviations) is caught.
	for action, p := range map[string]float64{ActionCreate: .4, ActionQuery: .3, ActionList: .2, ActionCancel: .1} {
		want, tol := n*p, 5*math.Sqrt(n*p*(1-p))
		if g := by[action]; g == nil || math.Abs(float64(g.Completed)-want) > tol {
			t.Errorf("%s: %+v, want %.0f ± %.0f", action, g, want, tol)
		}
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for id, n := range api.cancels {
		if n != 1 {
			t.Errorf("task %s canceled %d times", id, n)
		}
		if _, ok := api.models[id]; !ok {
			t.Errorf("canceled %s, which the run did not create", id)
		}
	}
	for id := range api.queries {
		if _, ok := api.models[id]; !ok {
			t.Errorf("queried %s, which the run did not create", id)
		}
	}
	if c := rep.Ops[OpCancel]; c == nil || c.Status["409"] == 0 || c.Status["200"] == 0 || c.Errors != 0 {
		t.Errorf("cancel op %+v", c)
	}
}
