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
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Modes.
const (
	ModeCreate    = "create"
	ModeQuery     = "query"
	ModeLifecycle = "lifecycle"
)

// Operations reported.
const (
	OpCreate     = "create"
	OpQuery      = "query"
	OpDownload   = "download"
	OpCompletion = "completion" // create sent → task seen completed
	OpSetup      = "setup"      // the creates before a query run
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
	BaseURL string
	Keys    []string
	Mode    string
	// Rate > 0 runs an open loop at Rate units a second; otherwise
	// Concurrency workers run a closed loop.
	Rate        float64
	Concurrency int
	// New units start until Duration has passed or Requests units have
	// started, whichever comes first (0: no limit; one of them must be
	// set). In lifecycle mode the tasks already created are then followed
	// to their end (at most LifecycleTimeout each), unless ctx is cancelled.
	Duration time.Duration
	Requests int64
	Mix      []MixEntry
	Prompt   string
	// UniquePrompts makes every prompt different (a counter is appended).
	UniquePrompts bool
	// QueryTasks is how many tasks a query run creates first.
	QueryTasks int
	// AfterSetup, if set, is called once a query run's tasks are created,
	// before its queries start (to measure the queries alone).
	AfterSetup       func()
	PollInterval     time.Duration
	Timeout          time.Duration // per HTTP request
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
	default:
		return fmt.Errorf("mode %q: want create, query or lifecycle", c.Mode)
	}
	if _, err := url.Parse(c.BaseURL); err != nil || !strings.HasPrefix(c.BaseURL, "http") {
		return fmt.Errorf("url %q: want http(s)://host:port", c.BaseURL)
	}
	if len(c.Keys) == 0 {
		return errors.New("at least one API key is needed")
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		return errors.New("give a duration or a number of requests")
	}
	if c.Rate <= 0 && c.Concurrency <= 0 {
		return errors.New("give a rate (open loop) or a concurrency (closed loop)")
	}
	if len(c.Mix) == 0 {
		return errors.New("the mix is empty")
	}
	for _, e := range c.Mix {
		if e.Weight < 1 {
			return errors.New("mix weights must be positive")
		}
	}
	return nil
}

// Report is what a run measured.
type Report struct {
	Mode      string    `json:"mode"`
	URL       string    `json:"url"`
	Load      string    `json:"load"`
	StartedAt time.Time `json:"started_at"`
	Elapsed   Duration  `json:"elapsed"`
	// Arrivals is how long new units were started (less than Elapsed in
	// lifecycle mode, which then waits for the tasks it created). The
	// create rate is over Arrivals, the other rates over Elapsed.
	Arrivals    Duration             `json:"arrivals"`
	Ops         map[string]*OpReport `json:"ops"`
	Dropped     int64                `json:"dropped,omitempty"`
	TaskOutcome map[string]int64     `json:"task_outcomes,omitempty"` // lifecycle: completed, failed:<code>, timed_out
}

// OpReport is one operation's figures.
type OpReport struct {
	Count      int64            `json:"count"`
	OK         int64            `json:"ok"`
	Errors     int64            `json:"errors"`
	Throughput float64          `json:"ok_per_second"`
	Latency    Latency          `json:"latency_ms"`
	Status     map[string]int64 `json:"status"`
	ErrorTypes map[string]int64 `json:"error_types,omitempty"`
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
	return &op{hist: hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3), status: map[string]int64{}, errTypes: map[string]int64{}}
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
		_ = o.hist.RecordValue(max(d.Microseconds(), 1))
		return
	}
	o.errNow.Add(1)
	errType = digits.ReplaceAllString(errType, "N")
	if _, err := strconv.Atoi(status); err == nil && errType != "" {
		errType = status + " " + errType
	}
	if errType != "" && (len(o.errTypes) < 50 || o.errTypes[errType] > 0) {
		o.errTypes[errType]++
	}
}

func (o *op) report(elapsed time.Duration) *OpReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	ms := func(v int64) float64 { return float64(v) / 1000 }
	r := &OpReport{
		Count: o.count, OK: o.ok, Errors: o.count - o.ok,
		Status: o.status, ErrorTypes: o.errTypes,
		Latency: Latency{
			P50: ms(o.hist.ValueAtQuantile(50)), P90: ms(o.hist.ValueAtQuantile(90)), P99: ms(o.hist.ValueAtQuantile(99)),
			Max: ms(o.hist.Max()), Mean: o.hist.Mean() / 1000,
		},
	}
	if elapsed > 0 {
		r.Throughput = float64(o.ok) / elapsed.Seconds()
	}
	return r
}

// runner is one run's state.
type runner struct {
	cfg      Config
	client   *http.Client
	ops      map[string]*op
	weights  int
	seq      atomic.Int64
	inflight atomic.Int64
	// lastTaken is when the last unit of a request budget was taken, in
	// Unix nanoseconds (0: not yet, or no budget).
	lastTaken atomic.Int64
	dropped   atomic.Int64
	outcomes  sync.Map // string → *atomic.Int64
	tasks     []owned  // query mode: the tasks to query
	unique    atomic.Int64
}

// owned is a task and the key that created it (queries are scoped to the
// key's account).
type owned struct{ id, key string }

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
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	r := &runner{cfg: cfg, client: cfg.Client, ops: map[string]*op{}}
	if r.client == nil {
		conns := max(cfg.Concurrency, 64)
		r.client = &http.Client{
			Timeout: cfg.Timeout,
			Transport: &http.Transport{
				MaxIdleConns:        conns * 2,
				MaxIdleConnsPerHost: conns * 2,
				IdleConnTimeout:     90 * time.Second,
			},
		}
	}
	for _, name := range []string{OpCreate, OpQuery, OpDownload, OpCompletion, OpSetup} {
		r.ops[name] = newOp()
	}
	for _, e := range cfg.Mix {
		r.weights += e.Weight
	}
	if cfg.Mode == ModeQuery {
		if err := r.setup(ctx); err != nil {
			return nil, err
		}
		if cfg.AfterSetup != nil {
			cfg.AfterSetup()
		}
	}

	// arrive bounds when units start; work bounds the units' requests. A
	// lifecycle follows its task after the arrivals end.
	arrive := ctx
	var cancel context.CancelFunc
	if cfg.Duration > 0 {
		arrive, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	work := arrive
	if cfg.Mode == ModeLifecycle {
		work = ctx
	}
	start := time.Now()
	stopProgress := r.progress(work, start)
	if cfg.Rate > 0 {
		r.openLoop(arrive, work)
	} else {
		r.closedLoop(arrive, work)
	}
	elapsed := time.Since(start)
	arrivals := r.arrivalsEnd(start, elapsed)
	stopProgress()

	rep := &Report{Mode: cfg.Mode, URL: cfg.BaseURL, StartedAt: start, Elapsed: Duration(elapsed), Arrivals: Duration(arrivals), Ops: map[string]*OpReport{}, Dropped: r.dropped.Load()}
	if cfg.Rate > 0 {
		rep.Load = fmt.Sprintf("open loop, %.0f/s", cfg.Rate)
	} else {
		rep.Load = fmt.Sprintf("closed loop, %d workers", cfg.Concurrency)
	}
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

// take reserves one unit of work, false when the request budget is spent.
func (r *runner) take() bool {
	if r.cfg.Requests <= 0 {
		return true
	}
	n := r.seq.Add(1)
	if n == r.cfg.Requests {
		r.lastTaken.Store(time.Now().UnixNano())
	}
	return n <= r.cfg.Requests
}

// arrivalsEnd is how long units kept starting: up to the duration or the
// last unit of the budget, whichever came first; lifecycle runs then wait
// for their tasks.
func (r *runner) arrivalsEnd(start time.Time, elapsed time.Duration) time.Duration {
	if r.cfg.Mode != ModeLifecycle {
		return elapsed // requests in flight at the end count in their rate
	}
	d := elapsed
	if r.cfg.Duration > 0 {
		d = min(d, r.cfg.Duration)
	}
	if last := r.lastTaken.Load(); last > 0 {
		d = min(d, time.Duration(last-start.UnixNano()))
	}
	return d
}

func (r *runner) closedLoop(arrive, work context.Context) {
	var wg sync.WaitGroup
	for w := 0; w < r.cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for arrive.Err() == nil && r.take() {
				r.inflight.Add(1)
				r.unit(work, time.Now())
				r.inflight.Add(-1)
			}
		}()
	}
	wg.Wait()
}

func (r *runner) openLoop(arrive, work context.Context) {
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / r.cfg.Rate)
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-arrive.Done():
			wg.Wait()
			return
		case <-timer.C:
		}
		// Issue every unit whose time has come (the timer may fire late).
		for now := time.Now(); !next.After(now); next = next.Add(interval) {
			if !r.take() {
				wg.Wait()
				return
			}
			if r.inflight.Load() >= int64(r.cfg.MaxInflight) {
				r.dropped.Add(1)
				continue
			}
			r.inflight.Add(1)
			wg.Add(1)
			go func(scheduled time.Time) {
				defer wg.Done()
				r.unit(work, scheduled)
				r.inflight.Add(-1)
			}(next)
		}
		timer.Reset(time.Until(next))
	}
}

// unit is one unit of work of the mode, timed from scheduled.
func (r *runner) unit(ctx context.Context, scheduled time.Time) {
	key := r.cfg.Keys[rand.IntN(len(r.cfg.Keys))]
	switch r.cfg.Mode {
	case ModeCreate:
		r.create(ctx, key, scheduled, r.ops[OpCreate])
	case ModeQuery:
		t := r.tasks[rand.IntN(len(r.tasks))]
		r.query(ctx, t.key, t.id, scheduled)
	case ModeLifecycle:
		r.lifecycle(ctx, key, scheduled)
	}
}

type envelope struct {
	Code int             `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
}

type taskRecord struct {
	Status  string   `json:"status"`
	Results []string `json:"results"`
	Error   *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// do sends a request and returns the status text, the body, and an error
// description for failures.
func (r *runner) do(ctx context.Context, method, u, key string, body []byte) (int, []byte, string) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err.Error()
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, describe(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, describe(err)
	}
	if resp.StatusCode/100 != 2 {
		var env envelope
		msg := http.StatusText(resp.StatusCode)
		if json.Unmarshal(b, &env) == nil && env.Msg != "" {
			msg = env.Msg
		}
		return resp.StatusCode, b, truncate(msg, 120)
	}
	return resp.StatusCode, b, ""
}

func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "request timed out or was cancelled"
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

func (r *runner) body() []byte {
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
	return b
}

// create sends one create; it returns the task id on success.
func (r *runner) create(ctx context.Context, key string, scheduled time.Time, o *op) string {
	code, b, errType := r.do(ctx, http.MethodPost, r.cfg.BaseURL+"/v1/task/create", key, r.body())
	if ctx.Err() != nil && code == 0 {
		return "" // the run ended mid-request: not a server error
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
		return ""
	}
	return data.TaskID
}

func (r *runner) query(ctx context.Context, key, id string, scheduled time.Time) (taskRecord, bool) {
	code, b, errType := r.do(ctx, http.MethodGet, r.cfg.BaseURL+"/v1/task/query?task_id="+url.QueryEscape(id), key, nil)
	if ctx.Err() != nil && code == 0 {
		return taskRecord{}, false
	}
	var rec taskRecord
	ok := errType == "" && json.Unmarshal(b, &rec) == nil && rec.Status != ""
	if errType == "" && !ok {
		errType = "2xx without a task record"
	}
	r.ops[OpQuery].record(time.Since(scheduled), statusText(code), ok, errType)
	return rec, ok
}

func (r *runner) outcome(name string) {
	v, _ := r.outcomes.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (r *runner) lifecycle(ctx context.Context, key string, scheduled time.Time) {
	id := r.create(ctx, key, scheduled, r.ops[OpCreate])
	if id == "" {
		return
	}
	deadline := time.Now().Add(r.cfg.LifecycleTimeout)
	for {
		select {
		case <-ctx.Done():
			r.outcome("unfinished") // the run was interrupted
			return
		case <-time.After(r.cfg.PollInterval):
		}
		rec, ok := r.query(ctx, key, id, time.Now())
		switch {
		case ok && rec.Status == "completed":
			r.ops[OpCompletion].record(time.Since(scheduled), "completed", true, "")
			r.outcome("completed")
			for _, u := range rec.Results {
				start := time.Now()
				code, _, errType := r.do(ctx, http.MethodGet, u, "", nil)
				r.ops[OpDownload].record(time.Since(start), statusText(code), errType == "", errType)
			}
			return
		case ok && rec.Status == "failed":
			codeName := "unknown"
			if rec.Error != nil {
				codeName = rec.Error.Code
			}
			r.ops[OpCompletion].record(time.Since(scheduled), "failed", false, "task failed: "+codeName)
			r.outcome("failed:" + codeName)
			return
		}
		if time.Now().After(deadline) {
			r.ops[OpCompletion].record(time.Since(scheduled), "timed_out", false, "task did not end in time")
			r.outcome("timed_out")
			return
		}
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
			for n.Add(1) <= int64(r.cfg.QueryTasks) {
				key := r.cfg.Keys[rand.IntN(len(r.cfg.Keys))]
				if id := r.create(ctx, key, time.Now(), r.ops[OpSetup]); id != "" {
					tasks <- owned{id, key}
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
			case <-t.C:
			}
			var parts []string
			names := make([]string, 0, len(r.ops))
			for name := range r.ops {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				o := r.ops[name]
				ok, errs := o.okNow.Swap(0), o.errNow.Swap(0)
				if ok+errs == 0 {
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %.0f/s err %d", name, float64(ok)/every.Seconds(), errs))
			}
			fmt.Fprintf(r.cfg.Progress, "\r[%5.1fs] %s | in flight %d   ", time.Since(start).Seconds(), strings.Join(parts, " | "), r.inflight.Load())
		}
	}()
	return func() { close(done); <-finished }
}

// WriteText prints the report as a table.
func (rep *Report) WriteText(w io.Writer) {
	if rep.Arrivals > 0 && rep.Arrivals < rep.Elapsed {
		fmt.Fprintf(w, "%s against %s, %s, %.1fs of arrivals, %.1fs in all (waiting for the tasks created)\n", rep.Mode, rep.URL, rep.Load,
			time.Duration(rep.Arrivals).Seconds(), time.Duration(rep.Elapsed).Seconds())
	} else {
		fmt.Fprintf(w, "%s against %s, %s, %.1fs\n", rep.Mode, rep.URL, rep.Load, time.Duration(rep.Elapsed).Seconds())
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tcount\tok\terrors\tok/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\t")
	for _, name := range []string{OpSetup, OpCreate, OpQuery, OpCompletion, OpDownload} {
		o, ok := rep.Ops[name]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", name, o.Count, o.OK, o.Errors, o.Throughput, o.Latency.P50, o.Latency.P90, o.Latency.P99, o.Latency.Max)
	}
	_ = tw.Flush()
	for _, name := range []string{OpSetup, OpCreate, OpQuery, OpCompletion, OpDownload} {
		o, ok := rep.Ops[name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "%s status: %s\n", name, counts(o.Status))
		if len(o.ErrorTypes) > 0 {
			fmt.Fprintf(w, "%s errors: %s\n", name, counts(o.ErrorTypes))
		}
	}
	if len(rep.TaskOutcome) > 0 {
		fmt.Fprintf(w, "task outcomes: %s\n", counts(rep.TaskOutcome))
	}
	if rep.Dropped > 0 {
		fmt.Fprintf(w, "dropped (over --max-inflight): %d\n", rep.Dropped)
	}
}

func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
