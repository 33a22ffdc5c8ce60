package worker

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/prom"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/internal/metrics"
)

// scrape reads a /metrics endpoint into series (metrics.Series).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	series, err := prom.Series(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return slices.Collect(maps.Values(fams)), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return series
}

// A running worker serves its metrics, the queues' among them, on its
// health listener.
func TestMetricsEndpoint(t *testing.T) {
	srv := redistest.Start(t)
	// It serves pro only: standard jobs wait.
	addr := runWorker(t, srv.URL, map[string]string{"EASEL_QUEUES": "pro"})
	localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 10*time.Second)
	q := jobs.NewEnqueuer(srv.Client(t))
	for _, id := range []string{"task_lumen_1", "task_lumen_2"} {
		j := jobs.GenerateImage{TaskID: id, AccountID: "a", CreateTime: time.Now(), Deadline: time.Now().Add(time.Hour),
			Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
		if err := q.EnqueueGenerateImage(context.Background(), jobs.RefOf(j), id); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // so the oldest has waited

	got := scrape(t, "http://"+addr+"/metrics")
	for k, want := range map[string]float64{
		`asynq_queue_size{queue="standard"}`:                                                        2,
		`asynq_tasks_enqueued_total{queue="standard",state="pending"}`:                              2,
		`asynq_tasks_enqueued_total{queue="standard",state="active"}`:                               0,
		`easel_tasks_finished_total{code="",model="lumen-2.5-flash-image",outcome="completed"}`:     0,
		`easel_tasks_finished_total{code="",model="lumen-3-pro-image-preview",outcome="completed"}`: 0,
		`easel_generations_in_flight{model="lumen-3-pro-image-preview"}`:                            0,
		`easel_upstream_requests_total{outcome="ok",provider="procedural"}`:                         0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present: %v); want %v", k, v, ok, want)
		}
	}
	if l := got[`asynq_queue_latency_seconds{queue="standard"}`]; l < 0.01 || l > 60 {
		t.Errorf("standard queue latency %vs; want the oldest job's wait", l)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s missing: the standard collectors are not registered", name)
		}
	}
}

// The recovery counts the tasks it fails, and their refunds: the overdue
// ones its poll fails, the poisoned ones the orphans' takeover fails.
func TestSweepMetrics(t *testing.T) {
	const (
		std      = "lumen-2.5-flash-image"
		refunded = `easel_credits_refunded_total{model="` + std + `"}`
	)
	failed := func(code string) string {
		return `easel_tasks_finished_total{code="` + code + `",model="` + std + `",outcome="failed"}`
	}
	tests := []struct {
		name  string
		round func(t *testing.T, e *sweepEnv, s *sweeper, r *recovery)
		want  map[string]float64
	}{
		{"overdue", func(t *testing.T, e *sweepEnv, _ *sweeper, r *recovery) {
			e.charge(t, "task_lumen_1", time.Now().Add(-time.Second))
			e.charge(t, "task_lumen_2", time.Now().Add(time.Hour))
			r.lease(context.Background())
			// Past the task's first queue check (see TestRecoveryFailsOverdueTasks).
			r.now = func() time.Time { return time.Now().Add(store.FirstQueueCheck + time.Second) }
			if rep := r.poll(context.Background()); rep.expired != 1 {
				t.Fatalf("poll %+v", rep)
			}
		}, map[string]float64{failed("timeout"): 1, refunded: 10}},
		{"crashed twice", func(t *testing.T, e *sweepEnv, s *sweeper, _ *recovery) {
			ctx := context.Background()
			j := e.charge(t, "task_lumen_1", time.Now().Add(time.Hour))
			for _, run := range []string{j.TaskID, j.TaskID + ".r1"} {
				if c, err := e.tasks.Start(ctx, e.acct, j.TaskID, run); err != nil || c.Outcome != task.Applied {
					t.Fatal(c, err)
				}
				s.q = &orphanQueue{orphans: []jobs.Orphan{{Run: run, Ref: jobs.RefOf(j)}}}
				s.takeOverOrphans(ctx)
			}
		}, map[string]float64{failed("worker_crashed"): 1, refunded: 10}},
		{"nothing to do", func(t *testing.T, e *sweepEnv, s *sweeper, r *recovery) {
			e.charge(t, "task_lumen_1", time.Now().Add(time.Hour))
			s.takeOverOrphans(context.Background())
			r.lease(context.Background())
			r.poll(context.Background())
		}, map[string]float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newSweepEnv(t)
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			s := newSweeper(e.tasks, e.q, e.notes, m, zap.NewNop())
			r := newRecovery(e.tasks, e.leases, e.q, e.notes, m, "w1", zap.NewNop())
			tt.round(t, e, s, r)
			got, err := prom.Series(reg)
			if err != nil {
				t.Fatal(err)
			}
			maps.DeleteFunc(got, func(k string, v float64) bool { return v == 0 || !strings.HasPrefix(k, "easel_") })
			if !maps.Equal(got, tt.want) {
				t.Errorf("series %v; want %v", got, tt.want)
			}
		})
	}
}
