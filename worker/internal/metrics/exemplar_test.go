package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A task's stage and queue wait observed within its sampled run name the
// run's trace in an exemplar; outside one (an untraced task, tracing off,
// a run not sampled) they name none.
func TestExemplars(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	sampled, span := tp.Tracer("test").Start(context.Background(), "task.run")
	defer span.End()
	unsampledTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = unsampledTP.Shutdown(context.Background()) })
	unsampled, uspan := unsampledTP.Tracer("test").Start(context.Background(), "task.run")
	defer uspan.End()
	tests := map[string]struct {
		ctx  context.Context
		want string
	}{
		"sampled run":     {ctx: sampled, want: span.SpanContext().TraceID().String()},
		"no span":         {ctx: context.Background()},
		"not sampled run": {ctx: unsampled},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := New(reg)
			m.Stage(tt.ctx, std, "generate", time.Second)
			m.QueueWait(tt.ctx, std, time.Second)
			fams, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, f := range fams {
				if f.GetName() != "easel_task_stage_duration_seconds" && f.GetName() != "easel_task_queue_wait_seconds" {
					continue
				}
				for _, mt := range f.GetMetric() {
					got := ""
					for _, b := range mt.GetHistogram().GetBucket() {
						if e := b.GetExemplar(); e != nil {
							for _, l := range e.GetLabel() {
								if l.GetName() == "trace_id" {
									got = l.GetValue()
								}
							}
						}
					}
					seen++
					if got != tt.want {
						t.Errorf("%s: exemplar trace %q; want %q", f.GetName(), got, tt.want)
					}
				}
			}
			if seen != 2 {
				t.Fatalf("%d histograms observed; want 2", seen)
			}
		})
	}
}
