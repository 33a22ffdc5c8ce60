package main

// The quota part (--only quota) measures the shared upstream quota: three
// bin/worker processes (--quota-workers) run the Gemini generator against a
// fake upstream served by the benchmark itself, with
// EASEL_UPSTREAM_RPM=*=<--quota-rpm>, while tasks are created through
// bin/gateway steadily faster than that (--quota-rate per second) for
// --duration (5m by default). The fake upstream answers after
// --quota-latency with a small PNG, and 429 at once to every
// --quota-429-every-th call (10: one in ten).
//
// From the upstream's own record of the calls it received: the most calls
// in any 60 s window (a window starting at each call, so the true maximum),
// the mean over the windows that fit in the run (one a second), and the
// 429s; from the task records after the run: the tasks completed, failed
// (by failure code) and still queued or processing, which are not failures.
// The targets: at most --quota-rpm + 1 calls in any 60 s window (the quota
// holds a window to rpm + burst - 1; burst is 1), and no task failed: the
// retry budget (EASEL_RETRY_MAX_ATTEMPTS=4) covers one 429 in ten.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
)

// quotaResult is the quota part's figures. Times are seconds from the
// first create.
type quotaResult struct {
	Workers      int      `json:"workers"`
	RPM          int      `json:"upstream_rpm"`
	CreateRate   float64  `json:"create_per_s"`
	LatencyS     float64  `json:"upstream_latency_s"`
	Every429     int      `json:"upstream_429_every"`
	DurationS    float64  `json:"duration_s"`
	TaskDeadline string   `json:"task_deadline"`
	WorkerEnv    []string `json:"worker_env"`

	// Calls is every call the upstream received; Throttled those it
	// answered 429.
	Calls     int `json:"upstream_calls"`
	Throttled int `json:"upstream_429s"`
	// MaxPerWindow is the most calls in any 60 s window of the run;
	// MeanPerWindow the mean over the windows starting each second that
	// fit in it (the whole run's rate per minute if none does);
	// RatePerMin the calls over the whole run, per minute.
	MaxPerWindow  int     `json:"max_calls_per_60s"`
	MeanPerWindow float64 `json:"mean_calls_per_60s"`
	RatePerMin    float64 `json:"calls_per_min_run"`

	Created     int64          `json:"created"`
	CreateFails int64          `json:"create_failures"`
	Completed   int            `json:"completed"`
	Failed      int            `json:"failed"`
	FailedCodes map[string]int `json:"failed_codes,omitempty"`
	Queued      int            `json:"queued_at_end"`
	Processing  int            `json:"processing_at_end"`
	// Retries is Asynq's retry set at the end, Archived its archive.
	Retries  int `json:"asynq_retry_at_end"`
	Archived int `json:"asynq_archived_at_end"`

	// CallTimes are the calls' arrival times, 429s as negative numbers.
	CallTimes []float64 `json:"call_times_s"`
}

// fakeUpstream speaks Gemini's generateContent: an image after latency,
// or 429 at once to every every-th call.
type fakeUpstream struct {
	latency time.Duration
	every   int
	t0      time.Time
	png     []byte

	mu        sync.Mutex
	calls     []float64 // arrival, seconds after t0; negative for a 429
	throttled int
}

func newFakeUpstream(latency time.Duration, every int) *fakeUpstream {
	var buf bytes.Buffer
	img := image.NewNRGBA(image.Rect(0, 0, 64, 64))
	for i := range img.Pix {
		img.Pix[i] = 0xc0
	}
	img.Set(0, 0, color.NRGBA{R: 1, A: 255})
	_ = png.Encode(&buf, img)
	return &fakeUpstream{latency: latency, every: every, t0: time.Now(), png: buf.Bytes()}
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	n := len(f.calls) + 1
	at := time.Since(f.t0).Seconds()
	throttle := f.every > 0 && n%f.every == 0
	if throttle {
		f.throttled++
		at = -at
		if at == 0 {
			at = -1e-9
		}
	}
	f.calls = append(f.calls, at)
	f.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	if throttle {
		reply(http.StatusTooManyRequests, map[string]any{"error": map[string]any{"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "quota exceeded (easelbench)"}})
		return
	}
	select {
	case <-time.After(f.latency):
	case <-r.Context().Done():
		return
	}
	reply(http.StatusOK, map[string]any{"candidates": []any{map[string]any{
		"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(f.png)}}}},
		"finishReason": "STOP",
	}}})
}

// record is the calls so far (arrival times, negative for 429s) and the
// 429s.
func (f *fakeUpstream) record() ([]float64, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]float64(nil), f.calls...), f.throttled
}

// serveLoopback serves h on a free loopback port until the returned stop.
func serveLoopback(h http.Handler) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}, nil
}

// windowCounts are the most calls in any window of w seconds (anchored at
// each call: the maximum over every window) and the mean over the windows
// starting each second from 0 that end by dur (the whole run scaled to w
// if none does). times need not be sorted; negative ones are 429s, counted
// at their absolute value.
func windowCounts(times []float64, w, dur float64) (maxN int, mean float64) {
	t := make([]float64, len(times))
	for i, v := range times {
		if v < 0 {
			v = -v
		}
		t[i] = v
	}
	sort.Float64s(t)
	j := 0
	for i := range t {
		for j < len(t) && t[j] < t[i]+w {
			j++
		}
		maxN = max(maxN, j-i)
	}
	if dur < w {
		if dur <= 0 {
			return maxN, 0
		}
		return maxN, float64(len(t)) * w / dur
	}
	var sum, n float64
	for s := 0.0; s+w <= dur+1e-9; s++ {
		lo := sort.SearchFloat64s(t, s)
		hi := sort.SearchFloat64s(t, s+w)
		sum += float64(hi - lo)
		n++
	}
	return maxN, sum / n
}

// quotaDeadline is the gateway's EASEL_TASK_DEADLINE in the quota part:
// tasks created faster than the quota wait their turn, which is not a
// failure.
const quotaDeadline = "30m"

func (e *env) quota(ctx context.Context, res *results) error {
	o := e.o
	dur := o.quotaDuration()
	if err := e.fresh(ctx); err != nil {
		return err
	}
	up := newFakeUpstream(o.quotaLatency, o.quota429Every)
	upBase, stopUp, err := serveLoopback(up)
	if err != nil {
		return err
	}
	defer stopUp()
	gw, base, err := e.startGatewayEnv(ctx, "EASEL_TASK_DEADLINE="+quotaDeadline)
	if err != nil {
		return err
	}
	defer gw.stop()
	qr := &quotaResult{Workers: o.quotaWorkers, RPM: o.quotaRPM, CreateRate: o.quotaRate, LatencyS: o.quotaLatency.Seconds(),
		Every429: o.quota429Every, DurationS: dur.Seconds(), TaskDeadline: quotaDeadline}
	wenv := []string{"EASEL_GENERATOR=gemini", "EASEL_GEMINI_API_KEY=x", "EASEL_GEMINI_BASE_URL=" + upBase,
		"EASEL_UPSTREAM_RPM=*=" + strconv.Itoa(o.quotaRPM), "EASEL_RETRY_MAX_ATTEMPTS=4"}
	qr.WorkerEnv = append(append([]string(nil), wenv...), o.workerEnv...)
	var workers []*proc
	defer func() {
		for _, w := range workers {
			w.kill()
		}
	}()
	for i := 1; i <= o.quotaWorkers; i++ {
		addr := freeAddr()
		env := append(e.serviceEnv(append([]string{"EASEL_WORKER_HTTP_ADDR=" + addr}, wenv...)...), o.workerEnv...)
		w, err := startProc(fmt.Sprintf("worker-quota-%d", i), filepath.Join(o.binDir, "worker"), nil, env, io.Discard)
		if err != nil {
			return err
		}
		workers = append(workers, w)
		if err := w.waitReady(ctx, "http://"+addr+"/readyz"); err != nil {
			return fmt.Errorf("worker %d not ready (its log: %s): %w", i, filepath.Join(logDir(), fmt.Sprintf("worker-quota-%d.log", i)), err)
		}
	}

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	body := []byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"a lighthouse on a cliff at dusk","aspect_ratio":"1:1"}}`)
	var created, createFails atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	up.mu.Lock()
	up.t0 = t0
	up.mu.Unlock()
	interval := time.Duration(float64(time.Second) / o.quotaRate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	logTick := time.NewTicker(15 * time.Second)
	defer logTick.Stop()
	end := time.After(dur)
loop:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			break loop
		case <-logTick.C:
			calls, thr := up.record()
			recent := 0
			el := time.Since(t0).Seconds()
			for _, c := range calls {
				if c < 0 {
					c = -c
				}
				if c >= el-60 {
					recent++
				}
			}
			e.logf("  %3.0fs: %d created, %d upstream calls (%d in the last 60 s), %d 429s", el, created.Load(), len(calls), recent, thr)
			for i, w := range workers {
				if ok, err := w.exited(); ok {
					return fmt.Errorf("worker %d exited during the run: %v", i+1, err)
				}
			}
		case <-tick.C:
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := createTask(ctx, client, base, e.keys[0], body); err != nil {
					createFails.Add(1)
					e.logf("  create: %v", err)
					return
				}
				created.Add(1)
			}()
		}
	}
	wg.Wait()
	calls, thr := up.record()
	el := time.Since(t0).Seconds()
	for _, w := range workers {
		w.kill()
	}
	qr.Calls, qr.Throttled, qr.CallTimes = len(calls), thr, calls
	qr.MaxPerWindow, qr.MeanPerWindow = windowCounts(calls, 60, el)
	qr.RatePerMin = float64(len(calls)) * 60 / el
	qr.Created, qr.CreateFails = created.Load(), createFails.Load()

	if err := eachTask(ctx, e.tasks(), e.acct, func(t *task.Task) error {
		switch t.Status {
		case task.Completed:
			qr.Completed++
		case task.Failed:
			qr.Failed++
			code := "unknown"
			if t.Failure != nil {
				code = t.Failure.Code
			}
			if qr.FailedCodes == nil {
				qr.FailedCodes = map[string]int{}
			}
			qr.FailedCodes[code]++
		case task.Processing:
			qr.Processing++
		default:
			qr.Queued++
		}
		return nil
	}); err != nil {
		return fmt.Errorf("task records: %w", err)
	}
	qr.Retries, qr.Archived, err = asynqRetries(asynq.NewInspectorFromRedisClient(e.rdb))
	if err != nil {
		return err
	}
	res.Quota = qr
	e.logf("  upstream calls: %d (%d 429s), max %d and mean %.1f per 60 s window; tasks: %d created, %d completed, %d failed, %d queued, %d processing",
		qr.Calls, qr.Throttled, qr.MaxPerWindow, qr.MeanPerWindow, qr.Created, qr.Completed, qr.Failed, qr.Queued, qr.Processing)
	return nil
}

// asynqRetries sums Asynq's retry and archived sets over the queues.
func asynqRetries(insp *asynq.Inspector) (retry, archived int, err error) {
	queues, err := insp.Queues()
	if err != nil {
		return 0, 0, fmt.Errorf("asynq queues: %w", err)
	}
	for _, q := range queues {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			return 0, 0, fmt.Errorf("queue %s: %w", q, err)
		}
		retry += info.Retry
		archived += info.Archived
	}
	return retry, archived, nil
}

// createTask creates one task through the gateway and returns its id.
func createTask(ctx context.Context, client *http.Client, base, key string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/task/create", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var env struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Code != 200 || env.Data.TaskID == "" {
		return "", fmt.Errorf("create: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return env.Data.TaskID, nil
}

// waitFinal polls a task's record every poll until it is completed or
// failed, and returns it with when the poll saw it.
func waitFinal(ctx context.Context, st *store.Tasks, acct, id string, poll, timeout time.Duration) (*task.Task, time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		t, err := st.Get(ctx, acct, id)
		var nf *apperr.NotFoundError
		if err != nil && !errors.As(err, &nf) {
			return nil, time.Time{}, err
		}
		if t != nil && (t.Status == task.Completed || t.Status == task.Failed) {
			return t, time.Now(), nil
		}
		if time.Now().After(deadline) {
			status := "no record"
			if t != nil {
				status = string(t.Status)
			}
			return t, time.Time{}, fmt.Errorf("task %s still %s after %s", id, status, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, time.Time{}, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// rows adds the quota figures to the results table.
func (r *quotaResult) rows(w io.Writer) {
	if r == nil {
		fmt.Fprintf(w, "shared upstream quota (--only quota)\t%s\t\t\t\t%s\t\n", notRun, notRun)
		return
	}
	fmt.Fprintf(w, "quota: upstream calls per 60 s window, max / mean (%d workers, limit %d/min)\t%d / %.1f\t\t\t<= %d\t%s\t\n",
		r.Workers, r.RPM, r.MaxPerWindow, r.MeanPerWindow, r.RPM+1, yes(r.MaxPerWindow <= r.RPM+1))
	fmt.Fprintf(w, "quota: tasks failed (429 to 1 call in %d)\t%d\t\t\t0\t%s\t\n", r.Every429, r.Failed, yes(r.Failed == 0))
}

// details is the quota run's line under the table.
func (r *quotaResult) details(w io.Writer) {
	if r == nil {
		return
	}
	codes := ""
	if len(r.FailedCodes) > 0 {
		b, _ := json.Marshal(r.FailedCodes)
		codes = " " + string(b)
	}
	fmt.Fprintf(w, "quota: %d workers, EASEL_UPSTREAM_RPM=*=%d, %.1f creates/s for %gs, upstream latency %gs, 429 to every %dth call; "+
		"%d upstream calls (%d 429s, %.1f/min over the run); tasks %d created (%d create failures), %d completed, %d failed%s, %d queued and %d processing at the end; Asynq retry %d, archived %d\n",
		r.Workers, r.RPM, r.CreateRate, r.DurationS, r.LatencyS, r.Every429, r.Calls, r.Throttled, r.RatePerMin,
		r.Created, r.CreateFails, r.Completed, r.Failed, codes, r.Queued, r.Processing, r.Retries, r.Archived)
}
