package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/easelhq/easel/tools/testkit/redistest"
)

func TestInstrumentRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name      string
		on        bool
		inSpan    bool
		wantRedis bool // a span for the SET
	}{
		{"off", false, true, false},
		{"on, outside a span", true, false, false},
		{"on, within a span", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			tr := Noop()
			if tc.on {
				tr = FromProvider(tp)
			}
			rdb := srv.Client(t)
			if err := InstrumentRedis(rdb, tr); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var span trace.Span
			if tc.inSpan {
				ctx, span = tp.Tracer("t").Start(ctx, "req")
			}
			if err := rdb.Set(ctx, "k", "secret-value", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if span != nil {
				span.End()
			}
			set := false
			for _, s := range rec.Ended() {
				if s.Name() == "req" {
					continue
				}
				set = set || s.Name() == "set"
				for _, a := range s.Attributes() {
					if a.Key == "db.statement" {
						t.Errorf("span %q has db.statement %q", s.Name(), a.Value.Emit())
					}
				}
				if !s.Parent().IsValid() {
					t.Errorf("span %q is a root", s.Name())
				}
			}
			if set != tc.wantRedis {
				t.Fatalf("a span for the SET: %v, want %v (%d spans)", set, tc.wantRedis, len(rec.Ended()))
			}
		})
	}
}

func TestTransport(t *testing.T) {
	for _, tc := range []struct {
		name   string
		on     bool
		header bool // the request carries a traceparent
	}{
		{"off", false, false},
		{"on", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get(HeaderTraceParent)
			}))
			defer srv.Close()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			tr := Noop()
			if tc.on {
				tr = FromProvider(tp)
			}
			ctx, span := tp.Tracer("t").Start(context.Background(), "deliver")
			defer span.End()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := (&http.Client{Transport: Transport(nil, tr)}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := <-got
			if (h != "") != tc.header {
				t.Fatalf("traceparent %q, want one: %v", h, tc.header)
			}
			if tc.header && Extract(context.Background(), h, "") == context.Background() {
				t.Fatalf("traceparent %q does not parse", h)
			}
		})
	}
}

// A pipeline gets no span, traced or not: only its commands' own hooks run.
func TestInstrumentRedisSkipsPipelines(t *testing.T) {
	srv := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rdb := srv.Client(t)
	if err := InstrumentRedis(rdb, FromProvider(tp)); err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("t").Start(context.Background(), "req")
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "a", "1", 0)
		p.Set(ctx, "b", "2", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	span.End()
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.Name(), "redis.pipeline") {
			t.Errorf("a span %q for a pipeline", s.Name())
		}
	}
}
