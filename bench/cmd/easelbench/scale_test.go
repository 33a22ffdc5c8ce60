package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|list:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=7,usec=7,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	m := map[string]int64{}
	if n := parseCommandStats(info, m); n != 130 {
		t.Errorf("total %d; want 130", n)
	}
	if m["evalsha"] != 120 || m["client|list"] != 3 || m["get"] != 7 || len(m) != 3 {
		t.Errorf("calls %v", m)
	}
	// Summed over servers.
	if n := parseCommandStats(info, m); n != 130 || m["evalsha"] != 240 {
		t.Errorf("second server: %d, %v", n, m)
	}
	if n := parseCommandStats("# Commandstats\r\n", map[string]int64{}); n != 0 {
		t.Errorf("no commands: %d", n)
	}
}

func TestParseCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n"
	if got := parseCPU(info); math.Abs(got-3.75) > 1e-9 {
		t.Errorf("parseCPU = %v; want 3.75 (the children's left out)", got)
	}
	m := parseInfoInts("# Memory\r\nused_memory:1000\r\nused_memory_human:1K\r\nmem_clients_normal:20\r\n")
	if m["used_memory"] != 1000 || m["mem_clients_normal"] != 20 || len(m) != 2 {
		t.Errorf("parseInfoInts = %v", m)
	}
}

func TestTopCommands(t *testing.T) {
	a := map[string]int64{"get": 10, "set": 5, "evalsha": 100}
	b := map[string]int64{"get": 30, "set": 5, "evalsha": 150, "del": 1}
	got := topCommands(a, b, 2)
	if len(got) != 2 || got["evalsha"] != 50 || got["get"] != 20 {
		t.Errorf("topCommands = %v", got)
	}
	if s := fmtTop(got, 10); s != "evalsha 5.0/s, get 2.0/s" {
		t.Errorf("fmtTop = %q", s)
	}
}

func TestInterleave(t *testing.T) {
	got := interleave([]int{3, 1, 2})
	if want := []int32{0, 1, 2, 0, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("interleave = %v; want %v", got, want)
	}
	if got := interleave([]int{0, 0}); len(got) != 0 {
		t.Errorf("nothing: %v", got)
	}
}

func TestFairBacklogs(t *testing.T) {
	// 8 slots of 200 ms: 40 completions a second; 75 s of them, half as
	// much again, shared 2/1/1.
	got := fairBacklogs([]int{2, 1, 1}, 8, 200*time.Millisecond, 15*time.Second, 60*time.Second)
	if want := []int{2250, 1125, 1125}; !slices.Equal(got, want) {
		t.Errorf("fairBacklogs = %v; want %v", got, want)
	}
	if got := fairBacklogs([]int{2, 1, 1}, 8, 200*time.Millisecond, 0, time.Second); !slices.Equal(got, []int{fairMinBacklog, fairMinBacklog, fairMinBacklog}) {
		t.Errorf("short window: %v; want the minimum", got)
	}
}

func TestFairShares(t *testing.T) {
	for _, tt := range []struct {
		completed []int
		ok        bool
	}{
		{[]int{500, 250, 250}, true},
		{[]int{525, 237, 238}, false}, // 52.5, 23.7: below 23.75
		{[]int{524, 238, 238}, true},  // 52.4, 23.8, 23.8
		{[]int{530, 235, 235}, false}, // 53 > 52.5
		{[]int{480, 262, 258}, true},  // 48, 26.2, 25.8
		{[]int{470, 265, 265}, false}, // 47 < 47.5
		{[]int{0, 0, 0}, false},       // nothing completed
	} {
		share, target, ok := fairShares(tt.completed, []int{2, 1, 1})
		if ok != tt.ok {
			t.Errorf("%v: shares %v of %v: %v; want %v", tt.completed, share, target, ok, tt.ok)
		}
		if !slices.Equal(target, []float64{50, 25, 25}) {
			t.Errorf("targets %v", target)
		}
	}
}

func TestScaleFlags(t *testing.T) {
	var l intList
	if err := l.Set("1, 10k,100000"); err != nil || !slices.Equal(l, intList{1, 10000, 100000}) {
		t.Errorf("intList %v, %v", l, err)
	}
	for _, bad := range []string{"", ",", "x", "-1", "1.5k"} {
		var l intList
		if err := l.Set(bad); err == nil {
			t.Errorf("intList %q accepted: %v", bad, l)
		}
	}
	var c countFlag
	if err := c.Set("1m"); err != nil || c != 1_000_000 {
		t.Errorf("countFlag 1m: %d, %v", c, err)
	}
	if _, err := parseScaleParts("idle, bytes"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "idel", "idle,requeu"} {
		if _, err := parseScaleParts(bad); err == nil {
			t.Errorf("--scale-parts %q accepted", bad)
		}
	}
	ok := options{only: "scale", redis: redisSingle, scaleParts: defaultScaleParts, scaleAccounts: intList{1, 10000}, scaleBacklog: intList{3000},
		scaleWarmup: time.Second, scaleMeasure: time.Second, scaleFairWindow: time.Second, scaleRequeue: 1000, scaleRequeueAccounts: 10,
		scaleRequeueSamples: 3, scaleBytes: 100, scaleConcurrency: 64, scaleProgress: 10, scaleProgressDelay: time.Second}
	if err := ok.check(); err != nil {
		t.Fatalf("%+v: %v", ok, err)
	}
	for name, tt := range map[string]struct {
		change func(*options)
		want   string
	}{
		"parts":              {func(o *options) { o.scaleParts = "x" }, "--scale-parts"},
		"accounts unsorted":  {func(o *options) { o.scaleAccounts = intList{10, 1} }, "--scale-accounts"},
		"no accounts":        {func(o *options) { o.scaleAccounts = intList{0} }, "--scale-accounts"},
		"backlog":            {func(o *options) { o.scaleBacklog = intList{0} }, "--scale-backlog"},
		"backlog too big":    {func(o *options) { o.scaleBacklog = intList{2_000_000} }, "--scale-backlog"},
		"measure":            {func(o *options) { o.scaleMeasure = 0 }, "--scale-measure"},
		"requeue per acct":   {func(o *options) { o.scaleRequeue = 5 }, "--scale-requeue"},
		"requeue too many":   {func(o *options) { o.scaleRequeue, o.scaleRequeueAccounts = 3_000_000, 1 }, "--scale-requeue"},
		"samples":            {func(o *options) { o.scaleRequeueSamples = 0 }, "--scale-requeue-samples"},
		"bytes":              {func(o *options) { o.scaleBytes = 0 }, "--scale-bytes"},
		"concurrency":        {func(o *options) { o.scaleConcurrency = 0 }, "--scale-concurrency"},
		"negative bytes set": {func(o *options) { o.scaleBytesShare = -1 }, "--scale-bytes"},
		"progress":           {func(o *options) { o.scaleProgress = 0 }, "--scale-progress"},
		"progress too many":  {func(o *options) { o.scaleProgress = 10001 }, "--scale-progress"},
		"progress delay":     {func(o *options) { o.scaleProgressDelay = 0 }, "--scale-progress-delay"},
	} {
		o := ok
		tt.change(&o)
		if err := o.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error about %s", name, err, tt.want)
		}
	}
	// The scale checks bind only when the part runs.
	if err := (options{only: "http", scaleMeasure: 0}).check(); err != nil {
		t.Errorf("http without scale settings: %v", err)
	}
	if s := commandLine(ok); !strings.Contains(s, "--only scale --scale-parts "+defaultScaleParts+" --scale-accounts 1,10000 --scale-backlog 3000") {
		t.Errorf("command line %q", s)
	}
}

// TestCallRetry: a create refused for now (429, 503) is sent again and
// counted; another refusal is an error at once.
func TestCallRetry(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.Header.Get("Authorization") != "Bearer k":
			w.WriteHeader(http.StatusUnauthorized)
		case strings.HasSuffix(r.URL.Path, "/bad"):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":400,"msg":"unknown field weight"}`))
		case n <= 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte(`{"code":200,"msg":"success","data":{"task_id":"t1"}}`))
		}
	}))
	defer srv.Close()
	var retries atomic.Int64
	var out envelope[struct {
		TaskID string `json:"task_id"`
	}]
	if err := callRetry(context.Background(), srv.Client(), http.MethodPost, srv.URL+"/v1/task/create", "k", []byte("{}"), &out, &retries); err != nil {
		t.Fatal(err)
	}
	if out.Data.TaskID != "t1" || retries.Load() != 2 {
		t.Errorf("task %q after %d retries; want t1 after 2", out.Data.TaskID, retries.Load())
	}
	err := callRetry(context.Background(), srv.Client(), http.MethodPatch, srv.URL+"/bad", "k", []byte("{}"), nil, &retries)
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || retries.Load() != 2 {
		t.Errorf("a 400: %v after %d retries; want an apiError at once", err, retries.Load())
	}
}

// TestScalePrint: the part not run is one row saying so; a run prints its
// figures with verdicts by the part's targets.
func TestScalePrint(t *testing.T) {
	var b bytes.Buffer
	filled().print(&b)
	var rows []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "scale") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 1 || !strings.Contains(rows[0], notRun) {
		t.Errorf("scale not run: %q", rows)
	}
	r := filled("scale")
	r.Parts = []string{"scale"}
	w := scaleWindow{Seconds: 30, CommandsPerS: 350, RedisCPUPct: 2, WorkerCPUPct: 3}
	r.Scale = &scaleResult{Parts: []string{"idle", "backlog", "fairness", "requeue", "bytes"},
		Idle: []scaleIdle{{Accounts: 1, Added: 1, PerAccount: 90000, Window: scaleWindow{CommandsPerS: 900}},
			{Accounts: 10000, Added: 9999, PerAccount: 700, Window: w}, {Accounts: 100000, Added: 90000, PerAccount: 650, Window: w},
			{Accounts: 200000, Added: 100000, PerAccount: 580, Window: w}},
		Backlog: []scaleBacklog{{Tasks: 3000, Share: 16, Window: scaleWindow{CommandsPerS: 2000, WorkerCPUPct: 4}, OtherStartS: ptr(0.5)},
			{Tasks: 100000, Share: 16, Window: scaleWindow{RedisCPUPct: 6, WorkerCPUPct: 1}, OtherStatus: "pending", OtherTimeoutS: 120}},
		Fairness: &scaleFairness{Weights: []int{2, 1, 1}, SharePct: []float64{50.1, 25, 24.9}, TargetPct: []float64{50, 25, 25}, Met: true},
		Requeue:  &scaleRequeue{Pending: 100000, MaxS: ptr(31.0), Samples: []requeueSample{{BackS: ptr(31.0)}}},
		Progress: &scaleProgress{Tasks: 1000, GenerationS: 20, CommandsPerTask: 77.8, WritesPerTask: 3.01},
		Bytes:    &scaleBytes{Tasks: 20000, PerPending: 1400, PerCompleted: 950},
	}
	b.Reset()
	r.print(&b)
	out := b.String()
	want := map[string]string{
		"scale idle, 1 accounts: Redis commands/s":                            "", // no target under 10,000
		"scale idle, 10000 accounts: Redis commands/s":                        "yes",
		"scale backlog, 3000 tasks (share 16): Redis commands/s":              "NO",
		"scale backlog, 3000 tasks (share 16): worker CPU":                    "yes",
		"scale backlog, 3000 tasks (share 16): another account's task":        "yes",
		"scale backlog, 100000 tasks (share 16): Redis CPU":                   "NO",
		"scale backlog, 100000 tasks (share 16): worker CPU":                  "yes",
		"scale backlog, 100000 tasks (share 16): another account's task":      "NO",
		"scale fairness, weights 2/1/1":                                       "yes",
		"scale requeue, 100000 pending: deleted job back in its queue":        "yes",
		"scale progress, 1000 generations of 20 s: progress writes a task":    "yes",
		"scale progress, 1000 generations of 20 s: Redis commands a task":     "NO",
		"scale bytes, 20000 tasks: Redis memory per pending task":             "yes",
		"scale bytes, 20000 tasks: Redis memory per completed task":           "NO",
		"scale idle, 10000 accounts: Redis / worker / gateway CPU":            "",
		"scale backlog, 100000 tasks (share 16): Redis commands/s":            "",
		"scale requeue, 100000 pending: Redis commands/s, Redis / worker CPU": "",
		"scale backlog, 3000 tasks (share 16): Redis CPU":                     "",
		"scale idle, 1 accounts: Redis / worker / gateway CPU":                "",
		"scale idle, 1 accounts: Redis memory per account":                    "absent", // too few added to tell
		"scale idle, 10000 accounts: Redis memory per account (9999 added)":   "",       // no target under 100,000
		"scale idle, 100000 accounts: Redis memory per account (90000 added)": "NO",
		"scale idle, 200000 accounts: Redis memory per account":               "yes",
		"scale: background work at scale (--only scale)\t":                    "absent",
	}
	lines := strings.Split(out, "\n")
	for row, v := range want {
		var found []string
		for _, l := range lines {
			if strings.HasPrefix(l, row) {
				found = append(found, l)
			}
		}
		if v == "absent" {
			if len(found) != 0 {
				t.Errorf("%q printed: %q", row, found)
			}
			continue
		}
		if len(found) != 1 {
			t.Errorf("%d rows %q:\n%s", len(found), row, out)
			continue
		}
		f := strings.Fields(found[0])
		last := f[len(f)-1]
		got := ""
		if last == "yes" || last == "NO" {
			got = last
		}
		if got != v {
			t.Errorf("%q: verdict %q; want %q", found[0], got, v)
		}
	}
	if strings.Contains(out, "NaN") || !strings.Contains(out, "\nscale idle, 10000 accounts (") {
		t.Errorf("output:\n%s", out)
	}
	// A deleted job that never came back fails, and says so.
	r.Scale.Requeue = &scaleRequeue{Pending: 100000, TimeoutS: 300, Samples: []requeueSample{{BackS: ptr(250.0)}, {}}}
	b.Reset()
	r.print(&b)
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "scale requeue, 100000 pending: deleted job") {
			if f := strings.Fields(l); f[len(f)-1] != "NO" || !strings.Contains(l, "1 of 2 not back in 300 s") {
				t.Errorf("a job not back: %q", l)
			}
		}
		if strings.HasPrefix(l, "scale requeue: ") && (strings.Contains(l, notRun) || !strings.Contains(l, "250.0 s, not in 300 s")) {
			t.Errorf("a job not back: %q", l)
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["scale"]; !ok {
		t.Errorf("no scale in the JSON: %s", js)
	}
	js, _ = json.Marshal(filled("http"))
	if strings.Contains(string(js), `"scale"`) {
		t.Errorf("scale in the JSON of a run without it: %s", js)
	}
}

// TestScaleRun runs every scale sub-part against the gateway and worker
// built from this tree, tiny: the figures must all be read, the other
// account's task must start, the deleted jobs come back, the weights
// count. No bound on costs (a shared machine, tiny sizes).
func TestScaleRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and the worker for about 40 s")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	bin, err := builtBinaries()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "scale.json")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := run(ctx, []string{"--bin", bin, "--only", "scale", "--scale-accounts", "1,50", "--scale-backlog", "40",
		"--scale-warmup", "1s", "--scale-measure", "2s", "--scale-fair-window", "4s", "--scale-requeue", "200", "--scale-requeue-accounts", "4",
		"--scale-requeue-samples", "2", "--scale-progress", "30", "--scale-progress-delay", "1s", "--scale-bytes", "200", "--json", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	r := res.Scale
	if r == nil || !slices.Equal(res.Parts, []string{"scale"}) || !slices.Equal(r.Parts, allScaleParts) {
		t.Fatalf("parts %v, scale %+v", res.Parts, r)
	}
	if len(r.Idle) != 2 || r.Idle[0].Accounts != 1 || r.Idle[1].Accounts != 50 || r.Idle[1].Added != 49 {
		t.Errorf("idle levels %+v", r.Idle)
	} else if r.Idle[1].PerAccount <= 0 {
		t.Errorf("Redis memory per idle account: %.0f B", r.Idle[1].PerAccount)
	}
	for _, l := range r.Idle {
		if w := l.Window; w.Seconds < 2 || w.CommandsPerS <= 0 || w.Keys <= 0 || w.UsedMemory <= 0 || w.WorkerRSSMB <= 0 || len(w.TopCommands) == 0 {
			t.Errorf("idle window %+v", w)
		}
	}
	if len(r.Backlog) != 1 {
		t.Fatalf("backlog %+v", r.Backlog)
	}
	bl := r.Backlog[0]
	if bl.Create.Tasks != 40 || bl.OtherStartS == nil || bl.OtherStatus != "processing" || bl.Window.CommandsPerS <= 0 {
		t.Errorf("backlog %+v", bl)
	}
	// 16 of the 40 running (a generation takes a minute), the rest parked.
	if bl.AsynqActive != backlogShare {
		t.Errorf("Asynq active %d; want the share, %d", bl.AsynqActive, backlogShare)
	}
	f := r.Fairness
	if f == nil || f.WeightError != "" || len(f.Completed) != 3 || slices.Contains(f.RanDry, true) {
		t.Fatalf("fairness %+v", f)
	}
	// Weight 2 completes more than either weight 1.
	if f.Completed[0] <= f.Completed[1] || f.Completed[0] <= f.Completed[2] || f.Completed[1] == 0 || f.Completed[2] == 0 {
		t.Errorf("completions %v with weights %v", f.Completed, f.Weights)
	}
	q := r.Requeue
	if q == nil || q.Create.Tasks != 200 || q.AsynqPending != 200 || len(q.Samples) != 2 || q.MaxS == nil || *q.MaxS > requeueTarget.Seconds() {
		t.Errorf("requeue %+v", q)
	}
	// 30 generations of 2 s, each at least one progress write (the
	// procedural generator's 8 steps of 250 ms: a rise of 20 points is due
	// after 5 s only, so the rest wait for the milestones), every one
	// streamed to its end.
	if pr := r.Progress; pr == nil || pr.Tasks != 30 || pr.GenerationS != 2 || pr.CommandsPerTask <= 20 || pr.WritesPerTask < 0.5 ||
		pr.WritesPerTask > progressTargetWrites || len(pr.Writes) != progressSamples || len(pr.Curve) == 0 || pr.ByCommand["evalsha"] < 3 {
		t.Errorf("progress %+v", pr)
	}
	by := r.Bytes
	if by == nil || by.CompletedTasks != 200 || by.PerPending <= 0 || by.PerCompleted <= 0 || by.Pending.Keys <= by.Before.Keys {
		t.Errorf("bytes %+v", by)
	}
	var table strings.Builder
	res.print(&table)
	if s := table.String(); strings.Contains(s, "NaN") || !strings.Contains(s, "scale requeue, 200 pending") {
		t.Errorf("table:\n%s", s)
	}
}
