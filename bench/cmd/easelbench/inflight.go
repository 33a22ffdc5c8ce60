package main

// The inflight part (--only inflight) measures slow generations. A real
// generation is a 10–70 s wait on an upstream, not CPU work: this measures
// how many such waits one worker holds at once, and what holding them costs
// it in memory and Redis connections.
//
// One bin/worker runs the procedural generator with EASEL_SIM_DELAY =
// --sim-delay, and a render that costs nothing after the first: every task
// is the same standard-model picture (pro would take twice the delay), which
// the generator paints once and then serves from its cache. It runs with
// its own default concurrency, what a deployment gets, unless
// --worker-concurrency is given; --worker-env comes last. The benchmark
// keeps --inflight tasks outstanding (queued or processing), created through
// bin/gateway as a client would: it ramps up to that number over one sim
// delay, then tops up every 100 ms as tasks complete. The tasks are spread
// over --inflight-accounts accounts, by default enough for at most 50 each:
// the workers give one account at most its fair share of running
// generations (EASEL_ACCOUNT_MAX_RUNNING, 64 by default), and the jobs of an
// account over it go back to their queue and are tried again a second
// later, which is not what this measures. The ramp spreads the
// starts, and so the completions, over time: tasks all created at once
// would all complete one sim delay later, in a wave, and a rate over a
// window would depend on how many waves it caught.
//
// The steady state starts one sim delay after the first task was created,
// when the first tasks complete and in-flight has reached its plateau, and
// lasts a whole number of sim delays, as many as fit in --duration: a worker
// with fewer slots than outstanding tasks frees and refills them in waves,
// and a whole number of them is counted.
//
// From the task records, read after the run (exact start and complete
// times): the peak number of tasks processing at once, the mean in the
// steady state, the completions in it, and the completion rate against mean
// in-flight ÷ sim delay (Little's law: 1 when a task takes its sim delay and
// nothing more). Sampled every second: Asynq's active and pending counts,
// the account's outstanding tasks, the worker's VmRSS and VmHWM, its Redis
// connections (CLIENT LIST, by the client name pkg/redisconn gives them,
// worker:<host>:<pid>) and its CPU time.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/loadgen"
)

// inflightResult is the inflight part's figures. Times are seconds from
// the first create.
type inflightResult struct {
	Requested int     `json:"requested"` // --inflight: tasks kept outstanding
	Accounts  int     `json:"accounts"`  // --inflight-accounts: they were spread over
	SimDelayS float64 `json:"sim_delay_s"`
	DurationS float64 `json:"duration_s"`
	// WorkerEnv is what the benchmark set of the worker's configuration
	// beyond its own: EASEL_WORKER_CONCURRENCY if --worker-concurrency was
	// given, then --worker-env.
	WorkerEnv []string `json:"worker_env,omitempty"`

	// The steady state.
	WindowStartS float64 `json:"window_start_s"`
	WindowEndS   float64 `json:"window_end_s"`

	// PeakInflight is the most tasks processing (started, not ended) at
	// once, from the task records; PeakActive the most Asynq active jobs
	// in a per-second sample.
	PeakInflight int `json:"peak_inflight"`
	PeakActive   int `json:"peak_asynq_active"`
	// MeanInflight is the mean number of tasks processing over the steady
	// state, CompletedWindow the tasks completed in it.
	MeanInflight    float64 `json:"mean_inflight_window"`
	CompletedWindow int     `json:"completed_window"`
	// RatePerS is CompletedWindow over the steady state's length,
	// ExpectedPerS MeanInflight ÷ sim delay, Ratio the first over the
	// second (absent with nothing in flight).
	RatePerS     float64  `json:"completions_per_s"`
	ExpectedPerS float64  `json:"expected_per_s"`
	Ratio        *float64 `json:"ratio,omitempty"`
	// ProcessingMeanS is the mean start-to-complete time of the tasks
	// completed in the steady state.
	ProcessingMeanS float64 `json:"processing_time_mean_s"`

	Created   int64 `json:"created"`
	Completed int   `json:"completed"`
	Failed    int   `json:"failed"`

	// PeakRSSMB is the worker's VmHWM at the end (absent if unreadable);
	// PeakRedisConns the most connections named for it in a sample.
	PeakRSSMB      *float64 `json:"worker_peak_rss_mb,omitempty"`
	PeakRedisConns int      `json:"worker_peak_redis_connections"`
	// The worker's CPU over the samples nearest the steady state's ends:
	// cores used, and microseconds per task completed between them.
	WorkerCPUCores     float64 `json:"worker_cpu_cores_window"`
	WorkerCPUPerTaskUs float64 `json:"worker_cpu_us_per_task_window"`

	Samples []inflightSample `json:"samples"`
}

// inflightSample is one per-second sample.
type inflightSample struct {
	T float64 `json:"t_s"`
	// From the task records after the run: tasks processing at T, and
	// completed since the sample before.
	Inflight  int `json:"inflight"`
	Completed int `json:"completed"`
	// Sampled live.
	Active      int     `json:"asynq_active"`
	Pending     int     `json:"asynq_pending"`
	Retry       int     `json:"asynq_retry"` // also jobs waiting for their account's share
	Outstanding int64   `json:"outstanding"`
	RSSMB       float64 `json:"worker_rss_mb"` // 0: unreadable
	HWMMB       float64 `json:"worker_hwm_mb"` // 0: unreadable
	RedisConns  int     `json:"worker_redis_connections"`
	CPUS        float64 `json:"worker_cpu_s"`
}

// inflightTargets: a worker holds its in-flight tasks within
// these bounds and completes them at in-flight ÷ sim delay, within 10 %.
const (
	inflightMaxRSSMB  = 512
	inflightMaxConns  = 64
	inflightRatioLow  = 0.9
	inflightRatioHigh = 1.1
)

// inflightMix is one standard-model picture, again and again.
var inflightMix = []loadgen.MixEntry{{Model: "lumen-2.5-flash-image", AspectRatio: "1:1", Weight: 1}}

func (e *env) inflight(ctx context.Context, res *results) error {
	o := e.o
	dur := o.inflightDuration()
	if err := e.fresh(ctx); err != nil {
		return err
	}
	accts, err := e.feedAccounts(ctx)
	if err != nil {
		return err
	}
	gw, base, err := e.startGateway(ctx)
	if err != nil {
		return err
	}
	defer gw.stop()
	waddr := freeAddr()
	wk, err := startProc("worker", filepath.Join(o.binDir, "worker"), nil,
		e.inflightWorkerEnv("EASEL_WORKER_HTTP_ADDR="+waddr, "EASEL_SIM_DELAY="+o.simDelay.String()), io.Discard)
	if err != nil {
		return err
	}
	// Killed, not stopped: a graceful shutdown would wait for the tasks in
	// flight, which no longer matter.
	defer wk.kill()
	workerLog := filepath.Join(logDir(), "worker.log")
	if err := wk.waitReady(ctx, "http://"+waddr+"/readyz"); err != nil {
		return fmt.Errorf("worker not ready (its log: %s): %w", workerLog, err)
	}
	pid := wk.cmd.Process.Pid

	st := e.tasks()
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	t0 := time.Now()
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	var created atomic.Int64
	fed := make(chan error, 1)
	go func() { fed <- e.feed(feedCtx, st, accts, base, client, t0, &created) }()

	ir := &inflightResult{Requested: o.inflight, Accounts: len(accts), SimDelayS: o.simDelay.Seconds(), DurationS: dur.Seconds()}
	if o.workerConcurrencySet {
		ir.WorkerEnv = append(ir.WorkerEnv, "EASEL_WORKER_CONCURRENCY="+strconv.Itoa(o.workerConcurrency))
	}
	ir.WorkerEnv = append(ir.WorkerEnv, o.workerEnv...)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(t0) < dur {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fed:
			return fmt.Errorf("creating tasks: %w", err)
		case <-tick.C:
		}
		if ok, err := wk.exited(); ok {
			return fmt.Errorf("the worker exited during the run (its log: %s): %v", workerLog, err)
		}
		s, err := e.inflightSample(ctx, insp, st, accts, pid)
		if err != nil {
			return err
		}
		s.T = time.Since(t0).Seconds()
		ir.Samples = append(ir.Samples, s)
		ir.PeakActive = max(ir.PeakActive, s.Active)
		ir.PeakRedisConns = max(ir.PeakRedisConns, s.RedisConns)
		if n := len(ir.Samples); n%5 == 0 || s.T >= dur.Seconds() {
			e.logf("  %3.0fs: Asynq active %d, pending %d; outstanding %d; worker RSS %.1f MB, Redis connections %d",
				s.T, s.Active, s.Pending, s.Outstanding, s.RSSMB, s.RedisConns)
		}
	}
	stopFeed()
	if err := <-fed; err != nil {
		return fmt.Errorf("creating tasks: %w", err)
	}
	ir.Created = created.Load()
	if _, hwm := memStatus(pid); !math.IsNaN(hwm) {
		ir.PeakRSSMB = ptr(hwm)
	}
	wk.kill()

	var spans []taskSpan
	each := func(t *task.Task) error {
		switch t.Status {
		case task.Completed:
			ir.Completed++
		case task.Failed:
			ir.Failed++
		}
		if t.StartTime.IsZero() {
			return nil // still queued
		}
		sp := taskSpan{start: since(t0, t.StartTime), end: math.Inf(1), completed: t.Status == task.Completed}
		if !t.CompleteTime.IsZero() {
			sp.end = since(t0, t.CompleteTime)
		}
		spans = append(spans, sp)
		return nil
	}
	for _, a := range accts {
		if err := eachTask(ctx, st, a.id, each); err != nil {
			return fmt.Errorf("task records: %w", err)
		}
	}
	ir.analyse(spans)
	res.Inflight = ir
	e.logf("  in flight: peak %d, mean %.1f; %.2f completions/s against %.2f/s (in-flight ÷ sim delay); %d completed, %d failed, %d created",
		ir.PeakInflight, ir.MeanInflight, ir.RatePerS, ir.ExpectedPerS, ir.Completed, ir.Failed, ir.Created)
	return nil
}

// inflightWorkerEnv is the inflight worker's environment: the services'
// with extra, the worker's own default concurrency (what a deployment runs
// with) unless --worker-concurrency was given, then --worker-env.
func (e *env) inflightWorkerEnv(extra ...string) []string {
	if e.o.workerConcurrencySet {
		extra = append([]string{"EASEL_WORKER_CONCURRENCY=" + strconv.Itoa(e.o.workerConcurrency)}, extra...)
	}
	return append(e.serviceEnv(extra...), e.o.workerEnv...)
}

// since is t's time in seconds after t0, at the task records' millisecond
// precision.
func since(t0, t time.Time) float64 {
	return float64(t.UnixMilli()-t0.UnixMilli()) / 1000
}

// feedAccount is an account the inflight part creates tasks for, and the
// share of the outstanding tasks it keeps.
type feedAccount struct {
	id, key string
	share   int
}

// feedAccounts makes the accounts of the inflight part: the fresh account
// and more like it, nothing limiting their creates, --inflight shared out
// among them.
func (e *env) feedAccounts(ctx context.Context) ([]feedAccount, error) {
	n, k := e.o.inflight, e.o.inflightAccounts()
	st := e.accounts()
	accts := []feedAccount{{id: e.acct, key: e.keys[0]}}
	for i := 1; i < k; i++ {
		a, err := st.Create(ctx, account.Spec{Name: fmt.Sprintf("bench-%d", i), Credits: 1e12, RateLimit: 1_000_000, QueryRateLimit: 1_000_000, MaxInflight: 1_000_000})
		if err != nil {
			return nil, fmt.Errorf("bench account: %w", err)
		}
		key, _, err := st.CreateKey(ctx, a.ID)
		if err != nil {
			return nil, fmt.Errorf("bench key: %w", err)
		}
		accts = append(accts, feedAccount{id: a.ID, key: key})
	}
	for i := range accts {
		accts[i].share = n / k
		if i < n%k {
			accts[i].share++
		}
	}
	return accts, nil
}

// feed keeps each account's share of e.o.inflight tasks outstanding until
// ctx is done: it ramps up over one sim delay, then tops up what completed,
// every 100 ms.
func (e *env) feed(ctx context.Context, st *store.Tasks, accts []feedAccount, base string, client *http.Client, t0 time.Time, created *atomic.Int64) error {
	ramp := e.o.simDelay
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		el := time.Since(t0)
		for _, a := range accts {
			target := a.share
			if el < ramp {
				target = int(math.Ceil(float64(a.share) * float64(el) / float64(ramp)))
			}
			out, err := st.Inflight(ctx, a.id)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			need := target - int(out)
			if need <= 0 {
				continue
			}
			rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Keys: []string{a.key}, Mode: loadgen.ModeCreate, Concurrency: min(need, 32),
				Requests: int64(need), Mix: inflightMix, Client: client, Timeout: 10 * time.Second})
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			op := rep.Ops[loadgen.OpCreate]
			if op == nil {
				return fmt.Errorf("no creates in a run of %d", need)
			}
			created.Add(op.OK)
			if op.OK != int64(need) {
				return fmt.Errorf("created %d of %d: status codes %v, errors %v", op.OK, need, op.Status, op.ErrorTypes)
			}
		}
	}
}

// inflightSample reads what is sampled live.
func (e *env) inflightSample(ctx context.Context, insp *asynq.Inspector, st *store.Tasks, accts []feedAccount, pid int) (inflightSample, error) {
	var s inflightSample
	// The queues something was ever queued on: Easel's, on a private Redis.
	queues, err := insp.Queues()
	if err != nil {
		return s, fmt.Errorf("asynq queues: %w", err)
	}
	for _, q := range queues {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			return s, fmt.Errorf("queue %s: %w", q, err)
		}
		s.Active += info.Active
		s.Pending += info.Pending
		s.Retry += info.Retry
	}
	for _, a := range accts {
		out, err := st.Inflight(ctx, a.id)
		if err != nil {
			return s, err
		}
		s.Outstanding += out
	}
	rss, hwm := memStatus(pid)
	s.RSSMB, s.HWMMB = zeroNaN(rss), zeroNaN(hwm)
	if s.RedisConns, err = clientConns(ctx, e.rdb, "worker:", ":"+strconv.Itoa(pid)); err != nil {
		return s, err
	}
	if cpu, err := cpuTime(pid); err == nil {
		s.CPUS = cpu.Seconds()
	}
	return s, nil
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// clientConns counts the connections, on every server (every master of a
// cluster), whose client name has prefix and suffix: pkg/redisconn names a
// process's connections <service>:<host>:<pid>.
func clientConns(ctx context.Context, rdb redis.UniversalClient, prefix, suffix string) (int, error) {
	var n atomic.Int64
	err := eachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLIENT LIST on %s: %w", c.Options().Addr, err)
		}
		n.Add(int64(countClients(list, prefix, suffix)))
		return nil
	})
	return int(n.Load()), err
}

// countClients counts the lines of a CLIENT LIST reply whose name has
// prefix and suffix.
func countClients(list, prefix, suffix string) int {
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if name, ok := strings.CutPrefix(f, "name="); ok && strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix) {
				n++
			}
		}
	}
	return n
}

// taskSpan is a task's time processing, in seconds from the first create.
type taskSpan struct {
	start, end float64 // end is +Inf while it is processing
	completed  bool    // it ended completed, not failed
}

// steadyWindow is the steady state of a run of dur with generations of d:
// from d, for as many whole d as fit (at least the rest of the run).
func steadyWindow(d, dur float64) (from, to float64) {
	k := math.Floor((dur - d) / d)
	if k < 1 {
		return d, dur
	}
	return d, d + k*d
}

// analyse computes the figures of the task records' spans and fills the
// samples' processing and completion counts.
func (r *inflightResult) analyse(spans []taskSpan) {
	d := r.SimDelayS
	ws, we := steadyWindow(d, r.DurationS)
	r.WindowStartS, r.WindowEndS = ws, we

	type event struct {
		t     float64
		delta int
	}
	var events []event
	var overlap, processing float64
	for _, s := range spans {
		events = append(events, event{s.start, 1})
		if !math.IsInf(s.end, 1) {
			events = append(events, event{s.end, -1})
		}
		if lo, hi := math.Max(s.start, ws), math.Min(s.end, we); hi > lo {
			overlap += hi - lo
		}
		if s.completed && s.end >= ws && s.end < we {
			r.CompletedWindow++
			processing += s.end - s.start
		}
	}
	// Ends before starts at the same time: a slot freed and taken again
	// is not two tasks at once.
	sort.Slice(events, func(i, j int) bool {
		if events[i].t != events[j].t {
			return events[i].t < events[j].t
		}
		return events[i].delta < events[j].delta
	})
	cur := 0
	for _, ev := range events {
		cur += ev.delta
		r.PeakInflight = max(r.PeakInflight, cur)
	}
	r.MeanInflight = overlap / (we - ws)
	r.RatePerS = float64(r.CompletedWindow) / (we - ws)
	r.ExpectedPerS = r.MeanInflight / d
	if r.ExpectedPerS > 0 {
		r.Ratio = ptr(r.RatePerS / r.ExpectedPerS)
	}
	if r.CompletedWindow > 0 {
		r.ProcessingMeanS = processing / float64(r.CompletedWindow)
	}

	prev := math.Inf(-1)
	for i := range r.Samples {
		s := &r.Samples[i]
		s.Inflight, s.Completed = 0, 0
		for _, sp := range spans {
			if sp.start <= s.T && s.T < sp.end {
				s.Inflight++
			}
			if sp.completed && sp.end > prev && sp.end <= s.T {
				s.Completed++
			}
		}
		prev = s.T
	}

	// CPU between the samples nearest the window's ends, inside it.
	first, last := -1, -1
	for i, s := range r.Samples {
		if s.T >= ws && first < 0 {
			first = i
		}
		if s.T <= we {
			last = i
		}
	}
	if first >= 0 && last > first {
		a, b := r.Samples[first], r.Samples[last]
		r.WorkerCPUCores = (b.CPUS - a.CPUS) / (b.T - a.T)
		n := 0
		for _, s := range r.Samples[first+1 : last+1] {
			n += s.Completed
		}
		if n > 0 {
			r.WorkerCPUPerTaskUs = (b.CPUS - a.CPUS) * 1e6 / float64(n)
		}
	}
}

// rows adds the inflight figures to the results table; one "not run" row if
// the part did not run.
func (r *inflightResult) rows(w io.Writer) {
	if r == nil {
		fmt.Fprintf(w, "slow generations in flight (--only inflight)\t%s\t\t\t\t%s\t\n", notRun, notRun)
		return
	}
	delay := time.Duration(r.SimDelayS * float64(time.Second))
	fmt.Fprintf(w, "in flight, peak (%d outstanding, sim delay %s)\t%d\t\t\t>= %d\t%s\t\n", r.Requested, delay, r.PeakInflight, r.Requested, yes(r.PeakInflight >= r.Requested))
	fmt.Fprintf(w, "in flight, mean in steady state\t%.1f\t\t\t\t\t\n", r.MeanInflight)
	ratio, ratioMet := "unknown", "unknown"
	if r.Ratio != nil {
		ratio, ratioMet = fmt.Sprintf("%.2f", *r.Ratio), yes(*r.Ratio >= inflightRatioLow && *r.Ratio <= inflightRatioHigh)
	}
	fmt.Fprintf(w, "in flight, completions in steady state (baseline: in flight ÷ sim delay)\t%.2f /s\t%.2f /s\t%s\t%.2f to %.2f\t%s\t\n", r.RatePerS, r.ExpectedPerS, ratio, inflightRatioLow, inflightRatioHigh, ratioMet)
	rss, rssMet := "unknown", "unknown"
	if r.PeakRSSMB != nil {
		rss, rssMet = fmt.Sprintf("%.1f MB", *r.PeakRSSMB), yes(*r.PeakRSSMB <= inflightMaxRSSMB)
	}
	fmt.Fprintf(w, "in flight, worker peak RSS\t%s\t\t\t<= %d MB\t%s\t\n", rss, inflightMaxRSSMB, rssMet)
	fmt.Fprintf(w, "in flight, worker Redis connections, peak\t%d\t\t\t<= %d\t%s\t\n", r.PeakRedisConns, inflightMaxConns, yes(r.PeakRedisConns <= inflightMaxConns))
}

// details is the inflight run's line under the table.
func (r *inflightResult) details(w io.Writer) {
	if r == nil {
		return
	}
	env := ", the worker's own concurrency"
	if len(r.WorkerEnv) > 0 {
		env = ", worker env " + strings.Join(r.WorkerEnv, " ")
	}
	fmt.Fprintf(w, "in flight: %d tasks outstanding over %d account(s), sim delay %gs, run %gs%s; steady state %gs to %gs: %d completed, processing time mean %.2f s; "+
		"in all %d created, %d completed, %d failed; Asynq active peak %d; worker CPU in steady state %.2f cores, %.0f µs per task completed\n",
		r.Requested, r.Accounts, r.SimDelayS, r.DurationS, env, r.WindowStartS, r.WindowEndS, r.CompletedWindow, r.ProcessingMeanS,
		r.Created, r.Completed, r.Failed, r.PeakActive, r.WorkerCPUCores, r.WorkerCPUPerTaskUs)
}
