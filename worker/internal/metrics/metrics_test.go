package metrics

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/prom/promtest"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/worker/imagegen"
)

const std = "lumen-2.5-flash-image"

type genFunc func(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error)

func (f genFunc) Generate(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error) {
	return f(ctx, req, progress)
}

// Each recording moves exactly its series, by exactly its amount.
func TestRecordings(t *testing.T) {
	promtest.RunCases(t, newMetrics, []promtest.Case[*Metrics]{
		{Name: "queue wait", Record: func(m *Metrics) { m.QueueWait(context.Background(), std, 1500*time.Millisecond) },
			Want: map[string]float64{`easel_task_queue_wait_seconds_count{model="` + std + `"}`: 1, `easel_task_queue_wait_seconds_sum{model="` + std + `"}`: 1.5}},
		{Name: "negative queue wait (clock skew) is 0", Record: func(m *Metrics) { m.QueueWait(context.Background(), std, -time.Second) },
			Want: map[string]float64{`easel_task_queue_wait_seconds_count{model="` + std + `"}`: 1}},
		{Name: "stage", Record: func(m *Metrics) {
			m.Stage(context.Background(), std, "generate", 2*time.Second)
			m.Stage(context.Background(), std, "generate", time.Second)
		},
			Want: map[string]float64{`easel_task_stage_duration_seconds_count{model="` + std + `",stage="generate"}`: 2, `easel_task_stage_duration_seconds_sum{model="` + std + `",stage="generate"}`: 3}},
		{Name: "completed", Record: func(m *Metrics) { m.Finished(std, Completed, "") },
			Want: map[string]float64{`easel_tasks_finished_total{code="",model="` + std + `",outcome="completed"}`: 1}},
		{Name: "failed", Record: func(m *Metrics) { m.Finished(std, Failed, "timeout"); m.Finished(std, Failed, "timeout") },
			Want: map[string]float64{`easel_tasks_finished_total{code="timeout",model="` + std + `",outcome="failed"}`: 2}},
		{Name: "retries", Record: func(m *Metrics) { m.Retried(std); m.Retried(std); m.Retried(std) },
			Want: map[string]float64{`easel_task_retries_total{model="` + std + `"}`: 3}},
		{Name: "refunded", Record: func(m *Metrics) { m.Refunded(std, 18); m.Refunded(std, 24) },
			Want: map[string]float64{`easel_credits_refunded_total{model="` + std + `"}`: 42}},
		{Name: "running, then done", Record: func(m *Metrics) { m.Running(std)() }, Want: map[string]float64{}},
		{Name: "running twice, one done", Record: func(m *Metrics) { m.Running(std); m.Running(std)() },
			Want: map[string]float64{`easel_generations_in_flight{model="` + std + `"}`: 1}},
		{Name: "upstream", Record: func(m *Metrics) { m.Upstream("gemini", "upstream_unavailable", 250*time.Millisecond) },
			Want: map[string]float64{`easel_upstream_requests_total{outcome="upstream_unavailable",provider="gemini"}`: 1,
				`easel_upstream_request_duration_seconds_count{provider="gemini"}`: 1, `easel_upstream_request_duration_seconds_sum{provider="gemini"}`: 0.25}},
		{Name: "an upstream the pool's file dropped leaves the metrics", Record: func(m *Metrics) {
			m.UpstreamCall("gone", upstream.Failure, time.Second)
			m.UpstreamCall("gone", upstream.Success, time.Second)
			m.UpstreamBreaker("gone", upstream.Open)
			m.UpstreamCall("kept", upstream.Success, 2*time.Second)
			m.UpstreamRemoved("gone")
		}, Want: map[string]float64{`easel_upstream_pool_calls_total{outcome="success",upstream="kept"}`: 1,
			`easel_upstream_pool_call_duration_seconds_count{upstream="kept"}`: 1, `easel_upstream_pool_call_duration_seconds_sum{upstream="kept"}`: 2}},
	})

}

// InitModels makes the per-model series exist, at 0, before any task.
func TestInitModels(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg).InitModels([]string{std})
	want := map[string]float64{
		`easel_tasks_finished_total{code="",model="` + std + `",outcome="completed"}`: 0,
		`easel_task_retries_total{model="` + std + `"}`:                               0,
		`easel_generations_in_flight{model="` + std + `"}`:                            0,
		`easel_credits_refunded_total{model="` + std + `"}`:                           0,
	}
	if got := promtest.Series(t, reg); !maps.Equal(got, want) {
		t.Errorf("series %v; want %v", got, want)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// The generator wrapper counts each call under its provider and outcome.
func TestGenerator(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	stopped, stop := context.WithCancel(context.Background())
	stop()
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		outcome string
	}{
		{"ok", context.Background(), nil, OK},
		{"a failure code", context.Background(), apperr.Transient(errors.New("503"), task.UpstreamUnavailable, "down"), "upstream_unavailable"},
		{"a final failure", context.Background(), apperr.New(task.ContentBlocked, "blocked"), "content_blocked"},
		{"an unclassified error", context.Background(), errors.New("boom"), "internal"},
		{"the task's deadline", expired, context.DeadlineExceeded, Timeout},
		{"a shutdown", stopped, context.Canceled, Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := New(reg)
			gen := Generator(genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				time.Sleep(10 * time.Millisecond)
				if tt.err != nil {
					return nil, tt.err
				}
				return []imagegen.Image{{}}, nil
			}), "procedural", m)
			before := promtest.Series(t, reg)
			imgs, err := gen.Generate(tt.ctx, imagegen.Request{}, func(int) {})
			if !errors.Is(err, tt.err) || (err == nil) != (len(imgs) == 1) {
				t.Fatalf("the wrapper changed the call's result: %v %v", imgs, err)
			}
			d := promtest.Moved(before, promtest.Series(t, reg))
			if d[`easel_upstream_requests_total{outcome="`+tt.outcome+`",provider="procedural"}`] != 1 ||
				d[`easel_upstream_request_duration_seconds_count{provider="procedural"}`] != 1 ||
				d[`easel_upstream_request_duration_seconds_sum{provider="procedural"}`] < 0.01 || len(d) != 3 {
				t.Errorf("moved %v; want one %s call of at least 10ms", d, tt.outcome)
			}
		})
	}
}

// newMetrics makes the metrics on reg, with the standard model's series.
func newMetrics(reg prometheus.Registerer) *Metrics {
	m := New(reg)
	m.InitModels([]string{std})
	return m
}
