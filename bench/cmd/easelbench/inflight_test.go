package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	testprograms "github.com/easelhq/easel/tools/testkit/programs"
)

func TestSteadyWindow(t *testing.T) {
	for _, tt := range []struct{ d, dur, from, to float64 }{
		{30, 90, 30, 90},
		{30, 60, 30, 60},
		{30, 75, 30, 60}, // whole sim delays only
		{30, 45, 30, 45}, // less than one: the rest of the run
		{2, 8, 2, 8},
		{3, 10, 3, 9},
	} {
		if from, to := steadyWindow(tt.d, tt.dur); from != tt.from || to != tt.to {
			t.Errorf("steadyWindow(%v, %v) = %v, %v; want %v, %v", tt.d, tt.dur, from, to, tt.from, tt.to)
		}
	}
}

// spansOf simulates a worker with slots slots running generations of d
// (plus overhead) on a backlog kept at outstanding tasks, created at rate
// per second from 0.1 s until there are outstanding: each slot starts the
// next task as soon as it is free and one is queued.
func spansOf(slots, outstanding int, rate, d, overhead, until float64) []taskSpan {
	var spans []taskSpan
	free := make([]float64, slots) // when each slot is free again
	queued := []float64{}          // arrival times of queued tasks
	created := 0
	next := 0.1
	for {
		// Arrivals: the ramp, then one per completion (topped up at once).
		for created < outstanding && next <= until {
			queued = append(queued, next)
			created++
			next += 1 / rate
		}
		// The slot free soonest takes the oldest queued task.
		i := 0
		for j := range free {
			if free[j] < free[i] {
				i = j
			}
		}
		if len(queued) == 0 {
			break
		}
		start := math.Max(free[i], queued[0])
		if start > until {
			break
		}
		queued = queued[1:]
		end := start + d + overhead
		if end > until {
			spans = append(spans, taskSpan{start: start, end: math.Inf(1)})
		} else {
			spans = append(spans, taskSpan{start: start, end: end, completed: true})
			queued = append(queued, end) // topped up
		}
		free[i] = end
		sortFloats(queued)
	}
	return spans
}

func sortFloats(v []float64) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// TestAnalyse checks the figures on simulated runs: a worker with more
// slots than outstanding tasks holds them all and completes them smoothly;
// one with fewer frees and refills its slots in waves, which the steady
// state counts whole; one that takes longer than the sim delay per task
// completes fewer than in-flight ÷ sim delay.
func TestAnalyse(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		slots, outstanding    int
		d, overhead, dur      float64
		peak                  int
		ratioLow, ratioHigh   float64
		meanLow, meanHigh     float64
		processingLow, procHi float64
	}{
		{"all in flight", 3000, 2000, 30, 0.05, 90, 2000, 0.97, 1.03, 1950, 2000, 30, 30.1},
		{"capped by the worker", 16, 2000, 30, 0.05, 90, 16, 0.97, 1.03, 15.9, 16.001, 30, 30.1},
		{"capped, a run not a whole number of delays", 16, 2000, 30, 0.05, 80, 16, 0.97, 1.03, 15.9, 16.001, 30, 30.1},
		{"slow tasks", 3000, 2000, 30, 6, 90, 2000, 0.75, 0.88, 1950, 2000, 36, 36.1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &inflightResult{Requested: tt.outstanding, SimDelayS: tt.d, DurationS: tt.dur}
			for s := 1.0; s <= tt.dur; s++ {
				r.Samples = append(r.Samples, inflightSample{T: s, CPUS: s * 0.5})
			}
			spans := spansOf(tt.slots, tt.outstanding, float64(tt.outstanding)/tt.d, tt.d, tt.overhead, tt.dur)
			r.analyse(spans)
			if r.PeakInflight != tt.peak {
				t.Errorf("peak %d; want %d", r.PeakInflight, tt.peak)
			}
			if r.Ratio == nil || *r.Ratio < tt.ratioLow || *r.Ratio > tt.ratioHigh {
				t.Errorf("ratio %v (%.2f/s against %.2f/s, %d completed in %v to %v); want %v to %v", deref(r.Ratio), r.RatePerS, r.ExpectedPerS, r.CompletedWindow, r.WindowStartS, r.WindowEndS, tt.ratioLow, tt.ratioHigh)
			}
			if r.MeanInflight < tt.meanLow || r.MeanInflight > tt.meanHigh {
				t.Errorf("mean in flight %v; want %v to %v", r.MeanInflight, tt.meanLow, tt.meanHigh)
			}
			if r.ProcessingMeanS < tt.processingLow || r.ProcessingMeanS > tt.procHi {
				t.Errorf("processing time %v; want %v to %v", r.ProcessingMeanS, tt.processingLow, tt.procHi)
			}
			// The samples' counts agree with the spans.
			total := 0
			for _, s := range r.Samples {
				total += s.Completed
				if s.Inflight > r.PeakInflight {
					t.Errorf("sample at %v: %d in flight, over the peak %d", s.T, s.Inflight, r.PeakInflight)
				}
			}
			done := 0
			for _, s := range spans {
				if s.completed {
					done++
				}
			}
			if total != done {
				t.Errorf("samples count %d completions; the spans %d", total, done)
			}
			if math.Abs(r.WorkerCPUCores-0.5) > 1e-9 {
				t.Errorf("worker cpu %v cores; want 0.5", r.WorkerCPUCores)
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// Nothing in flight: no ratio (it would be 0/0), and printing says so.
func TestAnalyseNothing(t *testing.T) {
	r := &inflightResult{Requested: 10, SimDelayS: 2, DurationS: 8}
	r.analyse(nil)
	if r.Ratio != nil || r.PeakInflight != 0 || r.MeanInflight != 0 {
		t.Errorf("no spans: ratio %v, peak %d, mean %v", deref(r.Ratio), r.PeakInflight, r.MeanInflight)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("JSON: %v", err)
	}
	var b strings.Builder
	r.rows(&b)
	if strings.Contains(b.String(), "NaN") || !strings.Contains(b.String(), "unknown") {
		t.Errorf("rows:\n%s", b.String())
	}
}

func TestCountClients(t *testing.T) {
	list := "id=3 addr=127.0.0.1:50001 laddr=127.0.0.1:6379 fd=8 name=worker:host-1:4242 age=1 cmd=evalsha\n" +
		"id=4 addr=127.0.0.1:50002 laddr=127.0.0.1:6379 fd=9 name=worker:host-1:4242 age=1 cmd=blpop\n" +
		"id=5 addr=127.0.0.1:50003 laddr=127.0.0.1:6379 fd=10 name=worker:host-1:42420 age=1 cmd=ping\n" +
		"id=6 addr=127.0.0.1:50004 laddr=127.0.0.1:6379 fd=11 name=gateway:host-1:4242 age=1 cmd=evalsha\n" +
		"id=7 addr=127.0.0.1:50005 laddr=127.0.0.1:6379 fd=12 name= age=1 cmd=client|list\n"
	if n := countClients(list, "worker:", ":4242"); n != 2 {
		t.Errorf("%d connections of worker 4242; want 2", n)
	}
}

func TestOptionsCheck(t *testing.T) {
	ok := options{only: "inflight", inflight: 50, simDelay: 2 * time.Second, duration: 8 * time.Second}
	if err := ok.check(); err != nil {
		t.Fatalf("%+v: %v", ok, err)
	}
	if d := (options{only: "inflight"}).inflightDuration(); d != defaultInflightDuration {
		t.Errorf("inflight duration %v by default; want %v", d, defaultInflightDuration)
	}
	if d := (options{only: "http"}).httpDuration(); d != defaultHTTPDuration {
		t.Errorf("http duration %v by default; want %v", d, defaultHTTPDuration)
	}
	for name, tt := range map[string]struct {
		change func(*options)
		want   string
	}{
		"unknown part":        {func(o *options) { o.only = "inflite" }, "unknown part"},
		"no sim delay":        {func(o *options) { o.simDelay = 0 }, "--sim-delay"},
		"run too short":       {func(o *options) { o.duration = 2 * time.Second }, "--duration"},
		"default too short":   {func(o *options) { o.duration, o.simDelay = 0, 2*time.Minute }, "--duration 1m30s"},
		"no tasks":            {func(o *options) { o.inflight = 0 }, "--inflight"},
		"negative accounts":   {func(o *options) { o.accounts = -1 }, "--inflight-accounts"},
		"env without =":       {func(o *options) { o.workerEnv = envList{"EASEL_WORKER_CONCURRENCY"} }, "KEY=VALUE"},
		"env sim delay":       {func(o *options) { o.workerEnv = envList{"EASEL_SIM_DELAY=1s"} }, "--sim-delay"},
		"env redis":           {func(o *options) { o.workerEnv = envList{"EASEL_REDIS_URL=redis://x:1"} }, "sets"},
		"env with empty name": {func(o *options) { o.workerEnv = envList{"=1"} }, "KEY=VALUE"},
	} {
		o := ok
		tt.change(&o)
		if err := o.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error about %s", name, err, tt.want)
		}
	}
	// The inflight checks only bind when the part runs.
	if err := (options{only: "http,drain", simDelay: 0}).check(); err != nil {
		t.Errorf("http,drain without a sim delay: %v", err)
	}
	for _, tt := range []struct{ n, accounts, want int }{{2000, 0, 40}, {200, 0, 4}, {50, 0, 1}, {51, 0, 2}, {1, 0, 1}, {2000, 1, 1}, {10, 20, 10}} {
		if got := (options{inflight: tt.n, accounts: tt.accounts}).inflightAccounts(); got != tt.want {
			t.Errorf("--inflight %d --inflight-accounts %d: %d accounts; want %d", tt.n, tt.accounts, got, tt.want)
		}
	}
}

// The inflight worker runs with its own default concurrency unless
// --worker-concurrency is given; the drain and pickup workers with the
// baseline's; --worker-env comes last, and wins.
func TestWorkerEnv(t *testing.T) {
	concurrency := func(env []string) []string {
		var out []string
		for _, kv := range env {
			if strings.HasPrefix(kv, "EASEL_WORKER_CONCURRENCY=") {
				out = append(out, kv)
			}
		}
		return out
	}
	e := &env{o: options{workerConcurrency: 16}, redis: &benchRedis{url: "redis://127.0.0.1:1"}}
	if got := concurrency(e.workerEnv()); !slices.Equal(got, []string{"EASEL_WORKER_CONCURRENCY=16"}) {
		t.Errorf("drain worker: %v", got)
	}
	if got := concurrency(e.inflightWorkerEnv()); len(got) != 0 {
		t.Errorf("inflight worker without --worker-concurrency: %v; want the worker's default", got)
	}
	e.o.workerConcurrencySet = true
	if got := concurrency(e.inflightWorkerEnv()); !slices.Equal(got, []string{"EASEL_WORKER_CONCURRENCY=16"}) {
		t.Errorf("inflight worker with --worker-concurrency 16: %v", got)
	}
	e.o.workerEnv = envList{"EASEL_WORKER_CONCURRENCY=2000", "GOGC=200"}
	for name, env := range map[string][]string{"drain": e.workerEnv("X=1"), "inflight": e.inflightWorkerEnv("X=1")} {
		if got := concurrency(env); got[len(got)-1] != "EASEL_WORKER_CONCURRENCY=2000" {
			t.Errorf("%s worker with --worker-env: %v; want it last", name, got)
		}
		if !slices.Contains(env, "GOGC=200") || !slices.Contains(env, "X=1") {
			t.Errorf("%s worker env %v", name, env)
		}
	}
	// exec keeps the last value of a key: the one the worker sees.
	cmd := exec.Command("sh", "-c", "echo $EASEL_WORKER_CONCURRENCY")
	cmd.Env = e.workerEnv()
	if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "2000" {
		t.Errorf("the worker would see EASEL_WORKER_CONCURRENCY=%q (%v); want 2000", out, err)
	}
}

func TestCommandLineInflight(t *testing.T) {
	o := options{rounds: 3, concurrency: 64, drain: 10000, only: "inflight", redis: redisSingle, inflight: 200, simDelay: 30 * time.Second,
		workerEnv: envList{"EASEL_WORKER_CONCURRENCY=2000"}}
	want := "make bench (easelbench --rounds 3 --duration 8s --concurrency 64 --drain 10000 --only inflight --inflight 200 --sim-delay 30s, inflight run 1m30s --worker-env EASEL_WORKER_CONCURRENCY=2000)"
	if got := commandLine(o); got != want {
		t.Errorf("commandLine = %q; want %q", got, want)
	}
}

// programs are bin/gateway and bin/worker built from this tree once per
// test run, as make build does, or `make test`'s.
var programs = testprograms.New()

func builtBinaries() (string, error) { return programs.Build("gateway", "worker") }

func TestMain(m *testing.M) {
	// The benchmark runs its baselines as its own subcommands (os.Args[0]
	// baseline-...): under test, this binary.
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "baseline-") {
		main()
		os.Exit(0)
	}
	code := m.Run()
	programs.Remove()
	os.Exit(code)
}

// TestInflightRun runs the inflight part against the gateway and worker
// built from this tree, briefly: a worker with fewer slots than outstanding
// tasks holds as many as its slots, one with more holds them all, and both
// complete them at in-flight ÷ sim delay.
func TestInflightRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and the worker for 8 s, twice")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	for _, tt := range []struct {
		name                 string
		concurrency          int
		accounts             string
		peakLow, peakHigh    int
		wantAccounts         int
		connsHigh            int
		slotsBelowOutstanded bool
	}{
		{"worker slots below outstanding", 8, "0", 8, 8, 1, 64, true},
		{"worker slots above outstanding, three accounts", 100, "3", 40, 50, 3, 64, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin, err := builtBinaries()
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "inflight.json")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{"--bin", bin, "--only", "inflight", "--inflight", "50", "--sim-delay", "2s", "--duration", "8s",
				"--inflight-accounts", tt.accounts, "--json", out}
			// Either way of setting the worker's concurrency.
			if tt.slotsBelowOutstanded {
				args = append(args, "--worker-concurrency", strconv.Itoa(tt.concurrency))
			} else {
				args = append(args, "--worker-env", fmt.Sprintf("EASEL_WORKER_CONCURRENCY=%d", tt.concurrency))
			}
			if err := run(ctx, args); err != nil {
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
			r := res.Inflight
			if r == nil {
				t.Fatalf("no inflight figures: %s", b)
			}
			if len(res.CreateReal) != 0 || res.PickupP50 != nil || res.GatewayRSSMB != nil || len(res.Parts) != 1 || res.Parts[0] != "inflight" {
				t.Errorf("figures of parts that did not run, or parts %v: %s", res.Parts, b)
			}
			if r.Accounts != tt.wantAccounts {
				t.Errorf("%d accounts; want %d", r.Accounts, tt.wantAccounts)
			}
			if r.PeakInflight < tt.peakLow || r.PeakInflight > tt.peakHigh {
				t.Errorf("peak in flight %d; want %d to %d", r.PeakInflight, tt.peakLow, tt.peakHigh)
			}
			if r.PeakActive < tt.peakLow || r.PeakActive > tt.peakHigh+2 {
				t.Errorf("peak Asynq active %d; want about %d to %d", r.PeakActive, tt.peakLow, tt.peakHigh)
			}
			// A shared machine: generous bounds, the figure is 1 when all is well.
			if r.Ratio == nil || *r.Ratio < 0.75 || *r.Ratio > 1.25 {
				t.Errorf("ratio %v (%.2f/s against %.2f/s); want about 1", deref(r.Ratio), r.RatePerS, r.ExpectedPerS)
			}
			if r.ProcessingMeanS < 2 || r.ProcessingMeanS > 2.5 {
				t.Errorf("processing time %v s; want a little over the 2 s sim delay", r.ProcessingMeanS)
			}
			if r.Failed != 0 || r.CompletedWindow == 0 || r.Created < 50 {
				t.Errorf("%d failed, %d completed in the window, %d created", r.Failed, r.CompletedWindow, r.Created)
			}
			if r.PeakRSSMB == nil || *r.PeakRSSMB < 5 || *r.PeakRSSMB > 512 {
				t.Errorf("worker peak RSS %v MB", deref(r.PeakRSSMB))
			}
			if r.PeakRedisConns < 1 || r.PeakRedisConns > tt.connsHigh {
				t.Errorf("worker Redis connections %d; want 1 to %d", r.PeakRedisConns, tt.connsHigh)
			}
			if len(r.Samples) < 7 {
				t.Errorf("%d samples in 8 s", len(r.Samples))
			}
			pendingSeen := false
			for _, s := range r.Samples {
				if s.RSSMB <= 0 || s.RedisConns < 1 {
					t.Errorf("sample %+v", s)
				}
				if s.Pending > 0 {
					pendingSeen = true
				}
			}
			// With fewer slots than tasks, the rest wait on the queue.
			if pendingSeen != tt.slotsBelowOutstanded && tt.slotsBelowOutstanded {
				t.Errorf("no task pending with %d slots for 50 tasks", tt.concurrency)
			}
		})
	}
}
