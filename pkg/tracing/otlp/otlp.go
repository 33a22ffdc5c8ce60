// Package otlp turns a service's tracing on from the standard OTEL_*
// environment variables, exporting spans over OTLP/HTTP. Only the programs
// import it: the exporter and its protocol buffers stay out of the packages
// that merely make spans (they take a *tracing.Tracing).
//
// Tracing is off unless an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// OTEL_SDK_DISABLED is not "true", and OTEL_TRACES_EXPORTER is not "none".
// Off, the Tracing is the no-op one: nothing is recorded or exported. On,
// spans are batched to the endpoint over OTLP/HTTP (the exporter reads the
// other OTEL_EXPORTER_OTLP_* variables itself), sampled by the SDK's sampler
// (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG; parentbased_always_on by
// default).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/tracing"
)

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
func Setup(ctx context.Context, serviceName string, log *zap.Logger) (*tracing.Tracing, error) {
	if !on(os.Getenv) {
		return tracing.Noop(), nil
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
	return tracing.FromProvider(tp), nil
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
