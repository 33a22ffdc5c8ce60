package tracing

import (
	"context"
	"regexp"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

var (
	traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)
	hex32         = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

func TestInjectExtract(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		want    bool // a traceparent comes out
	}{
		{"sampled", sdktrace.AlwaysSample(), true},
		{"not sampled", sdktrace.NeverSample(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithSpanProcessor(rec))
			tr := FromProvider(tp)
			t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
			if !tr.Enabled() {
				t.Fatal("FromProvider: not enabled")
			}
			ctx, span := tp.Tracer("test").Start(context.Background(), "create")
			span.End()

			tparent := Inject(ctx, tr.Propagator())
			if !tc.want {
				if tparent != "" {
					t.Fatalf("Inject = %q, want none for an unsampled span", tparent)
				}
				return
			}
			if !traceparentRE.MatchString(tparent) {
				t.Fatalf("Inject = %q, want a sampled W3C traceparent", tparent)
			}
			back := Extract(context.Background(), tparent, TraceState(ctx))
			sc := trace.SpanContextFromContext(back)
			if !sc.IsRemote() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() || !sc.IsSampled() {
				t.Fatalf("Extract = %+v, want the span %+v (remote)", sc, span.SpanContext())
			}
			// A span started from the extracted context joins the trace.
			cctx, child := tp.Tracer("test").Start(back, "run")
			child.End()
			if TraceID(cctx) != span.SpanContext().TraceID().String() || !hex32.MatchString(TraceID(cctx)) {
				t.Fatalf("child trace %q, want %s", TraceID(cctx), span.SpanContext().TraceID())
			}
			ended := rec.Ended()
			if len(ended) != 2 || ended[1].Parent().SpanID() != span.SpanContext().SpanID() {
				t.Fatalf("recorded %d spans; the run's parent should be the create", len(ended))
			}
		})
	}
}

func TestExtractLeavesContext(t *testing.T) {
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-0000000000000000-01"} {
		ctx := Extract(context.Background(), tp, "")
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("Extract(%q): a valid span context", tp)
		}
	}
}

func TestFieldsWithoutSpan(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"background", context.Background()},
		{"noop span", func() context.Context {
			ctx, _ := Noop().Provider().Tracer("t").Start(context.Background(), "x")
			return ctx
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f := Fields(tc.ctx); len(f) != 0 {
				t.Errorf("Fields = %v, want none", f)
			}
			if id := TraceID(tc.ctx); id != "" {
				t.Errorf("TraceID = %q, want none", id)
			}
			if tp := Inject(tc.ctx, Noop().Propagator()); tp != "" {
				t.Errorf("Inject = %q, want none", tp)
			}
		})
	}
}

func TestFieldsLogged(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "x")
	defer span.End()
	core, logs := observer.New(zap.InfoLevel)
	zap.New(core).Info("hello", Fields(ctx)...)
	m := logs.All()[0].ContextMap()
	if m["trace_id"] != span.SpanContext().TraceID().String() || m["span_id"] != span.SpanContext().SpanID().String() {
		t.Fatalf("logged %v, want the span's trace_id and span_id", m)
	}
}

func TestTraceIDOf(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"00x4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
	} {
		if got := TraceIDOf(tc.in); got != tc.want {
			t.Errorf("TraceIDOf(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestChildTracer(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	sampled, parent := tp.Tracer("t").Start(context.Background(), "req")
	unsampled, _ := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("t").Start(context.Background(), "req")
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		child bool
	}{
		{"no span", context.Background(), false},
		{"unsampled", unsampled, false},
		{"sampled", sampled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.Ended())
			ctx, span := FromProvider(tp).ChildTracer("t").Start(tc.ctx, "child")
			span.End()
			if got := len(rec.Ended()) - before; got != map[bool]int{false: 0, true: 1}[tc.child] {
				t.Fatalf("%d spans ended, want a child: %v", got, tc.child)
			}
			if !tc.child && ctx != tc.ctx {
				t.Error("the context changed though no span started")
			}
		})
	}
	parent.End()
}
