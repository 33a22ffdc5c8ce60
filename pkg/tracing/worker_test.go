package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A ChildTransport's request within a sampled span gets a client span, its
// child, and carries its trace; one outside any gets neither; off, the
// base transport is used as it is.
func TestChildTransport(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Get(HeaderTraceParent) }))
	t.Cleanup(srv.Close)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	traced, span := tp.Tracer("test").Start(context.Background(), "task.run")
	defer span.End()
	tests := map[string]struct {
		tr        *Tracing
		ctx       context.Context
		wantTrace bool
	}{
		"within a span":      {tr: FromProvider(tp), ctx: traced, wantTrace: true},
		"outside any span":   {tr: FromProvider(tp), ctx: context.Background()},
		"off, within a span": {tr: Noop(), ctx: traced},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			exp.Reset()
			got = ""
			c := &http.Client{Transport: ChildTransport(nil, tt.tr)}
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			spans := exp.GetSpans()
			if !tt.wantTrace {
				if got != "" || len(spans) != 0 {
					t.Errorf("traceparent %q, %d spans; want none", got, len(spans))
				}
				return
			}
			if len(spans) != 1 || spans[0].Parent.SpanID() != span.SpanContext().SpanID() {
				t.Fatalf("spans %v; want one client span, child of the run's", spans)
			}
			if TraceIDOf(got) != span.SpanContext().TraceID().String() {
				t.Errorf("traceparent %q; want one of trace %s", got, span.SpanContext().TraceID())
			}
		})
	}
}
