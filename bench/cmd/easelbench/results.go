package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// results are the benchmark's figures. A figure of a part that did not run
// (--only) is left out of the JSON (an empty list, a nil pointer) and reads
// "not run" in the table, never a number or a pass.
type results struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Command string `json:"command"`
	Rounds  int    `json:"rounds"`
	// Parts are the parts that ran (--only), in the order they ran.
	Parts []string `json:"parts"`
	// Redis is the deployment it ran on (--redis): single, one
	// redis-server, or cluster, a Redis Cluster of RedisNodes masters.
	Redis      string `json:"redis"`
	RedisNodes int    `json:"redis_nodes"`

	CreateBaseline []float64 `json:"create_baseline_per_s,omitempty"`
	CreateReal     []float64 `json:"create_real_per_s,omitempty"`
	QueryBaseline  []float64 `json:"query_baseline_per_s,omitempty"`
	QueryReal      []float64 `json:"query_real_per_s,omitempty"`
	DrainBaseline  []float64 `json:"drain_baseline_per_s,omitempty"`
	DrainReal      []float64 `json:"drain_real_per_s,omitempty"`

	// CPU microseconds per create request, by process (gateway, redis,
	// self: the load generator), one map per round. On a cluster "redis" is
	// the sum over the masters, and "redis@host:port" each master's part.
	CreateCPUReal     []map[string]float64 `json:"create_real_cpu_us_per_request,omitempty"`
	CreateCPUBaseline []map[string]float64 `json:"create_baseline_cpu_us_per_request,omitempty"`
	// CPU microseconds per task drained, by process (worker, redis; on a
	// cluster also redis@host:port).
	DrainCPUReal     []map[string]float64 `json:"drain_real_cpu_us_per_task,omitempty"`
	DrainCPUBaseline []map[string]float64 `json:"drain_baseline_cpu_us_per_task,omitempty"`

	// Redis CPU microseconds per task over its whole life (drain): create
	// (the real gateway; the baseline's raw Asynq enqueues) to complete,
	// in the timed drain runs; "redis", and on a cluster redis@host:port.
	LifeCPUReal     []map[string]float64 `json:"life_real_redis_cpu_us_per_task,omitempty"`
	LifeCPUBaseline []map[string]float64 `json:"life_baseline_redis_cpu_us_per_task,omitempty"`

	// CPU microseconds per query, by process, as for creates.
	QueryCPUReal     []map[string]float64 `json:"query_real_cpu_us_per_request,omitempty"`
	QueryCPUBaseline []map[string]float64 `json:"query_baseline_cpu_us_per_request,omitempty"`

	CreateP50         []float64 `json:"create_real_p50_ms,omitempty"`
	QueryP50          []float64 `json:"query_real_p50_ms,omitempty"`
	CreateP99         []float64 `json:"create_real_p99_ms,omitempty"`
	QueryP99          []float64 `json:"query_real_p99_ms,omitempty"`
	CreateP99Baseline []float64 `json:"create_baseline_p99_ms,omitempty"`
	QueryP99Baseline  []float64 `json:"query_baseline_p99_ms,omitempty"`

	// Redis commands per request over a fixed run (the first round).
	CreateCommandsReal     *commandCounts `json:"create_real_commands,omitempty"`
	CreateCommandsBaseline *commandCounts `json:"create_baseline_commands,omitempty"`
	QueryCommandsReal      *commandCounts `json:"query_real_commands,omitempty"`
	QueryCommandsBaseline  *commandCounts `json:"query_baseline_commands,omitempty"`

	// Redis commands per task over its whole life, counted in the first
	// drain round (life.go).
	LifeCommandsReal     *lifeCounts `json:"life_real_commands,omitempty"`
	LifeCommandsBaseline *lifeCounts `json:"life_baseline_commands,omitempty"`

	// Pick-up latency (--only pickup).
	PickupP50 *float64 `json:"pickup_p50_ms,omitempty"`
	PickupP90 *float64 `json:"pickup_p90_ms,omitempty"`
	PickupP99 *float64 `json:"pickup_p99_ms,omitempty"`
	PickupMax *float64 `json:"pickup_max_ms,omitempty"`
	PickupN   *int     `json:"pickup_tasks,omitempty"`

	// GatewayRSSMB is the real gateway's VmHWM after the create and query
	// runs (http); WorkerRSSMB the worker's after a drain (drain).
	GatewayRSSMB *float64 `json:"gateway_peak_rss_mb,omitempty"`
	WorkerRSSMB  *float64 `json:"worker_peak_rss_mb,omitempty"`

	// Redis memory, measured after the first real create run (http).
	TaskRecordBytes *float64 `json:"task_record_bytes,omitempty"`
	// PerTaskBytes is the growth of used_memory (summed over the masters of
	// a cluster) per task created.
	PerTaskBytes *float64 `json:"redis_bytes_per_task,omitempty"`

	// Inflight is the slow-generation run (--only inflight).
	Inflight *inflightResult `json:"inflight,omitempty"`
	// Quota, Drip and Memory are the attacks on the worker's limits
	// (--only quota, drip, memory).
	Quota  *quotaResult  `json:"quota,omitempty"`
	Drip   *dripResult   `json:"drip,omitempty"`
	Memory *memoryResult `json:"memory,omitempty"`
	// Waiters is query's wait=N under many waiting requests (--only
	// waiters).
	Waiters *waitersResult `json:"waiters,omitempty"`
	// Scale is background work at scale (--only scale).
	Scale *scaleResult `json:"scale,omitempty"`
	// Downloads is results streamed by the gateway against a bare
	// http.ServeContent (--only downloads).
	Downloads *downloadResult `json:"downloads,omitempty"`
}

// notRun is what the table says of a figure whose part did not run.
const notRun = "not run"

// ptr returns a pointer to v, for the figures that may be absent.
func ptr[T any](v T) *T { return &v }

// setMax raises *p to v, setting it if absent: a peak over rounds.
func setMax(p **float64, v float64) {
	if *p == nil || v > **p || math.IsNaN(**p) {
		*p = ptr(v)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// value formats a figure that may be absent (not run) or unreadable (NaN).
func value(v *float64, format string) string {
	switch {
	case v == nil:
		return notRun
	case math.IsNaN(*v):
		return "unknown"
	}
	return fmt.Sprintf(format, *v)
}

// met says whether a figure that may be absent meets its target: "not run"
// and "unknown" are neither a pass nor a failure.
func met(v *float64, ok func(float64) bool) string {
	switch {
	case v == nil:
		return notRun
	case math.IsNaN(*v):
		return "unknown"
	}
	return yes(ok(*v))
}

func (r *results) print(w io.Writer) {
	fmt.Fprintf(w, "\nEasel benchmark, %s, %s\n%s\nRedis: %s, %d node(s)\n\n", r.Date, r.Machine, r.Command, r.Redis, r.RedisNodes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\treal (median)\tbaseline (median)\tratio\ttarget\tmet\t")
	row := func(name string, real, base []float64, unit string, target float64) {
		if len(real) == 0 || len(base) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t\t\t>= %.2f\t%s\t\n", name, notRun, target, notRun)
			return
		}
		ratio := median(real) / median(base)
		fmt.Fprintf(tw, "%s\t%.0f %s\t%.0f %s\t%.2f\t>= %.2f\t%s\t\n", name, median(real), unit, median(base), unit, ratio, target, yes(ratio >= target))
	}
	row("create throughput", r.CreateReal, r.CreateBaseline, "/s", 0.6)
	row("query throughput", r.QueryReal, r.QueryBaseline, "/s", 0.9)
	// At most this many times the baseline's.
	atMost := func(name string, real, base []float64, unit string, bound float64) {
		if len(real) == 0 || len(base) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t\t\t<= %.1fx\t%s\t\n", name, notRun, bound, notRun)
			return
		}
		ratio := median(real) / median(base)
		fmt.Fprintf(tw, "%s\t%.1f %s\t%.1f %s\t%.2f\t<= %.1fx\t%s\t\n", name, median(real), unit, median(base), unit, ratio, bound, yes(ratio <= bound))
	}
	atMost("CPU per create, all processes", cpuSums(r.CreateCPUReal), cpuSums(r.CreateCPUBaseline), "µs", 1.5)
	atMost("CPU per query, all processes", cpuSums(r.QueryCPUReal), cpuSums(r.QueryCPUBaseline), "µs", 1.5)
	atMost("create p99 latency (64 connections)", r.CreateP99, r.CreateP99Baseline, "ms", 2)
	atMost("query p99 latency (64 connections)", r.QueryP99, r.QueryP99Baseline, "ms", 2)
	commands := func(name string, real, base *commandCounts, bound float64) {
		if real == nil || base == nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\t<= %.0f\t%s\t\n", name, notRun, bound, notRun)
			return
		}
		r, b := sum(real.Sent), sum(base.Sent)
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t\t<= %.0f\t%s\t\n", name, r, b, bound, yes(r <= bound+0.05))
	}
	commands("Redis round trips per create", r.CreateCommandsReal, r.CreateCommandsBaseline, 2)
	commands("Redis round trips per query", r.QueryCommandsReal, r.QueryCommandsBaseline, 1)
	row("end-to-end tasks (zero-delay generator, share on)", r.DrainReal, r.DrainBaseline, "/s", 0.6)
	life := func(name string, pick func(*lifeCounts) map[string]float64, bound float64) {
		if r.LifeCommandsReal == nil || r.LifeCommandsBaseline == nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\t<= %.0f\t%s\t\n", name, notRun, bound, notRun)
			return
		}
		real, base := sum(pick(r.LifeCommandsReal)), sum(pick(r.LifeCommandsBaseline))
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t<= %.0f\t%s\t\n", name, real, base, real/base, bound, yes(real <= bound+0.005))
	}
	life("Redis commands per task, whole life", func(c *lifeCounts) map[string]float64 { return c.Stats }, 35)
	life("Redis round trips per task, whole life", func(c *lifeCounts) map[string]float64 { return c.Sent }, 5)
	atMost("Redis CPU per task, whole life", redisCPU(r.LifeCPUReal), redisCPU(r.LifeCPUBaseline), "µs", 2)
	pickup, pickupMet := notRun, notRun
	if r.PickupP50 != nil && r.PickupP99 != nil {
		pickup = fmt.Sprintf("%.1f / %.1f ms", *r.PickupP50, *r.PickupP99)
		pickupMet = yes(*r.PickupP50 <= 100 && *r.PickupP99 <= 300)
	}
	fmt.Fprintf(tw, "pick-up latency p50 / p99\t%s\t\t\t<= 100 / 300 ms\t%s\t\n", pickup, pickupMet)
	fmt.Fprintf(tw, "gateway peak RSS (%s)\t%s\t\t\t<= 100 MB\t%s\t\n", "64 connections", value(r.GatewayRSSMB, "%.1f MB"), met(r.GatewayRSSMB, func(v float64) bool { return v <= 100 }))
	fmt.Fprintf(tw, "worker peak RSS\t%s\t\t\t\t\t\n", value(r.WorkerRSSMB, "%.1f MB"))
	fmt.Fprintf(tw, "Redis memory per task record\t%s\t\t\t\t\t\n", value(r.TaskRecordBytes, "%.0f B"))
	fmt.Fprintf(tw, "Redis memory per task, all keys\t%s\t\t\t\t\t\n", value(r.PerTaskBytes, "%.0f B"))
	r.Inflight.rows(tw)
	r.Quota.rows(tw)
	r.Drip.rows(tw)
	r.Memory.rows(tw)
	r.Waiters.rows(tw)
	r.Downloads.rows(tw)
	r.Scale.rows(tw)
	_ = tw.Flush()

	var rounds []string
	if len(r.CreateReal) > 0 || len(r.CreateBaseline) > 0 {
		rounds = append(rounds, "create "+pairs(r.CreateReal, r.CreateBaseline), "query "+pairs(r.QueryReal, r.QueryBaseline))
	}
	if len(r.DrainReal) > 0 || len(r.DrainBaseline) > 0 {
		rounds = append(rounds, "end-to-end "+pairs(r.DrainReal, r.DrainBaseline))
	}
	if len(rounds) > 0 {
		fmt.Fprintf(w, "\nper round (real/baseline): %s\n", strings.Join(rounds, "; "))
	}
	if len(r.CreateP50) > 0 && len(r.QueryP50) > 0 {
		fmt.Fprintf(w, "real gateway p50 latency at %s: create %.2f ms, query %.2f ms (medians of rounds)\n", "64 connections", median(r.CreateP50), median(r.QueryP50))
	}
	if len(r.CreateP99) > 0 && len(r.CreateP99Baseline) > 0 {
		fmt.Fprintf(w, "p99 latency at 64 connections, real / baseline (medians of rounds): create %.2f / %.2f ms, query %.2f / %.2f ms\n",
			median(r.CreateP99), median(r.CreateP99Baseline), median(r.QueryP99), median(r.QueryP99Baseline))
	}
	if len(r.CreateCPUReal) > 0 && len(r.CreateCPUBaseline) > 0 {
		fmt.Fprintf(w, "CPU per create request, real / baseline (medians of rounds):%s\n",
			cpuPairs(r.CreateCPUReal, r.CreateCPUBaseline, []string{"gateway", "redis", "self"}, map[string]string{"self": "load generator"}))
	}
	if len(r.QueryCPUReal) > 0 && len(r.QueryCPUBaseline) > 0 {
		fmt.Fprintf(w, "CPU per query request, real / baseline (medians of rounds):%s\n",
			cpuPairs(r.QueryCPUReal, r.QueryCPUBaseline, []string{"gateway", "redis", "self"}, map[string]string{"self": "load generator"}))
	}
	for _, c := range []struct {
		name       string
		real, base *commandCounts
	}{{"create", r.CreateCommandsReal, r.CreateCommandsBaseline}, {"query", r.QueryCommandsReal, r.QueryCommandsBaseline}} {
		if c.real == nil || c.base == nil {
			continue
		}
		fmt.Fprintf(w, "Redis commands per %s over %d requests (sent by clients: round trips; INFO commandstats: with the scripts' own):\n", c.name, c.real.Requests)
		fmt.Fprintf(w, "  real, sent: %s\n  real, commandstats: %s\n", countLine(c.real.Sent), countLine(c.real.Stats))
		fmt.Fprintf(w, "  baseline, sent: %s\n  baseline, commandstats: %s\n", countLine(c.base.Sent), countLine(c.base.Stats))
	}
	if c, b := r.LifeCommandsReal, r.LifeCommandsBaseline; c != nil && b != nil {
		parked := "unknown"
		if c.PeakParked != nil {
			parked = strconv.FormatInt(*c.PeakParked, 10)
		}
		fmt.Fprintf(w, "Whole life of a task in Redis (create → complete), commands per task over %d tasks, peak parked past the share %s (sent by clients: round trips; INFO commandstats: with the scripts' own):\n", c.Tasks, parked)
		fmt.Fprintf(w, "  real, sent: %s\n  real, commandstats: %s\n", countLine(c.Sent), countLine(c.Stats))
		fmt.Fprintf(w, "  baseline, sent: %s\n  baseline, commandstats: %s\n", countLine(b.Sent), countLine(b.Stats))
	}
	if len(r.DrainCPUReal) > 0 && len(r.DrainCPUBaseline) > 0 {
		fmt.Fprintf(w, "CPU per task drained, real / baseline (medians of rounds):%s\n",
			cpuPairs(r.DrainCPUReal, r.DrainCPUBaseline, []string{"worker", "redis"}, nil))
	}
	r.Inflight.details(w)
	r.Quota.details(w)
	r.Drip.details(w)
	r.Memory.details(w)
	r.Waiters.details(w)
	r.Downloads.details(w)
	r.Scale.details(w)
}

// cpuSums is each round's CPU summed over its processes.
func cpuSums(rounds []map[string]float64) []float64 {
	out := make([]float64, 0, len(rounds))
	for _, m := range rounds {
		var t float64
		for p, v := range m {
			if !strings.Contains(p, "@") { // a cluster master's share is in "redis" already
				t += v
			}
		}
		out = append(out, t)
	}
	return out
}

// redisCPU is each round's Redis CPU (summed over the masters of a
// cluster).
func redisCPU(rounds []map[string]float64) []float64 {
	out := make([]float64, 0, len(rounds))
	for _, m := range rounds {
		out = append(out, m["redis"])
	}
	return out
}

func sum(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// cpuPairs formats the medians of per-process CPU figures, and their sums.
func cpuPairs(real, base []map[string]float64, procs []string, names map[string]string) string {
	col := func(rounds []map[string]float64, p string) float64 {
		var v []float64
		for _, m := range rounds {
			v = append(v, m[p])
		}
		return median(v)
	}
	var b strings.Builder
	var sumR, sumB float64
	for _, p := range procs {
		r, bl := col(real, p), col(base, p)
		sumR, sumB = sumR+r, sumB+bl
		name := p
		if n, ok := names[p]; ok {
			name = n
		}
		fmt.Fprintf(&b, " %s %.0f / %.0f µs;", name, r, bl)
	}
	fmt.Fprintf(&b, " all %.0f / %.0f µs", sumR, sumB)
	return b.String()
}

func pairs(a, b []float64) string {
	var s []string
	for i := range a {
		if i < len(b) {
			s = append(s, fmt.Sprintf("%.0f/%.0f", a[i], b[i]))
		}
	}
	return strings.Join(s, ", ")
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
