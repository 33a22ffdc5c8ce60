// Package tracing is a service's OpenTelemetry tracer provider and
// propagator (on, off, or a test's), and carries trace context into logs,
// task records and outbound calls. The programs turn it on from the
// environment with package otlp; nothing here sets OpenTelemetry's global
// provider or propagator: a service passes its Tracing (or its Provider and
// Propagator) to what needs them.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// Tracing is a service's tracer provider and propagator.
type Tracing struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
	enabled    bool
	shutdown   func(context.Context) error
}

// Noop returns a Tracing that is off: its provider records nothing.
func Noop() *Tracing {
	return &Tracing{provider: noop.NewTracerProvider(), propagator: newPropagator()}
}

// FromProvider returns a Tracing that is on, over tp (a test's provider with
// an in-memory exporter, say). Shutdown shuts tp down if it can be.
func FromProvider(tp trace.TracerProvider) *Tracing {
	t := &Tracing{provider: tp, propagator: newPropagator(), enabled: true}
	if s, ok := tp.(interface{ Shutdown(context.Context) error }); ok {
		t.shutdown = s.Shutdown
	}
	return t
}

func newPropagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Provider returns the tracer provider (the no-op one when off).
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// Propagator returns the W3C Trace Context and Baggage propagator.
func (t *Tracing) Propagator() propagation.TextMapPropagator { return t.propagator }

// Enabled reports whether tracing is on.
func (t *Tracing) Enabled() bool { return t.enabled }

// Shutdown exports the spans still buffered and stops the exporter, within
// ctx. Off, it does nothing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Fields returns the trace_id and span_id of the span in ctx, for a log line;
// none when ctx holds no valid span.
func Fields(ctx context.Context) []zap.Field {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []zap.Field{zap.String("trace_id", sc.TraceID().String()), zap.String("span_id", sc.SpanID().String())}
}

// TraceID returns the trace id of the span in ctx, 32 hex digits; "" when
// ctx holds no valid span.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Sampled reports whether the span in ctx is sampled (recorded and exported).
func Sampled(ctx context.Context) bool {
	return trace.SpanContextFromContext(ctx).IsSampled()
}

// Span attributes of Easel's own spans.
const (
	AttrTaskID    = attribute.Key("easel.task_id")
	AttrAccountID = attribute.Key("easel.account_id")
)

// W3C Trace Context header names (and a task record's fields' meaning).
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Inject returns the W3C traceparent of the span in ctx, as p writes it, to
// be stored or sent where a header cannot go; "" when the span is not
// sampled (nothing of it is exported, so nothing would join it).
func Inject(ctx context.Context, p propagation.TextMapPropagator) string {
	if !Sampled(ctx) {
		return ""
	}
	c := propagation.MapCarrier{}
	p.Inject(ctx, c)
	return c[HeaderTraceParent]
}

// TraceState returns the W3C tracestate of the span in ctx ("" when it has
// none or is not sampled), to travel with Inject's traceparent.
func TraceState(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		return ""
	}
	return sc.TraceState().String()
}

// Extract returns ctx with the remote span context that traceparent and
// tracestate (as Inject and TraceState returned them) carry, for a span
// started from it to join that trace. An empty or malformed traceparent
// leaves ctx as it is.
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	c := propagation.MapCarrier{HeaderTraceParent: traceparent}
	if tracestate != "" {
		c[HeaderTraceState] = tracestate
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

// TraceIDOf returns the trace id a W3C traceparent names, 32 hex digits; ""
// when traceparent is empty or malformed.
func TraceIDOf(traceparent string) string {
	// version "-" trace-id "-" parent-id "-" flags
	if len(traceparent) < 55 || traceparent[2] != '-' || traceparent[35] != '-' {
		return ""
	}
	id, err := trace.TraceIDFromHex(traceparent[3:35])
	if err != nil {
		return ""
	}
	return id.String()
}
