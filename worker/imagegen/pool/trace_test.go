package pool

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/imagegen/gemini"
)

// attr is a span's attribute's value, "" when it has none.
func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func hasEvent(s tracetest.SpanStub, name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// Within a traced run, each upstream a call tries is an "upstream.call"
// span, a child of the run's, naming the upstream and its breaker's
// verdict, with the HTTP request to it nested: a failed try is an error
// with a "failover" event (the call moves on), the next try the healthy
// upstream's. Outside a traced run, or with tracing off, the pool makes
// no span.
func TestUpstreamCallSpans(t *testing.T) {
	tests := map[string]struct {
		tracing bool // the pool traces
		run     bool // the call is within a traced run
		want    bool // spans are made
	}{
		"traced run":        {tracing: true, run: true, want: true},
		"no run span":       {tracing: true},
		"tracing off":       {run: true},
		"tracing off, none": {},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			tr := tracing.Noop()
			if tt.tracing {
				tr = tracing.FromProvider(tp)
			}
			gen := func(ctx context.Context, u upstream.Upstream) (imagegen.Generator, error) {
				return gemini.New(ctx, gemini.Config{APIKey: u.APIKey, BaseURL: u.BaseURL, Timeout: 10 * time.Second, Tracing: tr,
					Expected: map[catalog.Tier]time.Duration{catalog.Standard: time.Second}})
			}
			p := New(redistest.Start(t).Client(t), gen, nil, zap.NewNop())
			if tt.tracing {
				p.Tracer = tp.Tracer("test")
			}
			// The failing upstream is nearly always tried first; its
			// breaker never opens here.
			down, healthy := newFake(t, "down", "500"), newFake(t, "healthy", "ok")
			data := fileJSON(t, `{"failures":1000}`, down.spec("k-down", 1000), healthy.spec("k-healthy", 1))
			pl, err := upstream.Parse(data, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Load(context.Background(), pl, data); err != nil {
				t.Fatal(err)
			}

			// Calls until one tried the failing upstream first.
			var run trace.SpanContext
			for i := 0; i < 20 && down.count() == 0; i++ {
				exp.Reset()
				ctx := context.Background()
				var span trace.Span
				if tt.run {
					ctx, span = tp.Tracer("test").Start(ctx, "task.run")
					run = span.SpanContext()
				}
				if _, err := p.Generate(ctx, imagegen.Request{Model: stdModel, Prompt: "a fox", AspectRatio: "1:1"}, func(int) {}); err != nil {
					t.Fatal(err)
				}
				if span != nil {
					span.End()
				}
			}
			if down.count() == 0 {
				t.Fatal("the failing upstream was never tried")
			}
			var calls, nested []tracetest.SpanStub
			for _, s := range exp.GetSpans() {
				switch {
				case s.Name == SpanCall:
					calls = append(calls, s)
				case s.SpanKind == trace.SpanKindClient:
					nested = append(nested, s)
				}
			}
			if !tt.want {
				if len(calls)+len(nested) != 0 {
					t.Fatalf("%d upstream spans and %d HTTP spans; want none", len(calls), len(nested))
				}
				return
			}
			if len(calls) != 2 || len(nested) != 2 {
				t.Fatalf("%d upstream spans and %d HTTP spans; want 2 and 2", len(calls), len(nested))
			}
			for i, want := range []struct {
				upstream string
				failed   bool
			}{{"down", true}, {"healthy", false}} {
				s := calls[i]
				if got := attr(s, "easel.upstream"); got != want.upstream {
					t.Errorf("try %d: upstream %q; want %q", i+1, got, want.upstream)
				}
				if got := attr(s, "easel.breaker"); got != "closed" {
					t.Errorf("try %d: breaker %q; want closed", i+1, got)
				}
				if s.Parent.SpanID() != run.SpanID() || s.SpanContext.TraceID() != run.TraceID() {
					t.Errorf("try %d: not a child of the run", i+1)
				}
				if failed := s.Status.Code == codes.Error; failed != want.failed || hasEvent(s, "failover") != want.failed {
					t.Errorf("try %d: status %v, failover event %v; want an error with the event: %v", i+1, s.Status, hasEvent(s, "failover"), want.failed)
				}
				if h := nested[i]; h.Parent.SpanID() != s.SpanContext.SpanID() {
					t.Errorf("try %d: its HTTP request is not nested under it", i+1)
				}
			}
		})
	}
}
