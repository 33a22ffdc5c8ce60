package main

// The waiters part (--only waiters) measures the long-poll of GET
// /v1/task/query?task_id=...&wait=N: one gateway holding many waiting
// requests, woken through its one Redis Pub/Sub subscription. The targets:
// one gateway holds 10,000 waiting requests with its RSS at most 300 MB, and
// a change of a task's state reaches the client waiting on it within 50 ms
// at the 99th percentile.
//
// Each round starts bin/gateway (no worker: nothing runs the tasks) with no
// per-client connection cap (every request comes from the benchmark's one
// address), a pprof listener (for the goroutine count and, with
// --waiters-profile, the heap while the requests are held) and the file
// limit the benchmark raised for itself (RLIMIT_NOFILE to its hard limit;
// the gateway derives its total connection cap from it). The benchmark
// creates --waiters tasks through the gateway for the loaded phase and
// --waiters-changes more for the quiet one, and then, in an order that
// alternates between rounds:
//
//   - loaded: it holds one wait=60 request per task (a keep-alive
//     connection each, sent at --waiters-rate a second, 32 unwritten at
//     most; one refused, 503 or 429, is sent again after its Retry-After),
//     until all --waiters are written and unanswered, the gateway has a
//     file open for each and is idle; reads the gateway's VmRSS, VmHWM,
//     open files, goroutines, Redis connections and the subscribers of the
//     task events channel; and then changes --waiters-changes of the
//     tasks, one at a time, --waiters-spacing apart, with pkg/store, as a
//     worker does: half are started (pending → processing, StartTask), the
//     other half, started before the requests were sent, get progress 50
//     (SetProgress). The time is taken just before each store call; the
//     request waiting on that task takes the time its answer arrived and
//     checks the answer shows the change. Latency is the difference.
//   - quiet: the same with only the --waiters-changes requests of the
//     sampled tasks waiting, the baseline measured beside it.
//
// A request answered without its change (its wait ran out) is sent again at
// once, as a client would, so the number held stays up during the changes.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
)

// The part's targets (see the comment at the top of this file).
const (
	waitersMaxRSSMB = 300
	waitersP99Ms    = 50
)

const (
	// waitersWait is the wait every held request asks for, the most allowed.
	waitersWait = 60
	// waitersProgress is the progress the progress changes set.
	waitersProgress = 50
	// waitersRun is the run the benchmark starts tasks as.
	waitersRun = "easelbench-waiters"
	// waitersRamp is how many requests may be on their way (sent, not yet
	// written) at once while the requests are being held, sent at most
	// --waiters-rate a second. Unpaced, on this 2-core machine, the gateway
	// answered thousands of them 503 (its pool of 20 Redis connections
	// timed out, 400 ms, on the reads of the requests arriving): a request
	// refused (503, 429) is sent again after its Retry-After, through the
	// ramp, at most waitersRetries times.
	waitersRamp    = 32
	waitersRetries = 10
	// waitersCreators are the concurrent creates of the tasks.
	waitersCreators = 32
	// The gateway is idle, its requests held, when it uses less than
	// waitersIdleCores over waitersIdleOver; waited for at most
	// waitersSettleMax.
	waitersIdleCores = 0.1
	waitersIdleOver  = 250 * time.Millisecond
	waitersSettleMax = 15 * time.Second
	// waitersFilesSpare are the files the benchmark keeps for everything but
	// the held connections.
	waitersFilesSpare = 256
)

// waitersResult is the waiters part's figures.
type waitersResult struct {
	Waiters   int            `json:"waiters"`      // --waiters: requests held in the loaded phase
	Changes   int            `json:"changes"`      // --waiters-changes: per phase and round
	SpacingMs float64        `json:"spacing_ms"`   // --waiters-spacing
	RatePerS  float64        `json:"rate_per_s"`   // --waiters-rate: requests sent per second while ramping (0: as fast as the ramp lets)
	WaitS     int            `json:"wait_s"`       // the wait each request asks for
	FileLimit uint64         `json:"file_limit"`   // RLIMIT_NOFILE of the benchmark, which the gateway inherits
	LoadAvg   string         `json:"load_average"` // /proc/loadavg when the part began
	LoadAvgAt string         `json:"load_average_end"`
	Rounds    []waitersRound `json:"rounds"`

	// Latencies, change to answer, pooled over the rounds.
	Loaded waitLatency `json:"loaded"`
	Quiet  waitLatency `json:"quiet"`
	// HeldMin is the fewest requests held (sent, unanswered) at any change
	// of a loaded phase; HeldAtStart the fewest when a loaded phase's
	// changes began.
	HeldMin     int `json:"held_min"`
	HeldAtStart int `json:"held_at_start"`
	// The gateway with the loaded phase's requests held: VmRSS and VmHWM,
	// the most over the rounds, and the growth of VmRSS per request held
	// (median of the rounds), in KB.
	RSSHeldMB   *float64 `json:"gateway_rss_held_mb,omitempty"`
	HWMHeldMB   *float64 `json:"gateway_hwm_held_mb,omitempty"`
	PerWaiterKB *float64 `json:"gateway_kb_per_waiter,omitempty"`
	// Failed are the requests that failed (an error or not 200), Missed
	// the changes no answer showed, over every phase and round.
	Failed int `json:"failed_requests"`
	Missed int `json:"missed_changes"`
	// Refused are the requests answered 503 or 429 and sent again.
	Refused int `json:"refused_requests"`
	// GatewayEnv is --gateway-env, added to the gateway's environment.
	GatewayEnv []string `json:"gateway_env,omitempty"`
}

// waitLatency summarises latencies, in milliseconds.
type waitLatency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// waitersRound is one round: both phases on one gateway.
type waitersRound struct {
	Order  []string     `json:"order"`
	Loaded waitersPhase `json:"loaded"`
	Quiet  waitersPhase `json:"quiet"`
}

// waitersPhase is one phase's figures.
type waitersPhase struct {
	Waiting int `json:"waiting"` // requests the phase holds
	// Held (client's view: written and unanswered, or being sent again at
	// once after an answer) when the changes began, and the fewest at any
	// change.
	HeldAtStart int `json:"held_at_start"`
	HeldMin     int `json:"held_min"`
	// RampS is the time from the first request sent to all held, SettleS
	// the time after it until the gateway was idle (below
	// waitersIdleCores; at most waitersSettleMax).
	RampS   float64 `json:"ramp_s"`
	SettleS float64 `json:"settle_s"`
	// Changes made, seen by their waiting request's answer, not seen.
	Changes int `json:"changes"`
	Seen    int `json:"seen"`
	Missed  int `json:"missed"`
	// Refused requests (503 or 429), sent again after their Retry-After;
	// Failed requests (anything else, or refused too often) and the first
	// few errors; Rearmed, answers without a change (the wait ran out),
	// sent again.
	Refused int      `json:"refused"`
	Failed  int      `json:"failed"`
	Errors  []string `json:"errors,omitempty"`
	Rearmed int      `json:"rearmed"`

	Latency     waitLatency `json:"latency"`
	LatenciesMs []float64   `json:"latencies_ms"` // in the order of the changes; -1: not seen
	// The store calls' own time (a Redis round trip and the script).
	StoreCallP50Ms float64 `json:"store_call_p50_ms"`
	StoreCallMaxMs float64 `json:"store_call_max_ms"`

	// The gateway before the requests were sent and with them held (0:
	// unreadable).
	RSSBeforeMB float64 `json:"gateway_rss_before_mb"`
	RSSHeldMB   float64 `json:"gateway_rss_held_mb"`
	HWMHeldMB   float64 `json:"gateway_hwm_held_mb"`
	PerWaiterKB float64 `json:"gateway_kb_per_waiter"`
	FDs         int     `json:"gateway_open_files"`
	Goroutines  int     `json:"gateway_goroutines"`
	// Redis connections named for the gateway, and subscribers of the
	// task events channel (the gateway's one subscription).
	RedisConns       int   `json:"gateway_redis_connections"`
	EventSubscribers int64 `json:"event_channel_subscribers"`
}

// changeKind is what the benchmark does to a sampled task.
type changeKind int

const (
	noChange       changeKind = iota
	startChange               // pending → processing
	progressChange            // processing, progress 0 → waitersProgress
)

// waiter is one task with a request held on it.
type waiter struct {
	id, key string
	kind    changeKind
	// changed is when the change was made, seen when an answer showing it
	// arrived: nanoseconds since the phase's base, 0 until then.
	changed, seen atomic.Int64
}

// raiseFileLimit raises the process's RLIMIT_NOFILE to its hard limit and
// returns it. Set explicitly, it is what the children (the gateway) get too.
func raiseFileLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	return r.Cur, nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func (e *env) waiters(ctx context.Context, res *results) error {
	o := e.o
	files, err := raiseFileLimit()
	if err != nil {
		return fmt.Errorf("file limit: %w", err)
	}
	// The benchmark holds a connection per request, the gateway one per
	// request too, each in its own process.
	if need := uint64(o.waiters + o.waitersChanges + waitersFilesSpare); files < need {
		return fmt.Errorf("--waiters %d needs about %d open files in the benchmark and in the gateway; the limit is %d (raise the hard limit: ulimit -Hn)", o.waiters, need, files)
	}
	wr := &waitersResult{Waiters: o.waiters, Changes: o.waitersChanges, SpacingMs: float64(o.waitersSpacing) / float64(time.Millisecond),
		RatePerS: o.waitersRate, WaitS: waitersWait, FileLimit: files, LoadAvg: loadAvg(), GatewayEnv: o.gatewayEnv}
	e.logf("  file limit %d, load average %s", files, wr.LoadAvg)
	for round := 1; round <= o.rounds; round++ {
		r, err := e.waitersRound(ctx, round)
		if err != nil {
			return err
		}
		wr.Rounds = append(wr.Rounds, r)
	}
	wr.LoadAvgAt = loadAvg()
	wr.summarise()
	res.Waiters = wr
	return nil
}

// summarise pools the rounds' figures.
func (r *waitersResult) summarise() {
	var loaded, quiet, perWaiter []float64
	r.HeldMin, r.HeldAtStart = math.MaxInt, math.MaxInt
	for _, rd := range r.Rounds {
		for _, p := range []*waitersPhase{&rd.Loaded, &rd.Quiet} {
			r.Failed += p.Failed
			r.Refused += p.Refused
			r.Missed += p.Missed
		}
		loaded = append(loaded, seenOnly(rd.Loaded.LatenciesMs)...)
		quiet = append(quiet, seenOnly(rd.Quiet.LatenciesMs)...)
		r.HeldMin = min(r.HeldMin, rd.Loaded.HeldMin)
		r.HeldAtStart = min(r.HeldAtStart, rd.Loaded.HeldAtStart)
		if rd.Loaded.RSSHeldMB > 0 {
			setMax(&r.RSSHeldMB, rd.Loaded.RSSHeldMB)
		}
		if rd.Loaded.HWMHeldMB > 0 {
			setMax(&r.HWMHeldMB, rd.Loaded.HWMHeldMB)
		}
		if rd.Loaded.PerWaiterKB > 0 {
			perWaiter = append(perWaiter, rd.Loaded.PerWaiterKB)
		}
	}
	if len(r.Rounds) == 0 {
		r.HeldMin, r.HeldAtStart = 0, 0
	}
	r.Loaded, r.Quiet = summarise(loaded), summarise(quiet)
	if len(perWaiter) > 0 {
		r.PerWaiterKB = ptr(median(perWaiter))
	}
}

// seenOnly drops the changes no answer showed (-1).
func seenOnly(v []float64) []float64 {
	var out []float64
	for _, x := range v {
		if x >= 0 {
			out = append(out, x)
		}
	}
	return out
}

// summarise computes the percentiles (nearest rank) of latencies in ms.
func summarise(v []float64) waitLatency {
	if len(v) == 0 {
		return waitLatency{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return waitLatency{Count: len(s), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

// waitersRound runs both phases on one gateway.
func (e *env) waitersRound(ctx context.Context, round int) (waitersRound, error) {
	o := e.o
	var wr waitersRound
	if err := e.fresh(ctx); err != nil {
		return wr, err
	}
	pprofAddr := freeAddr()
	gw, base, err := e.startGatewayEnv(ctx,
		"EASEL_MAX_CONNS_PER_CLIENT=0", // every request comes from one address
		"EASEL_PPROF_ADDR="+pprofAddr,
		"EASEL_TASK_DEADLINE=30m",
		"EASEL_RATE_LIMIT=1000000", "EASEL_QUERY_RATE_LIMIT=1000000", "EASEL_MAX_INFLIGHT=1000000",
		// Every task admitted (pending, its job queued), none parked: the
		// part starts them through the store as a worker would, and a
		// parked task cannot start (Busy).
		"EASEL_ACCOUNT_MAX_RUNNING=0")
	if err != nil {
		return wr, err
	}
	defer gw.stop()
	e.logf("round %d/%d: creating %d tasks", round, o.rounds, o.waiters+o.waitersChanges)
	t0 := time.Now()
	ids, err := e.createMany(ctx, base, o.waiters+o.waitersChanges)
	if err != nil {
		return wr, err
	}
	e.logf("  created in %.1f s", time.Since(t0).Seconds())
	loadedIDs, quietIDs := ids[:o.waiters], ids[o.waiters:]

	ph := &waitersPhaseRun{e: e, gw: gw, base: base, pprof: "http://" + pprofAddr, st: e.tasks(), round: round}
	order := []string{"quiet", "loaded"}
	if round%2 == 0 {
		order = []string{"loaded", "quiet"}
	}
	wr.Order = order
	for i, name := range order {
		if i > 0 {
			time.Sleep(2 * time.Second) // the last phase's connections close
		}
		var err error
		switch name {
		case "quiet":
			e.logf("  quiet: %d requests waiting, %d changes", len(quietIDs), o.waitersChanges)
			wr.Quiet, err = ph.run(ctx, e.waitersOf(quietIDs, o.waitersChanges), false)
		case "loaded":
			e.logf("  loaded: %d requests waiting, %d changes", len(loadedIDs), o.waitersChanges)
			wr.Loaded, err = ph.run(ctx, e.waitersOf(loadedIDs, o.waitersChanges), true)
		}
		if err != nil {
			return wr, fmt.Errorf("%s: %w", name, err)
		}
	}
	if ok, err := gw.exited(); ok {
		return wr, fmt.Errorf("the gateway exited during the run (its log: %s): %v", filepath.Join(logDir(), "gateway.log"), err)
	}
	return wr, nil
}

// waitersOf makes a waiter per task, changes of them sampled evenly, the
// kinds alternating: start, progress, start...
func (e *env) waitersOf(ids []string, changes int) []*waiter {
	ws := make([]*waiter, len(ids))
	for i, id := range ids {
		ws[i] = &waiter{id: id, key: e.keys[i%len(e.keys)]}
	}
	for i := 0; i < changes; i++ {
		w := ws[i*len(ids)/changes]
		w.kind = startChange
		if i%2 == 1 {
			w.kind = progressChange
		}
	}
	return ws
}

// sampled are the waiters with a change, in the order they are made.
func sampled(ws []*waiter) []*waiter {
	var out []*waiter
	for _, w := range ws {
		if w.kind != noChange {
			out = append(out, w)
		}
	}
	return out
}

// createMany creates n standard tasks through the gateway and returns
// their ids, in no particular order.
func (e *env) createMany(ctx context.Context, base string, n int) ([]string, error) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: waitersCreators, MaxIdleConnsPerHost: waitersCreators}}
	defer client.CloseIdleConnections()
	body := []byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"a lighthouse on a cliff at dusk","aspect_ratio":"1:1"}}`)
	ids := make([]string, n)
	var next atomic.Int64
	errs := make(chan error, waitersCreators)
	var wg sync.WaitGroup
	for c := 0; c < waitersCreators; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				id, err := createTask(ctx, client, base, e.keys[i%len(e.keys)], body)
				if err != nil {
					errs <- fmt.Errorf("task %d of %d: %w", i+1, n, err)
					next.Store(int64(n)) // the others stop
					return
				}
				ids[i] = id
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return ids, ctx.Err()
}

// waitersPhaseRun runs phases against one gateway.
type waitersPhaseRun struct {
	e     *env
	gw    *proc
	base  string
	pprof string
	st    *store.Tasks
	round int
	// profiled: the heap was saved once (--waiters-profile).
	profiled bool
}

// phaseState is what a phase's requests share.
type phaseState struct {
	client *http.Client
	t0     time.Time // the base of waiter times
	held   atomic.Int64
	failed atomic.Int64
	refuse atomic.Int64
	rearm  atomic.Int64
	mu     sync.Mutex
	errs   []string
	seen   chan struct{} // a change seen
}

func (s *phaseState) now() int64 { return int64(time.Since(s.t0)) }

func (s *phaseState) fail(err error) {
	s.failed.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 5 {
		s.errs = append(s.errs, err.Error())
	}
}

// run holds a request on every waiter, makes the sampled changes, and
// measures. loaded: the gateway's figures are read once all are held.
func (p *waitersPhaseRun) run(ctx context.Context, ws []*waiter, loaded bool) (waitersPhase, error) {
	o := p.e.o
	out := waitersPhase{Waiting: len(ws)}
	pid := p.gw.cmd.Process.Pid
	sample := sampled(ws)
	// The progress changes need their tasks processing before the requests
	// wait on them.
	for _, w := range sample {
		if w.kind != progressChange {
			continue
		}
		if c, err := p.st.Start(ctx, p.e.acct, w.id, waitersRun); err != nil || c.Outcome != task.Applied {
			return out, fmt.Errorf("start %s before the wait: %v %v", w.id, c.Outcome, err)
		}
	}
	out.RSSBeforeMB, _ = memStatus(pid)
	out.RSSBeforeMB = zeroNaN(out.RSSBeforeMB)

	s := &phaseState{
		client: &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        len(ws) + waitersRamp,
			MaxIdleConnsPerHost: len(ws) + waitersRamp,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}},
		t0:   time.Now(),
		seen: make(chan struct{}, len(sample)),
	}
	defer s.client.CloseIdleConnections()
	holdCtx, stopHolding := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopHolding(); wg.Wait() }()
	ramp := make(chan struct{}, waitersRamp)
	var pace <-chan time.Time // nil: unpaced
	if o.waitersRate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.waitersRate))
		defer t.Stop()
		pace = t.C
	}
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.hold(holdCtx, s, w, pace, ramp)
		}()
	}
	// Until every request is held (sent, unanswered), or cannot be.
	want := int64(len(ws))
	deadline := time.Now().Add(50 * time.Second)
	for s.held.Load() < want-s.failed.Load() {
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%d of %d requests held after 50 s (%d failed: %v)", s.held.Load(), want, s.failed.Load(), s.errors())
		}
		if ok, err := p.gw.exited(); ok {
			return out, fmt.Errorf("the gateway exited (its log: %s): %v", filepath.Join(logDir(), "gateway.log"), err)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	out.RampS = time.Since(s.t0).Seconds()
	// The gateway has a file open for each (and its own few), and is done
	// with the requests' first reads: idle.
	settle := time.Now()
	for t := time.Now().Add(10 * time.Second); openFiles(pid) < len(ws) && time.Now().Before(t); {
		time.Sleep(20 * time.Millisecond)
	}
	if err := waitIdle(ctx, pid); err != nil {
		return out, err
	}
	out.SettleS = time.Since(settle).Seconds()
	rss, hwm := memStatus(pid)
	out.RSSHeldMB, out.HWMHeldMB = zeroNaN(rss), zeroNaN(hwm)
	if out.RSSHeldMB > 0 && out.RSSBeforeMB > 0 && len(ws) > 0 {
		out.PerWaiterKB = (out.RSSHeldMB - out.RSSBeforeMB) * 1024 / float64(len(ws))
	}
	out.FDs = openFiles(pid)
	out.Goroutines = goroutines(ctx, p.pprof)
	var err error
	if out.RedisConns, err = clientConns(ctx, p.e.rdb, "gateway:", ":"+strconv.Itoa(pid)); err != nil {
		return out, err
	}
	if out.EventSubscribers, err = subscribers(ctx, p.e.rdb, store.EventsChannel); err != nil {
		return out, err
	}
	if loaded && o.waitersProfile != "" && !p.profiled {
		p.profiled = true
		if err := saveProfiles(ctx, p.pprof, o.waitersProfile, p.round); err != nil {
			p.e.logf("  profiles: %v", err)
		}
	}
	out.HeldAtStart = int(s.held.Load())
	out.HeldMin = out.HeldAtStart
	p.e.logf("    %d held after %.1f s (%d refused and sent again), idle %.1f s later; gateway RSS %.1f MB (before %.1f MB, %.1f KB a request), VmHWM %.1f MB, %d open files, %d goroutines, %d Redis connections, %d event subscribers",
		out.HeldAtStart, out.RampS, s.refuse.Load(), out.SettleS, out.RSSHeldMB, out.RSSBeforeMB, out.PerWaiterKB, out.HWMHeldMB, out.FDs, out.Goroutines, out.RedisConns, out.EventSubscribers)

	// The changes, one at a time, paced.
	calls := make([]float64, 0, len(sample))
	start := time.Now()
	for i, w := range sample {
		if d := time.Until(start.Add(time.Duration(i) * o.waitersSpacing)); d > 0 {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(d):
			}
		}
		out.HeldMin = min(out.HeldMin, int(s.held.Load()))
		w.changed.Store(s.now()) // just before the store call
		began := time.Now()
		switch w.kind {
		case startChange:
			c, err := p.st.Start(ctx, p.e.acct, w.id, waitersRun)
			if err == nil && c.Outcome != task.Applied {
				err = fmt.Errorf("outcome %v", c.Outcome)
			}
			if err != nil {
				return out, fmt.Errorf("start %s: %w", w.id, err)
			}
		case progressChange:
			if _, err := p.st.Progress(ctx, p.e.acct, w.id, waitersRun, waitersProgress); err != nil {
				return out, err
			}
		}
		calls = append(calls, float64(time.Since(began))/float64(time.Millisecond))
		out.Changes++
	}
	// Every answer, or 10 s for the last ones.
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
answers:
	for out.Seen < len(sample) {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-s.seen:
			out.Seen++
		case <-wait.C:
			break answers
		}
	}
	stopHolding()
	wg.Wait()
	for _, w := range sample {
		if seen := w.seen.Load(); seen > 0 {
			out.LatenciesMs = append(out.LatenciesMs, math.Round(float64(seen-w.changed.Load())/1e3)/1e3)
		} else {
			out.LatenciesMs = append(out.LatenciesMs, -1)
			out.Missed++
		}
	}
	out.Seen = len(sample) - out.Missed
	out.Latency = summarise(seenOnly(out.LatenciesMs))
	if c := summarise(calls); c.Count > 0 {
		out.StoreCallP50Ms, out.StoreCallMaxMs = c.P50, c.Max
	}
	out.Failed, out.Refused, out.Rearmed, out.Errors = int(s.failed.Load()), int(s.refuse.Load()), int(s.rearm.Load()), s.errors()
	p.e.logf("    %d changes, %d seen, %d missed: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; %d requests failed, %d refused and sent again, %d answered unchanged and sent again",
		out.Changes, out.Seen, out.Missed, out.Latency.P50, out.Latency.P90, out.Latency.P99, out.Latency.Max, out.Failed, out.Refused, out.Rearmed)
	return out, nil
}

func (s *phaseState) errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

// hold keeps a request waiting on w's task until ctx ends: it sends
// wait=60, and sends it again when an answer comes without the change (the
// wait ran out) or once the change has been seen. The first request, and a
// request refused (503, 429; sent again after its Retry-After), wait for a
// place in ramp until they are written, and for a tick of pace (unless
// nil) before that.
func (p *waitersPhaseRun) hold(ctx context.Context, s *phaseState, w *waiter, pace <-chan time.Time, ramp chan struct{}) {
	viaRamp, refusals := true, 0
	// holding: the waiter has a request written and unanswered, or is
	// sending the next at once after an answer; it counts in s.held.
	var holding atomic.Bool
	letGo := func() {
		if holding.CompareAndSwap(true, false) {
			s.held.Add(-1)
		}
	}
	defer letGo()
	for ctx.Err() == nil {
		var release func()
		if viaRamp && pace != nil {
			select {
			case <-pace:
			case <-ctx.Done():
				return
			}
		}
		if viaRamp {
			select {
			case ramp <- struct{}{}:
			case <-ctx.Done():
				return
			}
			var once sync.Once
			release = func() { once.Do(func() { <-ramp }) }
		}
		st, progress, arrived, err := p.query(ctx, s, w, &holding, release)
		if release != nil {
			release()
		}
		var refused *refusedError
		if errors.As(err, &refused) && refusals < waitersRetries && ctx.Err() == nil {
			refusals++
			s.refuse.Add(1)
			letGo()
			select {
			case <-ctx.Done():
				return
			case <-time.After(refused.after):
			}
			viaRamp = true
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.fail(fmt.Errorf("task %s: %w", w.id, err))
			return
		}
		viaRamp, refusals = false, 0
		if w.seen.Load() == 0 && w.changed.Load() != 0 && shows(w.kind, st, progress) {
			w.seen.Store(arrived)
			s.seen <- struct{}{}
			continue // and wait again: the number held stays up
		}
		s.rearm.Add(1)
	}
}

// refusedError is a request refused for now (503, 429): try again after.
type refusedError struct {
	status int
	after  time.Duration
	body   string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("HTTP %d (Retry-After %s): %s", e.status, e.after, e.body)
}

// waitIdle waits until a process uses less than waitersIdleCores of CPU
// over waitersIdleOver, for at most waitersSettleMax.
func waitIdle(ctx context.Context, pid int) error {
	deadline := time.Now().Add(waitersSettleMax)
	last, err := cpuTime(pid)
	if err != nil {
		return err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(waitersIdleOver):
		}
		now, err := cpuTime(pid)
		if err != nil {
			return err
		}
		if used := now - last; float64(used) < waitersIdleCores*float64(waitersIdleOver) {
			return nil
		}
		last = now
	}
	return nil
}

// shows reports whether an answer shows a waiter's change.
func shows(k changeKind, status string, progress int) bool {
	switch k {
	case startChange:
		return status == "processing"
	case progressChange:
		return status == "processing" && progress == waitersProgress
	}
	return false
}

// query sends one wait request on w's task and returns the answer's status
// and progress and when it arrived. Once written, the waiter is holding
// (and counts in s.held) if it was not already; written calls release.
func (p *waitersPhaseRun) query(ctx context.Context, s *phaseState, w *waiter, holding *atomic.Bool, release func()) (status string, progress int, arrived int64, err error) {
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil && holding.CompareAndSwap(false, true) {
			s.held.Add(1)
		}
		if release != nil {
			release()
		}
	}}
	rctx, cancel := context.WithTimeout(ctx, (waitersWait+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, trace), http.MethodGet,
		p.base+"/v1/task/query?task_id="+w.id+"&wait="+strconv.Itoa(waitersWait), nil)
	if err != nil {
		return "", 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+w.key)
	resp, err := s.client.Do(req)
	arrived = s.now()
	if err != nil {
		return "", 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", 0, 0, err
	}
	if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
		after := time.Second
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
			after = time.Duration(n) * time.Second
		}
		return "", 0, 0, &refusedError{status: resp.StatusCode, after: after, body: strings.TrimSpace(string(b))}
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var rec struct {
		TaskID   string `json:"task_id"`
		Status   string `json:"status"`
		Progress int    `json:"progress"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.TaskID != w.id {
		return "", 0, 0, fmt.Errorf("answer %q: %v", b, err)
	}
	return rec.Status, rec.Progress, arrived, nil
}

// openFiles counts a process's open files (0: unreadable).
func openFiles(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(ents)
}

// goroutines reads the total from the gateway's goroutine profile (0:
// unreadable).
func goroutines(ctx context.Context, pprof string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pprof+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	line := make([]byte, 128)
	n, _ := io.ReadFull(resp.Body, line)
	first, _, _ := strings.Cut(string(line[:n]), "\n")
	v, ok := strings.CutPrefix(first, "goroutine profile: total ")
	if !ok {
		return 0
	}
	total, _ := strconv.Atoi(strings.TrimSpace(v))
	return total
}

// saveProfiles saves the gateway's heap profile and its goroutines (text)
// under dir, then the heap again as text after a collection (gc=1): its
// runtime.MemStats are then the live heap.
func saveProfiles(ctx context.Context, pprof, dir string, round int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct{ name, path string }{
		{fmt.Sprintf("waiters-heap-round%d.pb.gz", round), "/debug/pprof/heap"},
		{fmt.Sprintf("waiters-goroutine-round%d.txt", round), "/debug/pprof/goroutine?debug=1"},
		{fmt.Sprintf("waiters-heap-gc-round%d.txt", round), "/debug/pprof/heap?debug=1&gc=1"},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, pprof+f.path, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", f.path, resp.StatusCode)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// subscribers counts the subscribers of a channel, over every server.
func subscribers(ctx context.Context, rdb redis.UniversalClient, channel string) (int64, error) {
	var n atomic.Int64
	err := eachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		m, err := c.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			return fmt.Errorf("PUBSUB NUMSUB on %s: %w", c.Options().Addr, err)
		}
		n.Add(m[channel])
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n.Load(), nil
}

// rows adds the waiters figures to the results table; one "not run" row if
// the part did not run.
func (r *waitersResult) rows(w io.Writer) {
	if r == nil {
		fmt.Fprintf(w, "waiting requests (--only waiters)\t%s\t\t\t\t%s\t\n", notRun, notRun)
		return
	}
	fmt.Fprintf(w, "waiters: requests held by one gateway, fewest at a change\t%d\t\t\t>= %d\t%s\t\n", r.HeldMin, r.Waiters, yes(r.HeldMin >= r.Waiters))
	fmt.Fprintf(w, "waiters: gateway RSS with %d held (VmRSS, most of rounds)\t%s\t\t\t<= %d MB\t%s\t\n", r.Waiters,
		value(r.RSSHeldMB, "%.1f MB"), waitersMaxRSSMB, met(r.RSSHeldMB, func(v float64) bool { return v <= waitersMaxRSSMB }))
	fmt.Fprintf(w, "waiters: gateway VmHWM / KB per request held\t%s\t\t\t\t\t\n", value(r.HWMHeldMB, "%.1f MB")+" / "+value(r.PerWaiterKB, "%.1f KB"))
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "unknown"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	lat, latMet := "unknown", "unknown"
	if r.Loaded.Count > 0 {
		lat, latMet = fmt.Sprintf("%.1f ms", r.Loaded.P99), yes(r.Loaded.P99 <= waitersP99Ms && r.Missed == 0)
	}
	fmt.Fprintf(w, "waiters: change to answer p99, %d held (baseline: %d held)\t%s\t%.1f ms\t%s\t<= %d ms\t%s\t\n",
		r.Waiters, r.Changes, lat, r.Quiet.P99, ratio(r.Loaded.P99, r.Quiet.P99), waitersP99Ms, latMet)
	fmt.Fprintf(w, "waiters: change to answer p50\t%.1f ms\t%.1f ms\t%s\t\t\t\n", r.Loaded.P50, r.Quiet.P50, ratio(r.Loaded.P50, r.Quiet.P50))
	fmt.Fprintf(w, "waiters: requests failed, changes missed\t%d, %d\t\t\t0, 0\t%s\t\n", r.Failed, r.Missed, yes(r.Failed == 0 && r.Missed == 0))
	fmt.Fprintf(w, "waiters: requests refused (503, 429) and sent again\t%d\t\t\t\t\t\n", r.Refused)
}

// details is the waiters run's lines under the table.
func (r *waitersResult) details(w io.Writer) {
	if r == nil {
		return
	}
	env := ""
	if len(r.GatewayEnv) > 0 {
		env = ", gateway env " + strings.Join(r.GatewayEnv, " ")
	}
	fmt.Fprintf(w, "waiters: %d requests held (wait=%d, sent at %g/s), %d changes a phase %.0f ms apart, file limit %d%s, load average %s at the start, %s at the end; "+
		"latency over %d changes with %d held: p50 %.2f, p90 %.2f, p99 %.2f, max %.2f ms; over %d with %d held: p50 %.2f, p90 %.2f, p99 %.2f, max %.2f ms\n",
		r.Waiters, r.WaitS, r.RatePerS, r.Changes, r.SpacingMs, r.FileLimit, env, r.LoadAvg, r.LoadAvgAt,
		r.Loaded.Count, r.Waiters, r.Loaded.P50, r.Loaded.P90, r.Loaded.P99, r.Loaded.Max,
		r.Quiet.Count, r.Changes, r.Quiet.P50, r.Quiet.P90, r.Quiet.P99, r.Quiet.Max)
	for i, rd := range r.Rounds {
		l, q := rd.Loaded, rd.Quiet
		fmt.Fprintf(w, "  round %d (%s): loaded held %d (fewest %d) after %.1f s (%d refused, sent again), idle %.1f s later, RSS %.1f MB (before %.1f), VmHWM %.1f MB, %d open files, %d goroutines, %d Redis connections, %d subscriber(s); "+
			"p50/p99 %.2f/%.2f ms loaded, %.2f/%.2f ms quiet; store call p50 %.2f ms; failed %d/%d, missed %d/%d, rearmed %d/%d\n",
			i+1, strings.Join(rd.Order, " then "), l.HeldAtStart, l.HeldMin, l.RampS, l.Refused, l.SettleS, l.RSSHeldMB, l.RSSBeforeMB, l.HWMHeldMB, l.FDs, l.Goroutines, l.RedisConns, l.EventSubscribers,
			l.Latency.P50, l.Latency.P99, q.Latency.P50, q.Latency.P99, l.StoreCallP50Ms, l.Failed, q.Failed, l.Missed, q.Missed, l.Rearmed, q.Rearmed)
		for _, e := range append(l.Errors, q.Errors...) {
			fmt.Fprintf(w, "    error: %s\n", e)
		}
	}
}
