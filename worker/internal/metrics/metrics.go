// Package metrics is the worker's Prometheus instrumentation: the metrics
// it exports (docs/metrics.md lists them), registered on a registry the
// worker's Run makes, and the handler that serves them on the health
// listener. Nothing here is global: each worker, and each test, has a
// registry of its own.
//
// The processor and the sweeper record through small interfaces of their
// own, which *Metrics satisfies; Generator wraps an image generator to
// count and time its calls.
package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/prom"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/worker/imagegen"
)

// Outcomes of a finished task (easel_tasks_finished_total's outcome).
const (
	Completed = "completed"
	Failed    = "failed"
)

// Outcomes of a call to the generator (easel_upstream_requests_total's
// outcome): OK, Timeout (the task's deadline passed during the call),
// Canceled (the worker is shutting down), or the failure code of the error
// (upstream_unavailable, content_blocked, generation_failed, ...).
const (
	OK       = "ok"
	Timeout  = "timeout"
	Canceled = "canceled"
)

// durationBuckets span a fast generation to a slow one's retries.
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}

// Metrics are the worker's metrics.
type Metrics struct {
	finished, retries, upstream, refunded *prometheus.CounterVec
	queueWait, stage, upstreamDuration    *prometheus.HistogramVec
	inFlight                              *prometheus.GaugeVec
	// The pool's upstreams (EASEL_UPSTREAMS_FILE).
	poolCalls    *prometheus.CounterVec
	poolDuration *prometheus.HistogramVec
	poolBreaker  *prometheus.GaugeVec
}

// New makes the worker's metrics and registers them on reg (nil: on no
// registry).
func New(reg prometheus.Registerer) *Metrics {
	v := prom.Vecs{Reg: reg}
	return &Metrics{
		poolCalls: v.Counter("upstream_pool_calls_total", "Calls to each upstream of the pool (EASEL_UPSTREAMS_FILE), by upstream and outcome: success, failure (5xx, timeout, connection), throttled (429), refused (the credential), final (the caller's input refused).",
			"upstream", "outcome"),
		poolDuration: v.Histogram("upstream_pool_call_duration_seconds", "Time of each call to an upstream of the pool, by upstream.", durationBuckets, "upstream"),
		poolBreaker:  v.Gauge("upstream_pool_breaker_state", "Each upstream's circuit breaker as this worker last saw it: 0 closed, 1 half-open, 2 open.", "upstream"),
		queueWait: v.Histogram("task_queue_wait_seconds", "Time from a task's creation to the start of its first run, by model.",
			[]float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}, "model"),
		stage: v.Histogram("task_stage_duration_seconds", "Time a stage of a task took when it succeeded, by model and stage: fetch (source images), generate (with its retries), store (results).",
			durationBuckets, "model", "stage"),
		finished: v.Counter("tasks_finished_total", "Tasks that reached their end, by model, outcome (completed, failed) and failure code (empty when completed).",
			"model", "outcome", "code"),
		retries: v.Counter("task_retries_total", "Retries, by model: a generation tried again after a retryable error, or a job handed back to its queue to run again.",
			"model"),
		upstream: v.Counter("upstream_requests_total", "Calls to the image generator, by provider and outcome (ok, canceled, or the failure code).",
			"provider", "outcome"),
		upstreamDuration: v.Histogram("upstream_request_duration_seconds", "Time a call to the image generator took, whatever its outcome, by provider.",
			durationBuckets, "provider"),
		inFlight: v.Gauge("generations_in_flight", "Tasks this worker is running now, by model.", "model"),
		refunded: v.Counter("credits_refunded_total", "Credits returned for failed tasks, by model.", "model"),
	}
}

// InitModels makes the per-model counters and gauges exist at 0 from the
// start, so that rates over them are defined before the first task.
func (m *Metrics) InitModels(models []string) {
	for _, model := range models {
		m.finished.WithLabelValues(model, Completed, "")
		m.retries.WithLabelValues(model)
		m.inFlight.WithLabelValues(model)
		m.refunded.WithLabelValues(model)
	}
}

// QueueWait records how long a task waited for its first run; its run's
// trace (ctx), when sampled, is the observation's exemplar.
func (m *Metrics) QueueWait(ctx context.Context, model string, d time.Duration) {
	observe(ctx, m.queueWait.WithLabelValues(model), max(d, 0).Seconds())
}

// Stage records how long a stage of a task took; its run's trace (ctx),
// when sampled, is the observation's exemplar.
func (m *Metrics) Stage(ctx context.Context, model, stage string, d time.Duration) {
	observe(ctx, m.stage.WithLabelValues(model, stage), d.Seconds())
}

// observe records v in o, with an exemplar naming the trace of ctx when it
// is sampled (the OpenMetrics exposition shows it).
func observe(ctx context.Context, o prometheus.Observer, v float64) {
	if tracing.Sampled(ctx) {
		if e, ok := o.(prometheus.ExemplarObserver); ok {
			e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": tracing.TraceID(ctx)})
			return
		}
	}
	o.Observe(v)
}

// Finished records a task's end: code is "" for a completed task.
func (m *Metrics) Finished(model, outcome, code string) {
	m.finished.WithLabelValues(model, outcome, code).Inc()
}

// Retried records a retry.
func (m *Metrics) Retried(model string) {
	m.retries.WithLabelValues(model).Inc()
}

// Running counts a task as running until the returned func is called.
func (m *Metrics) Running(model string) (done func()) {
	g := m.inFlight.WithLabelValues(model)
	g.Inc()
	return g.Dec
}

// Refunded records the credits a failed task's account got back.
func (m *Metrics) Refunded(model string, credits int64) {
	m.refunded.WithLabelValues(model).Add(float64(credits))
}

// Upstream records a call to the generator.
func (m *Metrics) Upstream(provider, outcome string, d time.Duration) {
	m.upstream.WithLabelValues(provider, outcome).Inc()
	m.upstreamDuration.WithLabelValues(provider).Observe(d.Seconds())
}

// UpstreamCall records a call to an upstream of the pool.
func (m *Metrics) UpstreamCall(name string, o upstream.Outcome, d time.Duration) {
	m.poolCalls.WithLabelValues(name, string(o)).Inc()
	m.poolDuration.WithLabelValues(name).Observe(d.Seconds())
}

// UpstreamBreaker records the state of an upstream's breaker.
func (m *Metrics) UpstreamBreaker(name string, s upstream.State) {
	v := 0.0
	switch s {
	case upstream.HalfOpen:
		v = 1
	case upstream.Open:
		v = 2
	}
	m.poolBreaker.WithLabelValues(name).Set(v)
}

// UpstreamRemoved drops the figures of an upstream the pool's file no
// longer has: a series per upstream ever loaded would stay until restart.
func (m *Metrics) UpstreamRemoved(name string) {
	m.poolCalls.DeletePartialMatch(prometheus.Labels{"upstream": name})
	m.poolDuration.DeleteLabelValues(name)
	m.poolBreaker.DeleteLabelValues(name)
}

// Generator wraps gen so that each of its calls is counted and timed under
// provider (EASEL_GENERATOR's value).
func Generator(gen imagegen.Generator, provider string, m *Metrics) imagegen.Generator {
	m.upstream.WithLabelValues(provider, OK)
	return &generator{gen: gen, provider: provider, m: m}
}

type generator struct {
	gen      imagegen.Generator
	provider string
	m        *Metrics
}

func (g *generator) Generate(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error) {
	start := time.Now()
	imgs, err := g.gen.Generate(ctx, req, progress)
	g.m.Upstream(g.provider, upstreamOutcome(ctx, err), time.Since(start))
	return imgs, err
}

// upstreamOutcome names a call's outcome: its failure code, a bounded set
// (package task's codes and apperr's).
func upstreamOutcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return OK
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Timeout
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return Canceled
	}
	return string(apperr.CodeOf(err))
}
