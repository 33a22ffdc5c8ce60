package tracing

import (
	"context"
	"net/http"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentRedis adds a span per Redis command of rdb, when tracing is on;
// off, it leaves rdb as it is. A command gets a span only within a sampled
// span (a request's, a run's): the background work of a service (its
// pulses, queue checks, sweeps) starts no traces. Spans carry the command's
// name, never its arguments (keys, API key hashes, prompts).
//
// Pipelines get none: the services' hot paths send their commands through
// auto-pipelines that batch many requests' commands together (no one trace's),
// and redisotel describes a pipeline's every command before it knows whether
// a span is wanted, a cost paid on each batch whether traced or not (with
// go-redis's auto-pipeline, a goroutine-id lookup per command read early: a
// quarter of the gateway's CPU in a create benchmark).
func InstrumentRedis(rdb redis.UniversalClient, t *Tracing) error {
	if !t.Enabled() {
		return nil
	}
	return redisotel.InstrumentTracing(rdb,
		redisotel.WithTracerProvider(childOnly{t.provider}),
		redisotel.WithDBStatement(false),
		redisotel.WithCallerEnabled(false),
		redisotel.WithDialFilter(true),
		redisotel.WithCommandsFilter(func([]redis.Cmder) bool { return true }),
	)
}

// Transport returns base (http.DefaultTransport when nil) with a client span
// per request and the trace context sent in its headers, when tracing is
// on; off, base as it is.
func Transport(base http.RoundTripper, t *Tracing) http.RoundTripper {
	if !t.Enabled() {
		if base == nil {
			return http.DefaultTransport
		}
		return base
	}
	return otelhttp.NewTransport(base, HTTPOptions(t)...)
}

// HTTPOptions are the otelhttp options of a service's handlers and
// transports: its provider and propagator, and no metrics (Prometheus has
// them).
func HTTPOptions(t *Tracing) []otelhttp.Option {
	return []otelhttp.Option{
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	}
}

// ChildTracer returns a tracer of the provider that starts a span only
// within a sampled span: elsewhere (tracing off, a request not sampled) its
// Start costs nothing and returns ctx unchanged and a no-op span. For the
// spans a service makes inside a request's or a run's.
func (t *Tracing) ChildTracer(name string) trace.Tracer {
	return childOnly{t.provider}.Tracer(name)
}

// childOnly is a provider whose tracers start a span only within a sampled
// one: elsewhere Start returns ctx and a no-op span.
type childOnly struct{ trace.TracerProvider }

func (p childOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childOnlyTracer{p.TracerProvider.Tracer(name, opts...)}
}

type childOnlyTracer struct{ trace.Tracer }

// noSpan is the no-op span (what a context without a span holds).
var noSpan = trace.SpanFromContext(context.Background())

func (t childOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, noSpan
	}
	return t.Tracer.Start(ctx, name, opts...)
}
