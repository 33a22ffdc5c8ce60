// Package loadgen drives load against an Easel deployment and reports what it
// measured: per operation, counts, throughput, latency percentiles from HDR
// histograms, status codes and the errors seen. Only 2xx answers count as
// successes.
//
// Modes: create (POST /v1/task/create), query (GET /v1/task/query on tasks
// it created first) and lifecycle (create, poll until the task ends, download
// its results). Load is a closed loop of N workers, or an open loop at a fixed
// arrival rate whose latencies are measured from each request's scheduled
// time, so a slow server cannot hide its queueing (coordinated omission).
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Modes.
const (
	ModeCreate    = "create"
	ModeQuery     = "query"
	ModeLifecycle = "lifecycle"
	ModeScenario  = "scenario" // creates, queries, lists and cancels mixed by weight
)

// Operations reported.
const (
	OpCreate     = "create"
	OpQuery      = "query"
	OpDownload   = "download"
	OpCompletion = "completion" // create sent → task seen completed
	OpSetup      = "setup"      // the creates before a query run
	OpQueueWait  = "queue_wait" // lifecycle: create answered → first seen processing
	OpGeneration = "generation" // lifecycle: first seen processing → seen completed
	OpTaskTime   = "task_time"  // lifecycle: the record's complete_time − create_time
	OpList       = "list"       // scenario
	OpCancel     = "cancel"     // scenario
)

// MixEntry is one kind of task in the mix.
type MixEntry struct {
	Model       string
	ImageSize   string // "" to leave it out
	AspectRatio string // "" to leave it out
	Weight      int
}

// Config is a load run.
type Config struct {
	// BaseURL is the gateway; BaseURLs, if set, several gateways that the
	// units are spread over in turn (as a balancer would).
	BaseURL  string
	BaseURLs []string
	Keys     []string
	Mode     string
	// Rate > 0 runs an open loop at Rate units a second; Stages, if set,
	// runs an open loop whose rate follows them (Rate and Duration are then
	// unused); otherwise Concurrency workers run a closed loop.
	Rate        float64
	Stages      []Stage
	Concurrency int
	// New units start until Duration has passed or Requests units have
	// started, whichever comes first (0: no limit; one of them must be
	// set). The units in flight then have Grace to end; what is still in
	// flight after it is counted as unfinished.
	Duration time.Duration
	Requests int64
	// Grace is how long the units in flight at the end of the arrivals may
	// take to end (0: Timeout, in lifecycle mode LifecycleTimeout; < 0: no
	// wait).
	Grace time.Duration
	Mix   []MixEntry
	// Scenario is the actions of the scenario mode and their weights.
	Scenario []ScenarioEntry
	Prompt   string
	// UniquePrompts makes every prompt different (a counter is appended).
	UniquePrompts bool
	// QueryTasks is how many tasks a query run creates first.
	QueryTasks int
	// AfterSetup, if set, is called once a query run's tasks are created,
	// before its queries start (to measure the queries alone).
	AfterSetup func()
	// PollWait > 0 makes lifecycle polls long-polls (query with wait=N
	// seconds, at most 60), answered when the task changes; otherwise a
	// task is queried every PollInterval. PollInterval also spaces the
	// long-polls of a gateway that answers them at once.
	PollWait         time.Duration
	PollInterval     time.Duration
	Timeout          time.Duration // per HTTP request (a long-poll gets its wait on top)
	LifecycleTimeout time.Duration // per task, create to end
	// MaxInflight caps an open loop's units in flight; beyond it units are
	// dropped (and counted).
	MaxInflight int
	// Progress, if set, gets a status line every ProgressEvery.
	Progress      io.Writer
	ProgressEvery time.Duration
	Client        *http.Client
}

// ParseMix reads "MODEL[/SIZE][/RATIO][=WEIGHT],..." e.g.
// "lumen-2.5-flash-image/-/16:9=3,lumen-3-pro-image-preview/2K=1" ("-" skips
// a field).
func ParseMix(s string) ([]MixEntry, error) {
	var out []MixEntry
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		e := MixEntry{Weight: 1}
		spec, w, hasW := strings.Cut(item, "=")
		if hasW {
			n, err := strconv.Atoi(w)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("mix %q: the weight must be a positive integer", item)
			}
			e.Weight = n
		}
		parts := strings.Split(spec, "/")
		if len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("mix %q: want MODEL[/SIZE][/RATIO][=WEIGHT]", item)
		}
		e.Model = parts[0]
		if len(parts) > 1 && parts[1] != "-" {
			e.ImageSize = parts[1]
		}
		if len(parts) > 2 && parts[2] != "-" {
			e.AspectRatio = parts[2]
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("the mix is empty")
	}
	return out, nil
}

func (c *Config) check() error {
	switch c.Mode {
	case ModeCreate, ModeQuery, ModeLifecycle:
	case ModeScenario:
		if len(c.Scenario) == 0 {
			return errors.New("the scenario mode needs a scenario")
		}
		for _, e := range c.Scenario {
			if e.Weight < 1 {
				return errors.New("scenario weights must be positive")
			}
		}
	default:
		return fmt.Errorf("mode %q: want create, query, lifecycle or scenario", c.Mode)
	}
	if len(c.BaseURLs) == 0 {
		c.BaseURLs = []string{c.BaseURL}
	}
	for i, u := range c.BaseURLs {
		if _, err := url.Parse(u); err != nil || !strings.HasPrefix(u, "http") {
			return fmt.Errorf("url %q: want http(s)://host:port", u)
		}
		c.BaseURLs[i] = strings.TrimSuffix(u, "/")
	}
	c.BaseURL = c.BaseURLs[0]
	if len(c.Keys) == 0 {
		return errors.New("at least one API key is needed")
	}
	if len(c.Stages) > 0 {
		c.Duration = 0
		for _, st := range c.Stages {
			c.Duration += st.Duration
		}
		c.Rate = 0
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		return errors.New("give a duration or a number of requests")
	}
	if c.Rate <= 0 && len(c.Stages) == 0 && c.Concurrency <= 0 {
		return errors.New("give a rate or stages (open loop) or a concurrency (closed loop)")
	}
	if len(c.Mix) == 0 {
		return errors.New("the mix is empty")
	}
	for _, e := range c.Mix {
		if e.Weight < 1 {
			return errors.New("mix weights must be positive")
		}
	}
	if c.PollWait > 60*time.Second {
		return errors.New("the poll wait is at most 60s")
	}
	return nil
}

// Report is what a run measured. Every unit of work offered is in exactly
// one of Completed, Failed, Dropped and Unfinished; Sent is the units that
// were not dropped.
type Report struct {
	Mode      string    `json:"mode"`
	URL       string    `json:"url"`
	Load      string    `json:"load"`
	StartedAt time.Time `json:"started_at"`
	Elapsed   Duration  `json:"elapsed"`
	// Arrivals is how long new units were started (less than Elapsed when
	// the units in flight at the end were waited for). The create rate is
	// over Arrivals, the other rates over Elapsed.
	Arrivals Duration `json:"arrivals"`
	Grace    Duration `json:"grace"`

	Offered    int64            `json:"offered"`
	Sent       int64            `json:"sent"`
	Completed  int64            `json:"completed"`
	Failed     int64            `json:"failed"`
	Dropped    int64            `json:"dropped"`
	Unfinished int64            `json:"unfinished"`
	Failures   map[string]int64 `json:"failures"` // "status message" → failed units
	// Latency is of the completed units, from their scheduled moments; the
	// others' are kept apart.
	Latency           Percentiles `json:"latency_ms"`
	FailedLatency     Percentiles `json:"failed_latency_ms"`
	DroppedLatency    Percentiles `json:"dropped_latency_ms"`
	UnfinishedLatency Percentiles `json:"unfinished_latency_ms"`
	// GeneratorLag is how late the open loop took units up after their
	// scheduled moments (the generator's own lag; 0 in a closed loop).
	GeneratorLag Percentiles `json:"generator_lag_ms"`
	Rates        Rates       `json:"rates"`
	// Histograms are HdrHistograms of microseconds (compressed V2,
	// base64): completed, failed, dropped, unfinished, lag.
	Histograms  map[string]string            `json:"histograms,omitempty"`
	Series      []Point                      `json:"series"`
	Breakdown   map[string]map[string]*Group `json:"breakdown,omitempty"` // model, key, gateway
	Thresholds  []ThresholdResult            `json:"thresholds,omitempty"`
	Ops         map[string]*OpReport         `json:"ops"`
	TaskOutcome map[string]int64             `json:"task_outcomes,omitempty"` // lifecycle: completed, failed:<code>, canceled, timed_out, unfinished
}

// Rates are units a second.
type Rates struct {
	Target   float64 `json:"target,omitempty"` // the open loop's mean target over the arrivals
	Offered  float64 `json:"offered"`          // offered ÷ arrivals
	Sent     float64 `json:"sent"`             // sent ÷ arrivals
	Achieved float64 `json:"achieved"`         // completed ÷ elapsed
}

// OpReport is one operation's figures.
type OpReport struct {
	Count      int64            `json:"count"`
	OK         int64            `json:"ok"`
	Errors     int64            `json:"errors"`
	Throughput float64          `json:"ok_per_second"`
	Latency    Latency          `json:"latency_ms"`
	Failed     Percentiles      `json:"failed_latency_ms"`
	Status     map[string]int64 `json:"status"`
	ErrorTypes map[string]int64 `json:"error_types,omitempty"`
	Hist       string           `json:"hist,omitempty"`
	FailedHist string           `json:"failed_hist,omitempty"`
}

// Latency percentiles of successful requests, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Duration marshals as seconds.
type Duration time.Duration

// MarshalJSON writes seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(time.Duration(d).Seconds(), 'f', 3, 64)), nil
}

// UnmarshalJSON reads seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	*d = Duration(f * float64(time.Second))
	return err
}

// op accumulates one operation's results.
type op struct {
	mu       sync.Mutex
	hist     *hdrhistogram.Histogram
	failHist *hdrhistogram.Histogram
	count    int64
	ok       int64
	status   map[string]int64
	errTypes map[string]int64
	// for the progress line
	okNow  atomic.Int64
	errNow atomic.Int64
}

// digits are replaced in error descriptions so "retry after 12ms" and "retry
// after 40ms" count as one kind of error.
var digits = regexp.MustCompile(`[0-9]+`)

func newOp() *op {
	return &op{hist: newHist(), failHist: newHist(), status: map[string]int64{}, errTypes: map[string]int64{}}
}

// errorKind is a failure's description with its numbers folded, prefixed
// with the HTTP status when there is one.
func errorKind(status, errType string) string {
	errType = digits.ReplaceAllString(errType, "N")
	if _, err := strconv.Atoi(status); err == nil && errType != "" {
		errType = status + " " + errType
	}
	return errType
}

// record adds one request: its latency, its status ("200", "error") and,
// for a failure, a short description.
func (o *op) record(d time.Duration, status string, success bool, errType string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.count++
	o.status[status]++
	if success {
		o.ok++
		o.okNow.Add(1)
		recordHist(o.hist, d)
		return
	}
	o.errNow.Add(1)
	recordHist(o.failHist, d)
	errType = errorKind(status, errType)
	if errType != "" && (len(o.errTypes) < 50 || o.errTypes[errType] > 0) {
		o.errTypes[errType]++
	}
}

func (o *op) report(elapsed time.Duration) *OpReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := &OpReport{
		Count: o.count, OK: o.ok, Errors: o.count - o.ok,
		Status: o.status, ErrorTypes: o.errTypes,
		Latency: latencyOf(o.hist), Failed: percentiles(o.failHist),
		Hist: encode(o.hist), FailedHist: encode(o.failHist),
	}
	if elapsed > 0 {
		r.Throughput = float64(o.ok) / elapsed.Seconds()
	}
	return r
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	p := percentiles(h)
	l := Latency{P50: p.P50, P90: p.P90, P99: p.P99, Max: p.Max}
	if h != nil {
		l.Mean = h.Mean() / 1000
	}
	return l
}

// runner is one run's state.
type runner struct {
	cfg      Config
	client   *http.Client
	ops      map[string]*op
	tally    *tally
	weights  int
	seq      atomic.Int64
	gw       atomic.Int64
	inflight atomic.Int64
	// lastTaken is when the last unit of a request budget was taken, in
	// Unix nanoseconds (0: not yet, or no budget).
	lastTaken       atomic.Int64
	exhausted       chan struct{} // closed when the budget's last unit is taken
	outcomes        sync.Map      // string → *atomic.Int64
	tasks           []owned       // query mode: the tasks to query
	pool            taskPool      // scenario mode: the tasks created
	scenarioWeights int
	unique          atomic.Int64
}

// owned is a task and the key that created it (queries are scoped to the
// key's account).
type owned struct{ id, key, model, gateway string }

// Run drives load until the configured end or ctx is done.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.LifecycleTimeout <= 0 {
		cfg.LifecycleTimeout = 10 * time.Minute
	}
	if cfg.QueryTasks <= 0 {
		cfg.QueryTasks = 100
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 10_000
	}
	if cfg.Prompt == "" {
		cfg.Prompt = "a lighthouse on a cliff at dusk, oil painting"
	}
	switch {
	case cfg.Grace < 0:
		cfg.Grace = 0
	case cfg.Grace == 0 && cfg.Mode == ModeLifecycle:
		cfg.Grace = cfg.LifecycleTimeout + cfg.Timeout
	case cfg.Grace == 0:
		cfg.Grace = cfg.Timeout
	}
	r := &runner{cfg: cfg, client: cfg.Client, ops: map[string]*op{}, exhausted: make(chan struct{})}
	if r.client == nil {
		// Keep every connection an open loop may have in flight: beyond
		// the idle limit a connection is closed after its answer and the
		// next unit dials a new one, which costs both sides more than the
		// request itself.
		conns := max(cfg.Concurrency, 64)
		if cfg.Rate > 0 || len(cfg.Stages) > 0 {
			conns = max(conns, min(cfg.MaxInflight, 10_000))
		}
		r.client = &http.Client{
			Transport: &http.Transport{
				MaxIdleConns:        conns * 2,
				MaxIdleConnsPerHost: conns,
				IdleConnTimeout:     90 * time.Second,
			},
		}
	}
	for _, name := range []string{OpCreate, OpQuery, OpDownload, OpCompletion, OpSetup, OpQueueWait, OpGeneration, OpTaskTime, OpList, OpCancel} {
		r.ops[name] = newOp()
	}
	for _, e := range cfg.Mix {
		r.weights += e.Weight
	}
	for _, e := range cfg.Scenario {
		r.scenarioWeights += e.Weight
	}
	if cfg.Mode == ModeQuery {
		if err := r.setup(ctx); err != nil {
			return nil, err
		}
		if cfg.AfterSetup != nil {
			cfg.AfterSetup()
		}
	}

	// arrive bounds when units start; work bounds the units' requests, a
	// grace period past the arrivals.
	arrive := ctx
	var cancel context.CancelFunc
	if cfg.Duration > 0 {
		arrive, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	work, stopWork := context.WithCancel(ctx)
	defer stopWork()
	start := time.Now()
	r.tally = newTally(start)
	stopProgress := r.progress(work, start)
	var wg sync.WaitGroup
	var sched *schedule
	if cfg.Rate > 0 || len(cfg.Stages) > 0 {
		s := newSchedule(cfg.Stages, cfg.Rate, cfg.Duration)
		sched = &s
		r.openLoop(ctx, work, &wg, s)
	} else {
		r.closedLoop(arrive, work, &wg)
	}
	arrivalsDone, interrupted := time.Now(), ctx.Err() != nil
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	grace := time.NewTimer(cfg.Grace)
	select {
	case <-drained:
	case <-grace.C:
	case <-ctx.Done():
	}
	grace.Stop()
	stopWork() // what is still in flight ends now, as unfinished
	<-drained
	elapsed := time.Since(start)
	arrivals := r.arrivalsEnd(start, arrivalsDone.Sub(start), interrupted)
	stopProgress()

	rep := &Report{Mode: cfg.Mode, URL: strings.Join(cfg.BaseURLs, ","), StartedAt: start, Elapsed: Duration(elapsed), Arrivals: Duration(arrivals),
		Grace: Duration(cfg.Grace), Ops: map[string]*OpReport{}}
	switch {
	case len(cfg.Stages) > 0:
		rep.Load = "open loop, stages " + FormatStages(cfg.Stages)
	case cfg.Rate > 0:
		rep.Load = fmt.Sprintf("open loop, %g/s", cfg.Rate)
	default:
		rep.Load = fmt.Sprintf("closed loop, %d workers", cfg.Concurrency)
	}
	r.tally.summarize(rep, sched)
	rep.Rates = rates(rep, sched)
	for name, o := range r.ops {
		if o.count > 0 {
			d := elapsed
			switch name {
			case OpSetup:
				d = 0
			case OpCreate:
				d = arrivals
			}
			rep.Ops[name] = o.report(d)
		}
	}
	r.outcomes.Range(func(k, v any) bool {
		if rep.TaskOutcome == nil {
			rep.TaskOutcome = map[string]int64{}
		}
		rep.TaskOutcome[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return rep, nil
}

// rates works out the report's rates from its counts.
func rates(rep *Report, sched *schedule) Rates {
	var rt Rates
	if a := time.Duration(rep.Arrivals).Seconds(); a > 0 {
		rt.Offered = float64(rep.Offered) / a
		rt.Sent = float64(rep.Sent) / a
		if sched != nil {
			// The mean target over the arrivals, a tenth of a second at a time.
			var sum float64
			n := 0
			for t := time.Duration(0); t < time.Duration(rep.Arrivals); t += 100 * time.Millisecond {
				sum += sched.rateAt(t + 50*time.Millisecond)
				n++
			}
			if n > 0 {
				rt.Target = sum / float64(n)
			}
		}
	}
	if e := time.Duration(rep.Elapsed).Seconds(); e > 0 {
		rt.Achieved = float64(rep.Completed) / e
	}
	return rt
}

// take reserves one unit of work, false when the request budget is spent.
func (r *runner) take() bool {
	if r.cfg.Requests <= 0 {
		return true
	}
	n := r.seq.Add(1)
	if n == r.cfg.Requests {
		r.lastTaken.Store(time.Now().UnixNano())
		close(r.exhausted)
	}
	return n <= r.cfg.Requests
}

// arrivalsEnd is how long units kept starting: the duration, or until the
// last unit of the budget was taken, or the run was interrupted (d).
func (r *runner) arrivalsEnd(start time.Time, d time.Duration, interrupted bool) time.Duration {
	if r.cfg.Duration > 0 && !interrupted {
		d = r.cfg.Duration
	}
	if last := r.lastTaken.Load(); last > 0 {
		d = min(d, time.Duration(last-start.UnixNano()))
	}
	return d
}

// closedLoop starts Concurrency workers and returns when the arrivals end
// (the duration passed, the budget's last unit was taken, or every worker
// stopped); the units still running are in wg.
func (r *runner) closedLoop(arrive, work context.Context, wg *sync.WaitGroup) {
	var workers sync.WaitGroup
	for w := 0; w < r.cfg.Concurrency; w++ {
		wg.Add(1)
		workers.Add(1)
		go func() {
			defer wg.Done()
			defer workers.Done()
			for arrive.Err() == nil && r.take() {
				now := time.Now()
				r.tally.offer(now, now)
				r.tally.send(now)
				r.inflight.Add(1)
				r.unit(work, now)
				r.inflight.Add(-1)
			}
		}()
	}
	stopped := make(chan struct{})
	go func() { workers.Wait(); close(stopped) }()
	select {
	case <-arrive.Done():
	case <-r.exhausted:
	case <-stopped:
	}
}

// openLoop offers units on the schedule until the arrivals end: every unit
// scheduled within the duration is offered, even when the generator runs
// late (its lag is measured); only ctx ending (the run interrupted) or the
// request budget stops it sooner. The units in flight are in wg.
func (r *runner) openLoop(ctx, work context.Context, wg *sync.WaitGroup, s schedule) {
	start := r.tally.start
	timer := time.NewTimer(0)
	defer timer.Stop()
	sleepUntil := func(t time.Time) bool {
		if wait := time.Until(t); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return false
			case <-timer.C:
			}
		}
		return ctx.Err() == nil
	}
	var k int64
	for {
		off, ok := s.at(k)
		if !ok || (r.cfg.Duration > 0 && off >= r.cfg.Duration) {
			// No more arrivals: the window still lasts its duration (a
			// ramp down to 0 ends before it).
			if r.cfg.Duration > 0 {
				sleepUntil(start.Add(r.cfg.Duration))
			}
			return
		}
		if !sleepUntil(start.Add(off)) {
			return
		}
		// Offer every unit whose time has come (the timer may fire late).
		for now := time.Now(); ; {
			off, ok := s.at(k)
			if !ok || (r.cfg.Duration > 0 && off >= r.cfg.Duration) {
				break // the outer loop waits for the window's end
			}
			scheduled := start.Add(off)
			if scheduled.After(now) {
				break
			}
			if !r.take() {
				return
			}
			k++
			r.tally.offer(scheduled, now)
			if r.inflight.Load() >= int64(r.cfg.MaxInflight) {
				r.tally.drop(scheduled, now)
				continue
			}
			r.tally.send(now)
			r.inflight.Add(1)
			wg.Add(1)
			go func(scheduled time.Time) {
				defer wg.Done()
				r.unit(work, scheduled)
				r.inflight.Add(-1)
			}(scheduled)
		}
	}
}

// unit is one unit of work of the mode, timed from scheduled; it reports
// its end to the tally.
func (r *runner) unit(ctx context.Context, scheduled time.Time) {
	key := r.cfg.Keys[rand.IntN(len(r.cfg.Keys))]
	gw := r.cfg.BaseURLs[int(r.gw.Add(1)-1)%len(r.cfg.BaseURLs)]
	var res result
	l := labels{key: keyLabel(key), gateway: gw}
	switch r.cfg.Mode {
	case ModeCreate:
		body, model := r.body()
		l.model = model
		_, res = r.create(ctx, gw, key, body, scheduled, r.ops[OpCreate])
	case ModeQuery:
		t := r.tasks[rand.IntN(len(r.tasks))]
		l.model, l.key, l.gateway = t.model, keyLabel(t.key), t.gateway
		_, res = r.query(ctx, t.gateway, t.key, t.id, 0, scheduled)
	case ModeLifecycle:
		body, model := r.body()
		l.model = model
		res = r.lifecycle(ctx, gw, key, body, scheduled)
	case ModeScenario:
		res = r.scenarioUnit(ctx, gw, key, scheduled, &l)
	}
	if len(r.cfg.BaseURLs) == 1 {
		l.gateway = ""
	}
	if len(r.cfg.Keys) == 1 {
		l.key = ""
	}
	if len(r.cfg.Mix) == 1 {
		l.model = ""
	}
	now := time.Now()
	r.tally.end(now, now.Sub(scheduled), res.outcome, res.why, l)
}

// keyLabel names a key in a report without giving it away.
func keyLabel(k string) string {
	if len(k) <= 8 {
		return k[:min(len(k), 4)] + "…"
	}
	return k[:8] + "…"
}

// result is how a unit or request ended: unitCompleted, unitFailed (why:
// "status message") or unitUnfinished.
type result struct{ outcome, why string }

var completed = result{outcome: unitCompleted}

type envelope struct {
	Code int             `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
}

type taskRecord struct {
	Status       string   `json:"status"`
	Progress     int      `json:"progress"`
	CreateTime   int64    `json:"create_time"`
	CompleteTime int64    `json:"complete_time"`
	Results      []string `json:"results"`
	Error        *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// do sends a request within timeout and returns the status code, the body,
// and an error description for failures. interrupted is true when ctx ended
// it (the run stopped), not the server or the timeout.
func (r *runner) do(ctx context.Context, method, u, key string, body []byte, timeout time.Duration) (code int, b []byte, errType string, interrupted bool) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, u, rd)
	if err != nil {
		return 0, nil, err.Error(), false
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, describe(err), ctx.Err() != nil
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, describe(err), ctx.Err() != nil
	}
	if resp.StatusCode/100 != 2 {
		var env envelope
		msg := http.StatusText(resp.StatusCode)
		if json.Unmarshal(b, &env) == nil && env.Msg != "" {
			msg = env.Msg
		}
		return resp.StatusCode, b, truncate(msg, 120), false
	}
	return resp.StatusCode, b, "", false
}

func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "request timed out"
	}
	if errors.Is(err, context.Canceled) {
		return "request cancelled"
	}
	return truncate(err.Error(), 120)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func statusText(code int) string {
	if code == 0 {
		return "error"
	}
	return strconv.Itoa(code)
}

// body is a create request of the mix, and its model.
func (r *runner) body() ([]byte, string) {
	pick := rand.IntN(r.weights)
	e := r.cfg.Mix[0]
	for _, m := range r.cfg.Mix {
		if pick < m.Weight {
			e = m
			break
		}
		pick -= m.Weight
	}
	prompt := r.cfg.Prompt
	if r.cfg.UniquePrompts {
		prompt += " #" + strconv.FormatInt(r.unique.Add(1), 10)
	}
	input := map[string]string{"prompt": prompt}
	if e.ImageSize != "" {
		input["image_size"] = e.ImageSize
	}
	if e.AspectRatio != "" {
		input["aspect_ratio"] = e.AspectRatio
	}
	b, _ := json.Marshal(map[string]any{"model": e.Model, "task_type": "image", "input": input})
	return b, e.Model
}

// create sends one create; it returns the task id on success.
func (r *runner) create(ctx context.Context, gw, key string, body []byte, scheduled time.Time, o *op) (string, result) {
	code, b, errType, interrupted := r.do(ctx, http.MethodPost, gw+"/v1/task/create", key, body, r.cfg.Timeout)
	if interrupted {
		return "", result{outcome: unitUnfinished} // the run ended mid-request: not a server error
	}
	var env envelope
	var data struct {
		TaskID string `json:"task_id"`
	}
	ok := errType == "" && json.Unmarshal(b, &env) == nil && env.Code == 200 && json.Unmarshal(env.Data, &data) == nil && data.TaskID != ""
	if errType == "" && !ok {
		errType = "2xx without a task id"
	}
	o.record(time.Since(scheduled), statusText(code), ok, errType)
	if !ok {
		return "", result{unitFailed, errorKind(statusText(code), "create: "+errType)}
	}
	return data.TaskID, completed
}

// query asks for a task's record, holding for up to wait for a change.
func (r *runner) query(ctx context.Context, gw, key, id string, wait time.Duration, scheduled time.Time) (taskRecord, result) {
	u := gw + "/v1/task/query?task_id=" + url.QueryEscape(id)
	if s := int(wait / time.Second); s > 0 {
		u += "&wait=" + strconv.Itoa(s)
	}
	code, b, errType, interrupted := r.do(ctx, http.MethodGet, u, key, nil, r.cfg.Timeout+wait)
	if interrupted {
		return taskRecord{}, result{outcome: unitUnfinished}
	}
	var rec taskRecord
	ok := errType == "" && json.Unmarshal(b, &rec) == nil && rec.Status != ""
	if errType == "" && !ok {
		errType = "2xx without a task record"
	}
	r.ops[OpQuery].record(time.Since(scheduled), statusText(code), ok, errType)
	if !ok {
		return rec, result{unitFailed, errorKind(statusText(code), "query: "+errType)}
	}
	return rec, completed
}

func (r *runner) outcome(name string) {
	v, _ := r.outcomes.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// lifecycle creates a task, follows it to its end and downloads its
// results. The task's time is split into its queue wait (created to first
// seen processing) and generation (then to seen completed), as the
// client saw them: the record has no start time.
func (r *runner) lifecycle(ctx context.Context, gw, key string, body []byte, scheduled time.Time) result {
	id, res := r.create(ctx, gw, key, body, scheduled, r.ops[OpCreate])
	if id == "" {
		if res.outcome == unitUnfinished {
			r.outcome("unfinished")
		}
		return res
	}
	created := time.Now()
	deadline := created.Add(r.cfg.LifecycleTimeout)
	wait := r.cfg.PollWait
	pause := wait <= 0 // interval polling pauses before every query
	var processing time.Time
	lastStatus, lastProgress := "", -1
	for {
		if pause {
			select {
			case <-ctx.Done():
				r.outcome("unfinished") // the run was interrupted
				return result{outcome: unitUnfinished}
			case <-time.After(r.cfg.PollInterval):
			}
		}
		if w := time.Until(deadline); wait > 0 && w < wait {
			wait = max(w.Truncate(time.Second), time.Second)
		}
		asked := time.Now()
		rec, qres := r.query(ctx, gw, key, id, wait, asked)
		if qres.outcome == unitUnfinished {
			r.outcome("unfinished")
			return qres
		}
		now := time.Now()
		ok := qres.outcome == unitCompleted
		if ok && rec.Status == "processing" && processing.IsZero() {
			processing = now
		}
		switch {
		case ok && rec.Status == "completed":
			r.ops[OpCompletion].record(now.Sub(scheduled), "completed", true, "")
			if !processing.IsZero() {
				r.ops[OpQueueWait].record(processing.Sub(created), "ok", true, "")
				r.ops[OpGeneration].record(now.Sub(processing), "ok", true, "")
			}
			if rec.CreateTime > 0 && rec.CompleteTime >= rec.CreateTime {
				r.ops[OpTaskTime].record(time.Duration(rec.CompleteTime-rec.CreateTime)*time.Millisecond, "ok", true, "")
			}
			for _, u := range rec.Results {
				start := time.Now()
				code, _, errType, interrupted := r.do(ctx, http.MethodGet, u, "", nil, r.cfg.Timeout)
				if interrupted {
					r.outcome("unfinished")
					return result{outcome: unitUnfinished}
				}
				r.ops[OpDownload].record(time.Since(start), statusText(code), errType == "", errType)
				if errType != "" {
					r.outcome("download_failed")
					return result{unitFailed, errorKind(statusText(code), "download: "+errType)}
				}
			}
			r.outcome("completed")
			return completed
		case ok && rec.Status == "failed":
			codeName := "unknown"
			if rec.Error != nil {
				codeName = rec.Error.Code
			}
			r.ops[OpCompletion].record(now.Sub(scheduled), "failed", false, "task failed: "+codeName)
			r.outcome("failed:" + codeName)
			return result{unitFailed, "task failed: " + codeName}
		case ok && rec.Status == "canceled":
			r.ops[OpCompletion].record(now.Sub(scheduled), "canceled", false, "task canceled")
			r.outcome("canceled")
			return result{unitFailed, "task canceled"}
		}
		if now.After(deadline) {
			r.ops[OpCompletion].record(now.Sub(scheduled), "timed_out", false, "task did not end in time")
			r.outcome("timed_out")
			return result{unitFailed, "task did not end in time"}
		}
		// A long-poll answered at once with nothing new (an error, or a
		// gateway that does not hold): pause before the next.
		unchanged := rec.Status == lastStatus && rec.Progress == lastProgress
		pause = wait <= 0 || !ok || (unchanged && now.Sub(asked) < wait/2)
		lastStatus, lastProgress = rec.Status, rec.Progress
	}
}

// setup creates the tasks a query run queries, with a few workers.
func (r *runner) setup(ctx context.Context) error {
	tasks := make(chan owned, r.cfg.QueryTasks)
	var wg sync.WaitGroup
	var n atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := n.Add(1); i <= int64(r.cfg.QueryTasks); i = n.Add(1) {
				key := r.cfg.Keys[rand.IntN(len(r.cfg.Keys))]
				gw := r.cfg.BaseURLs[int(i)%len(r.cfg.BaseURLs)]
				body, model := r.body()
				if id, _ := r.create(ctx, gw, key, body, time.Now(), r.ops[OpSetup]); id != "" {
					tasks <- owned{id, key, model, gw}
				}
			}
		}()
	}
	wg.Wait()
	close(tasks)
	for t := range tasks {
		r.tasks = append(r.tasks, t)
	}
	if len(r.tasks) == 0 {
		rep := r.ops[OpSetup].report(0)
		return fmt.Errorf("could not create any task to query: %v", rep.ErrorTypes)
	}
	return nil
}

// progress prints a status line every ProgressEvery until stopped.
func (r *runner) progress(ctx context.Context, start time.Time) (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	every := r.cfg.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintln(r.cfg.Progress)
				return
			case <-ctx.Done():
			case <-t.C:
			}
			var parts []string
			for _, name := range sortedKeys(r.ops) {
				o := r.ops[name]
				ok, errs := o.okNow.Swap(0), o.errNow.Swap(0)
				if ok+errs == 0 {
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %.0f/s err %d", name, float64(ok)/every.Seconds(), errs))
			}
			fmt.Fprintf(r.cfg.Progress, "\r[%5.1fs] %s | in flight %d   ", time.Since(start).Seconds(), strings.Join(parts, " | "), r.inflight.Load())
			if ctx.Err() != nil {
				<-done
				fmt.Fprintln(r.cfg.Progress)
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}
