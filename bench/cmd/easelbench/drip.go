package main

// The drip part (--only drip) measures the drip attack: account
// A creates --drip-tasks editing tasks whose one source image a loopback
// server sends at 1 byte/s (it never completes within the worker's
// EASEL_FETCH_TIMEOUT), and account B's plain text-to-image tasks are
// timed, create to completed (the record polled every 50 ms), one after
// another: --drip-samples of them before A's tasks (unloaded, after one
// warm-up task, whose picture the generator paints once) and as many while
// A's fetches hold their connections open. One bin/worker, with its own
// default concurrency and fair share, EASEL_SIM_DELAY=1s and
// EASEL_FETCH_ALLOW_PRIVATE=true (the source is on loopback). The target:
// B's median latency under attack within 2 s of its unloaded median. A's
// tasks are then waited for: they should fail with source_fetch_failed
// once the fetch timeout cuts them.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/easelhq/easel/pkg/account"
)

// dripTarget is how much slower B's median may be under attack.
const dripTarget = 2 * time.Second

// dripResult is the drip part's figures.
type dripResult struct {
	Tasks     int      `json:"attacker_tasks"`
	Samples   int      `json:"samples"`
	SimDelayS float64  `json:"sim_delay_s"`
	WorkerEnv []string `json:"worker_env"`

	// B's latencies, create to completed as polled, in seconds.
	Unloaded []float64 `json:"unloaded_s"`
	Attacked []float64 `json:"attacked_s"`
	// Medians, and attacked minus unloaded.
	UnloadedMedianS float64 `json:"unloaded_median_s"`
	AttackedMedianS float64 `json:"attacked_median_s"`
	DiffS           float64 `json:"difference_s"`

	// Connections the drip server held open: when B's tasks under attack
	// were created, the fewest at their completions (fewer than Tasks:
	// some of B's tasks completed after the attack ended), at most; and
	// all it was asked for.
	HeldAtStart  int64 `json:"drip_connections_at_start"`
	HeldMin      int64 `json:"drip_connections_min_during"`
	HeldMax      int64 `json:"drip_connections_max"`
	DripRequests int64 `json:"drip_requests"`

	// How A's tasks ended, by status or failure code, and how long they
	// took, create to final, at most.
	AttackerOutcomes map[string]int `json:"attacker_outcomes"`
	AttackerMaxS     float64        `json:"attacker_max_s"`
	BFailed          int            `json:"b_failed"`
}

// dripServer sends a PNG signature and then zeros, one byte a second,
// until the client goes away.
type dripServer struct {
	active, peak, requests atomic.Int64
	every                  time.Duration
}

func (d *dripServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.requests.Add(1)
	n := d.active.Add(1)
	defer d.active.Add(-1)
	for {
		p := d.peak.Load()
		if n <= p || d.peak.CompareAndSwap(p, n) {
			break
		}
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", "1000000")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	sig := []byte("\x89PNG\r\n\x1a\n")
	tick := time.NewTicker(d.every)
	defer tick.Stop()
	for i := 0; i < 1000000; i++ {
		b := byte(0)
		if i < len(sig) {
			b = sig[i]
		}
		if _, err := w.Write([]byte{b}); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func (e *env) drip(ctx context.Context, res *results) error {
	o := e.o
	if err := e.fresh(ctx); err != nil {
		return err
	}
	st := e.tasks()
	b, err := e.accounts().Create(ctx, account.Spec{Name: "bench-b", Credits: 1e12, RateLimit: 1_000_000, QueryRateLimit: 1_000_000, MaxInflight: 1_000_000})
	if err != nil {
		return fmt.Errorf("account B: %w", err)
	}
	bKey, _, err := e.accounts().CreateKey(ctx, b.ID)
	if err != nil {
		return fmt.Errorf("account B key: %w", err)
	}
	ds := &dripServer{every: time.Second}
	src, stopSrc, err := serveLoopback(ds)
	if err != nil {
		return err
	}
	defer stopSrc()
	gw, base, err := e.startGatewayEnv(ctx, "EASEL_FETCH_ALLOW_PRIVATE=true") // the sources are on loopback
	if err != nil {
		return err
	}
	defer gw.stop()
	const simDelay = "1s"
	wenv := []string{"EASEL_SIM_DELAY=" + simDelay, "EASEL_FETCH_ALLOW_PRIVATE=true"}
	dr := &dripResult{Tasks: o.dripTasks, Samples: o.dripSamples, SimDelayS: 1, WorkerEnv: append(append([]string(nil), wenv...), o.workerEnv...)}
	waddr := freeAddr()
	wk, err := startProc("worker-drip", filepath.Join(o.binDir, "worker"), nil,
		append(e.serviceEnv(append([]string{"EASEL_WORKER_HTTP_ADDR=" + waddr}, wenv...)...), o.workerEnv...), io.Discard)
	if err != nil {
		return err
	}
	defer wk.kill()
	if err := wk.waitReady(ctx, "http://"+waddr+"/readyz"); err != nil {
		return fmt.Errorf("worker not ready (its log: %s): %w", filepath.Join(logDir(), "worker-drip.log"), err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	plain := []byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"a lighthouse on a cliff at dusk","aspect_ratio":"1:1"}}`)
	// one times one of B's tasks, create to completed, and says how many
	// drip connections were held when it completed.
	one := func() (float64, int64, error) {
		start := time.Now()
		id, err := createTask(ctx, client, base, bKey, plain)
		if err != nil {
			return 0, 0, err
		}
		t, seen, err := waitFinal(ctx, st, b.ID, id, 50*time.Millisecond, 2*time.Minute)
		if err != nil {
			return 0, 0, err
		}
		held := ds.active.Load()
		if t.Status != "completed" {
			return 0, held, fmt.Errorf("account B's task %s %s: %+v", id, t.Status, t.Failure)
		}
		return seen.Sub(start).Seconds(), held, nil
	}
	// batch times --drip-samples of B's tasks created together: under
	// attack, each of them waits while the attack holds (one after
	// another, only the first would: the rest would run after the fetch
	// timeout freed what the attack held). It returns the latencies and the
	// fewest drip connections held at a completion.
	batch := func() ([]float64, int64, error) {
		lat := make([]float64, o.dripSamples)
		held := make([]int64, o.dripSamples)
		errs := make([]error, o.dripSamples)
		var wg sync.WaitGroup
		for i := range lat {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lat[i], held[i], errs[i] = one()
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				dr.BFailed++
				return nil, 0, err
			}
		}
		return lat, slices.Min(held), nil
	}
	if _, _, err := one(); err != nil { // warm-up: the generator paints the picture once
		return fmt.Errorf("warm-up: %w", err)
	}
	if dr.Unloaded, _, err = batch(); err != nil {
		return err
	}
	e.logf("  unloaded: %v s", round2(dr.Unloaded))

	// The attack.
	edit := []byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"make it blue","image_urls":["` + src + `/drip.png"]}}`)
	type attack struct {
		id      string
		created time.Time
	}
	attacks := make([]attack, o.dripTasks)
	var wg sync.WaitGroup
	errs := make(chan error, o.dripTasks)
	for i := range attacks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			attacks[i].created = time.Now()
			id, err := createTask(ctx, client, base, e.keys[i%len(e.keys)], edit)
			if err != nil {
				errs <- err
				return
			}
			attacks[i].id = id
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("account A's tasks: %w", err)
	}
	// Until every fetch holds its connection (or 10 s).
	for wait := time.Now().Add(10 * time.Second); ds.active.Load() < int64(o.dripTasks) && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	dr.HeldAtStart = ds.active.Load()
	e.logf("  %d drip connections held", dr.HeldAtStart)
	if dr.Attacked, dr.HeldMin, err = batch(); err != nil {
		return err
	}
	e.logf("  under attack: %v s (drip connections at least %d at their completions)", round2(dr.Attacked), dr.HeldMin)
	dr.UnloadedMedianS, dr.AttackedMedianS = median(dr.Unloaded), median(dr.Attacked)
	dr.DiffS = dr.AttackedMedianS - dr.UnloadedMedianS

	// How the attack ended.
	dr.AttackerOutcomes = map[string]int{}
	for _, a := range attacks {
		t, seen, err := waitFinal(ctx, st, e.acct, a.id, 200*time.Millisecond, 3*time.Minute)
		if err != nil {
			dr.AttackerOutcomes["unfinished"]++
			continue
		}
		key := string(t.Status)
		if t.Failure != nil {
			key += ": " + t.Failure.Code
		}
		dr.AttackerOutcomes[key]++
		dr.AttackerMaxS = max(dr.AttackerMaxS, seen.Sub(a.created).Seconds())
	}
	dr.HeldMax, dr.DripRequests = ds.peak.Load(), ds.requests.Load()
	res.Drip = dr
	e.logf("  B median %.2f s unloaded, %.2f s under attack (%+.2f s); A: %v", dr.UnloadedMedianS, dr.AttackedMedianS, dr.DiffS, dr.AttackerOutcomes)
	return nil
}

func (r *dripResult) rows(w io.Writer) {
	if r == nil {
		fmt.Fprintf(w, "drip attack (--only drip)\t%s\t\t\t\t%s\t\n", notRun, notRun)
		return
	}
	fmt.Fprintf(w, "drip: other account's latency, median under attack / unloaded (%d drip tasks)\t%.2f s\t%.2f s\t%+.2f s\t<= +%.0f s\t%s\t\n",
		r.Tasks, r.AttackedMedianS, r.UnloadedMedianS, r.DiffS, dripTarget.Seconds(), yes(r.DiffS <= dripTarget.Seconds()))
}

func (r *dripResult) details(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "drip: %d tasks of account A on a 1 byte/s source, %d of B's timed each way (sim delay %gs): unloaded %v s, under attack %v s; "+
		"drip connections %d when measuring began, at least %d during, %d at most, %d requests; A's tasks %v, the last final %.1f s after its create\n",
		r.Tasks, r.Samples, r.SimDelayS, round2(r.Unloaded), round2(r.Attacked), r.HeldAtStart, r.HeldMin, r.HeldMax, r.DripRequests, r.AttackerOutcomes, r.AttackerMaxS)
}

// round2 rounds figures to hundredths for printing.
func round2(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(int64(x*100+0.5)) / 100
	}
	return out
}
