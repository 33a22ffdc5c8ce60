package processor

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/prom/promtest"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/internal/metrics"
)

// metered gives f's processor metrics on a registry of its own, the
// generator counted as provider "test", as the worker's Run wires them.
func (f *fixture) metered() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	f.proc.gen = metrics.Generator(f.proc.gen, "test", m)
	f.proc.Metrics = m
	return reg
}

func TestMetrics(t *testing.T) {
	ok := func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}
	busyTwice := func() genFunc {
		calls := 0
		return func(ctx context.Context, req imagegen.Request, p func(int)) ([]imagegen.Image, error) {
			if calls++; calls <= 2 {
				return nil, apperr.Transient(errors.New("429"), task.UpstreamUnavailable, "busy")
			}
			return ok(ctx, req, p)
		}
	}
	const (
		wait      = `easel_task_queue_wait_seconds_count{model="` + std + `"}`
		fetched   = `easel_task_stage_duration_seconds_count{model="` + std + `",stage="fetch"}`
		generated = `easel_task_stage_duration_seconds_count{model="` + std + `",stage="generate"}`
		stored    = `easel_task_stage_duration_seconds_count{model="` + std + `",stage="store"}`
		completed = `easel_tasks_finished_total{code="",model="` + std + `",outcome="completed"}`
		retries   = `easel_task_retries_total{model="` + std + `"}`
		refunded  = `easel_credits_refunded_total{model="` + std + `"}`
		calls     = `easel_upstream_request_duration_seconds_count{provider="test"}`
	)
	failed := func(code string) string {
		return `easel_tasks_finished_total{code="` + code + `",model="` + std + `",outcome="failed"}`
	}
	upstream := func(outcome string) string {
		return `easel_upstream_requests_total{outcome="` + outcome + `",provider="test"}`
	}
	first := Attempt{Retry: 0, MaxRetry: 3}
	tests := []struct {
		name    string
		gen     genFunc
		edit    bool // from a source image
		missing bool // ... that is not there
		attempt Attempt
		// before runs before the metrics are read the first time.
		before  func(t *testing.T, f *fixture, j jobs.GenerateImage)
		wantErr bool
		want    map[string]float64
	}{
		{name: "text-to-image", gen: ok, attempt: first,
			want: map[string]float64{wait: 1, generated: 1, stored: 1, completed: 1, upstream("ok"): 1, calls: 1}},
		{name: "edit", gen: ok, edit: true, attempt: first,
			want: map[string]float64{wait: 1, fetched: 1, generated: 1, stored: 1, completed: 1, upstream("ok"): 1, calls: 1}},
		{name: "source missing: failed and refunded", gen: ok, edit: true, missing: true, attempt: first,
			want: map[string]float64{wait: 1, failed("source_fetch_failed"): 1, refunded: price}},
		{name: "generation retried twice, then completed", gen: busyTwice(), attempt: first,
			want: map[string]float64{wait: 1, retries: 2, upstream("upstream_unavailable"): 2, upstream("ok"): 1, calls: 3, generated: 1, stored: 1, completed: 1}},
		{name: "final failure: failed and refunded", attempt: first,
			gen: func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				return nil, apperr.New(task.ContentBlocked, "blocked")
			},
			want: map[string]float64{wait: 1, upstream("content_blocked"): 1, calls: 1, failed("content_blocked"): 1, refunded: price}},
		{name: "internal error with retries left: handed back", attempt: first, wantErr: true,
			gen: func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				return nil, errors.New("boom")
			},
			want: map[string]float64{wait: 1, upstream("internal"): 1, calls: 1, retries: 1}},
		{name: "internal error on the last attempt: failed and refunded", attempt: Attempt{Retry: 3, MaxRetry: 3},
			gen: func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				return nil, errors.New("boom")
			},
			want: map[string]float64{upstream("internal"): 1, calls: 1, failed("internal"): 1, refunded: price}},
		{name: "a retry's start is no queue wait", gen: ok, attempt: Attempt{Retry: 1, MaxRetry: 3},
			want: map[string]float64{generated: 1, stored: 1, completed: 1, upstream("ok"): 1, calls: 1}},
		{name: "crashed its workers twice: failed and refunded", gen: ok, attempt: Attempt{Retry: 2, MaxRetry: 3},
			before: func(t *testing.T, f *fixture, j jobs.GenerateImage) {
				for range 2 { // two runs that die after starting
					if c, err := f.store.Start(context.Background(), f.acct, j.TaskID, j.TaskID); err != nil || c.Outcome != task.Applied {
						t.Fatal(c, err)
					}
				}
			},
			want: map[string]float64{failed("worker_crashed"): 1, refunded: price}},
		{name: "duplicate of a finished task: nothing", gen: ok, attempt: first,
			before: func(t *testing.T, f *fixture, j jobs.GenerateImage) {
				if err := f.proc.Process(context.Background(), jobs.RefOf(j), first); err != nil {
					t.Fatal(err)
				}
			},
			want: map[string]float64{}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.gen)
			reg := f.metered()
			var mod func(*task.Input)
			if tt.edit {
				path := "/ok.jpg"
				if tt.missing {
					path = "/missing.jpg"
				}
				urls := []string{jpegServer(t, 64, 64).URL + path}
				mod = func(in *task.Input) { in.ImageURLs = urls }
			}
			j := f.job(t, "task_lumen_7"+string(rune('0'+i)), std, mod)
			if tt.before != nil {
				tt.before(t, f, j)
			}
			before := promtest.Counts(t, reg)
			if err := f.proc.Process(context.Background(), jobs.RefOf(j), tt.attempt); (err != nil) != tt.wantErr {
				t.Fatalf("Process: %v; want an error: %v", err, tt.wantErr)
			}
			if got := promtest.Moved(before, promtest.Counts(t, reg)); !maps.Equal(got, tt.want) {
				t.Errorf("moved %v\nwant  %v", got, tt.want)
			}
			if bal, _ := f.credits(t); tt.want[refunded] == price && bal != startCredits {
				t.Errorf("balance %d after a refund; want %d: the metric and the ledger disagree", bal, startCredits)
			}
		})
	}
}

// A task counts as in flight while it runs, and no longer once done.
func TestInFlight(t *testing.T) {
	var reg *prometheus.Registry
	const key = `easel_generations_in_flight{model="` + std + `"}`
	during := -1.0
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		during = promtest.Counts(t, reg)[key]
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	reg = f.metered()
	j := f.job(t, "task_lumen_90", std, nil)
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if after := promtest.Counts(t, reg)[key]; during != 1 || after != 0 {
		t.Errorf("in flight %v while generating, %v after; want 1, then 0", during, after)
	}
}
