package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarise(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 down to 1, unsorted
	}
	for _, tt := range []struct {
		name string
		in   []float64
		want waitLatency
	}{
		{"none", nil, waitLatency{}},
		{"one", []float64{7}, waitLatency{Count: 1, P50: 7, P90: 7, P99: 7, Max: 7, Mean: 7}},
		{"1 to 100", hundred, waitLatency{Count: 100, P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}},
		{"two", []float64{3, 1}, waitLatency{Count: 2, P50: 1, P90: 3, P99: 3, Max: 3, Mean: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarise(tt.in); got != tt.want {
				t.Errorf("summarise = %+v; want %+v", got, tt.want)
			}
		})
	}
	if got := seenOnly([]float64{1, -1, 0.5, -1}); !slices.Equal(got, []float64{1, 0.5}) {
		t.Errorf("seenOnly = %v", got)
	}
}

// The sampled tasks are spread over the waiters, started and given
// progress in turn.
func TestWaitersOf(t *testing.T) {
	e := &env{keys: []string{"k1", "k2"}}
	for _, tt := range []struct{ n, changes, starts int }{{10, 10, 5}, {10000, 500, 250}, {200, 50, 25}, {7, 3, 2}} {
		ids := make([]string, tt.n)
		for i := range ids {
			ids[i] = strings.Repeat("x", i%5) + string(rune('a'+i%26))
		}
		ws := e.waitersOf(ids, tt.changes)
		s := sampled(ws)
		if len(ws) != tt.n || len(s) != tt.changes {
			t.Fatalf("%d waiters, %d changes: %d waiters, %d sampled", tt.n, tt.changes, len(ws), len(s))
		}
		starts := 0
		for i, w := range s {
			if want := []changeKind{startChange, progressChange}[i%2]; w.kind != want {
				t.Errorf("%d/%d: change %d is %v; want %v", tt.n, tt.changes, i, w.kind, want)
			}
			if w.kind == startChange {
				starts++
			}
		}
		if starts != tt.starts {
			t.Errorf("%d/%d: %d starts; want %d", tt.n, tt.changes, starts, tt.starts)
		}
		if ws[0].key != "k1" || ws[1%tt.n].key != []string{"k1", "k2"}[1%tt.n] {
			t.Errorf("keys not spread: %q %q", ws[0].key, ws[1%tt.n].key)
		}
	}
}

func TestShows(t *testing.T) {
	for _, tt := range []struct {
		kind     changeKind
		status   string
		progress int
		want     bool
	}{
		{startChange, "processing", 0, true},
		{startChange, "pending", 0, false},
		{progressChange, "processing", 0, false},
		{progressChange, "processing", waitersProgress, true},
		{progressChange, "completed", 100, false},
		{noChange, "processing", waitersProgress, false},
	} {
		if got := shows(tt.kind, tt.status, tt.progress); got != tt.want {
			t.Errorf("shows(%v, %s, %d) = %v; want %v", tt.kind, tt.status, tt.progress, got, tt.want)
		}
	}
}

func TestWaitersOptions(t *testing.T) {
	ok := options{only: "waiters", waiters: 100, waitersChanges: 10, waitersSpacing: 15 * time.Millisecond, waitersRate: 1000}
	if err := ok.check(); err != nil {
		t.Fatalf("%+v: %v", ok, err)
	}
	for name, tt := range map[string]struct {
		change func(*options)
		want   string
	}{
		"no waiters":             {func(o *options) { o.waiters = 0 }, "--waiters 0"},
		"no changes":             {func(o *options) { o.waitersChanges = 0 }, "--waiters-changes 0"},
		"more changes than wait": {func(o *options) { o.waitersChanges = 101 }, "at most --waiters"},
		"negative spacing":       {func(o *options) { o.waitersSpacing = -time.Millisecond }, "--waiters-spacing"},
		"negative rate":          {func(o *options) { o.waitersRate = -1 }, "--waiters-rate"},
		"ramp too slow":          {func(o *options) { o.waitersRate = 2 }, "60 s wait"},
		"changes past the wait":  {func(o *options) { o.waitersChanges, o.waitersSpacing = 100, time.Second }, "60 s wait"},
		"gateway env without =":  {func(o *options) { o.gatewayEnv = envList{"GOGC"} }, "KEY=VALUE"},
		"gateway env address":    {func(o *options) { o.gatewayEnv = envList{"EASEL_HTTP_ADDR=:1"} }, "sets"},
	} {
		o := ok
		tt.change(&o)
		if err := o.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error about %s", name, err, tt.want)
		}
	}
	// Only checked when the part runs.
	if err := (options{only: "http"}).check(); err != nil {
		t.Errorf("http without waiters settings: %v", err)
	}
	want := "make bench (easelbench --rounds 1 --duration 8s --concurrency 64 --drain 10000 --only waiters --waiters 100 --waiters-rate 1000 --waiters-changes 10 --waiters-spacing 15ms --gateway-env GOMEMLIMIT=200MiB)"
	o := ok
	o.rounds, o.concurrency, o.drain, o.redis, o.gatewayEnv = 1, 64, 10000, redisSingle, envList{"GOMEMLIMIT=200MiB"}
	if got := commandLine(o); got != want {
		t.Errorf("commandLine = %q; want %q", got, want)
	}
	var b strings.Builder
	(*waitersResult)(nil).rows(&b)
	if !strings.Contains(b.String(), notRun) {
		t.Errorf("rows of a part not run: %q", b.String())
	}
}

// TestWaitersRun runs the waiters part against the gateway built from this
// tree, small: two rounds (each order of the phases) of 200 requests held,
// 50 changes each phase. Every change must reach its waiting request and
// every figure be read; no bound on times (a shared machine).
func TestWaitersRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	bin, err := builtBinaries()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "waiters.json")
	profiles := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const held, changes = 200, 50
	if err := run(ctx, []string{"--bin", bin, "--only", "waiters", "--rounds", "2", "--waiters", "200", "--waiters-changes", "50",
		"--waiters-spacing", "10ms", "--waiters-profile", profiles, "--json", out}); err != nil {
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
	r := res.Waiters
	if r == nil {
		t.Fatalf("no waiters figures: %s", b)
	}
	if !slices.Equal(res.Parts, []string{"waiters"}) || len(res.CreateReal) != 0 || res.GatewayRSSMB != nil || res.Inflight != nil {
		t.Errorf("figures of parts that did not run, or parts %v", res.Parts)
	}
	if r.Waiters != held || r.Changes != changes || r.WaitS != 60 || r.FileLimit < held {
		t.Errorf("settings %d held, %d changes, wait %d, file limit %d", r.Waiters, r.Changes, r.WaitS, r.FileLimit)
	}
	if r.Failed != 0 || r.Missed != 0 || r.HeldMin != held || r.HeldAtStart != held {
		t.Errorf("%d failed, %d missed, held %d at the start and %d at least; want 0, 0, %d", r.Failed, r.Missed, r.HeldAtStart, r.HeldMin, held)
	}
	for name, l := range map[string]waitLatency{"loaded": r.Loaded, "quiet": r.Quiet} {
		if l.Count != 2*changes || l.P50 <= 0 || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.Max {
			t.Errorf("%s latency %+v; want %d changes, ordered percentiles", name, l, 2*changes)
		}
	}
	if r.RSSHeldMB == nil || *r.RSSHeldMB < 5 || r.HWMHeldMB == nil || *r.HWMHeldMB < *r.RSSHeldMB || r.PerWaiterKB == nil {
		t.Errorf("gateway memory: RSS %v, VmHWM %v, per waiter %v", deref(r.RSSHeldMB), deref(r.HWMHeldMB), deref(r.PerWaiterKB))
	}
	if len(r.Rounds) != 2 || !slices.Equal(r.Rounds[0].Order, []string{"quiet", "loaded"}) || !slices.Equal(r.Rounds[1].Order, []string{"loaded", "quiet"}) {
		t.Fatalf("rounds %+v; want two, the phases' order alternating", r.Rounds)
	}
	for i, rd := range r.Rounds {
		for _, p := range []struct {
			name    string
			ph      waitersPhase
			waiting int
		}{{"loaded", rd.Loaded, held}, {"quiet", rd.Quiet, changes}} {
			ph := p.ph
			if ph.Waiting != p.waiting || ph.HeldAtStart != p.waiting || ph.Changes != changes || ph.Seen != changes || ph.Missed != 0 || ph.Failed != 0 {
				t.Errorf("round %d %s: waiting %d, held %d, %d changes, %d seen, %d missed, %d failed %v", i+1, p.name, ph.Waiting, ph.HeldAtStart, ph.Changes, ph.Seen, ph.Missed, ph.Failed, ph.Errors)
			}
			if len(ph.LatenciesMs) != changes || slices.Min(ph.LatenciesMs) <= 0 {
				t.Errorf("round %d %s: latencies %v", i+1, p.name, ph.LatenciesMs)
			}
			// The gateway had a file and two goroutines (its connection's
			// and its background read's) for each request, and one
			// subscription for all of them.
			if ph.FDs < p.waiting || ph.Goroutines < 2*p.waiting || ph.EventSubscribers != 1 || ph.RedisConns < 1 || ph.RSSHeldMB <= 0 || ph.StoreCallP50Ms <= 0 {
				t.Errorf("round %d %s: %d files, %d goroutines, %d subscribers, %d Redis connections, RSS %v MB, store call %v ms",
					i+1, p.name, ph.FDs, ph.Goroutines, ph.EventSubscribers, ph.RedisConns, ph.RSSHeldMB, ph.StoreCallP50Ms)
			}
		}
	}
	for _, f := range []string{"waiters-heap-round1.pb.gz", "waiters-goroutine-round1.txt", "waiters-heap-gc-round1.txt"} {
		if st, err := os.Stat(filepath.Join(profiles, f)); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v", f, err)
		}
	}
	var table strings.Builder
	res.print(&table)
	if s := table.String(); strings.Contains(s, "NaN") || !strings.Contains(s, "waiters: change to answer p99") {
		t.Errorf("table:\n%s", s)
	}
}
