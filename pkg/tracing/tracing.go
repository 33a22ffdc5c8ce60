// Package tracing sets up OpenTelemetry tracing for an Easel service from the
// standard OTEL_* environment variables, and carries trace context into logs
// and task records.
//
// Tracing is off unless an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// OTEL_SDK_DISABLED is not "true", and OTEL_TRACES_EXPORTER is not "none".
// Off, the provider is the no-op one: nothing is recorded or exported. On,
// spans are batched to the endpoint over OTLP/HTTP (the exporter reads the
// other OTEL_EXPORTER_OTLP_* variables itself), sampled by the SDK's sampler
// (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG; parentbased_always_on by
// default).
//
// Nothing here sets OpenTelemetry's global provider or propagator: a service
// passes its Tracing (or its Provider and Propagator) to what needs them.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
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

// Env vars that turn tracing on or off (the OpenTelemetry specification's).
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// on reports whether the environment (getenv) asks for tracing.
func on(getenv func(string) string) bool {
	if strings.TrimSpace(getenv(envEndpoint)) == "" && strings.TrimSpace(getenv(envTracesEndpoint)) == "" {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return false
	}
	return !strings.EqualFold(strings.TrimSpace(getenv(envTracesExporter)), "none")
}

// Setup builds the Tracing of the service named serviceName (the default
// service.name; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it)
// from the environment. Off, it returns a no-op Tracing and no error.
func Setup(ctx context.Context, serviceName string, log *zap.Logger) (*Tracing, error) {
	if !on(os.Getenv) {
		return Noop(), nil
	}
	for _, k := range []string{envTracesProtocol, envProtocol} {
		if p := strings.TrimSpace(os.Getenv(k)); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%q: only http/protobuf is supported", k, p)
			}
			break
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithFromEnv(), // after the default: the environment's service.name wins
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(loggingExporter{exp, log}),
		sdktrace.WithResource(res),
	)
	log.Info("tracing on", zap.String("service_name", serviceName))
	return &Tracing{provider: tp, propagator: newPropagator(), enabled: true, shutdown: tp.Shutdown}, nil
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

// loggingExporter logs an export's failure to the service's log rather than
// OpenTelemetry's global error handler, and reports none to the batch
// processor (which would only hand it to that handler).
type loggingExporter struct {
	sdktrace.SpanExporter
	log *zap.Logger
}

func (e loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil && !errors.Is(err, context.Canceled) {
		e.log.Warn("tracing: spans not exported", zap.Int("spans", len(spans)), zap.Error(err))
	}
	return nil
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
