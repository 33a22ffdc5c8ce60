package otlp

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/tracing"
)

// The OTEL_* variables Setup reads to decide, all cleared by each case.
var switchVars = []string{envEndpoint, envTracesEndpoint, envSDKDisabled, envTracesExporter, envProtocol, envTracesProtocol}

func TestSetupEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		enabled bool
		err     bool
	}{
		{name: "nothing set", enabled: false},
		{name: "endpoint", env: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, enabled: true},
		{name: "traces endpoint", env: map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, enabled: true},
		{name: "blank endpoint", env: map[string]string{envEndpoint: "  "}, enabled: false},
		{name: "sdk disabled", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSDKDisabled: "true"}, enabled: false},
		{name: "sdk disabled, upper case", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSDKDisabled: "TRUE"}, enabled: false},
		{name: "sdk not disabled", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSDKDisabled: "false"}, enabled: true},
		{name: "exporter none", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesExporter: "none"}, enabled: false},
		{name: "exporter otlp", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesExporter: "otlp"}, enabled: true},
		{name: "http/protobuf", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envProtocol: "http/protobuf"}, enabled: true},
		{name: "grpc refused", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envProtocol: "grpc"}, err: true},
		{name: "traces protocol wins", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envProtocol: "grpc", envTracesProtocol: "http/protobuf"}, enabled: true},
		{name: "grpc while off", env: map[string]string{envProtocol: "grpc"}, enabled: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range switchVars {
				t.Setenv(k, tc.env[k])
			}
			tr, err := Setup(context.Background(), "easel-test", zap.NewNop())
			if tc.err {
				if err == nil {
					t.Fatal("Setup: no error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			t.Cleanup(func() {
				if err := tr.Shutdown(context.Background()); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			})
			if tr.Enabled() != tc.enabled {
				t.Fatalf("Enabled() = %v, want %v", tr.Enabled(), tc.enabled)
			}
			ctx, span := tr.Provider().Tracer("test").Start(context.Background(), "x")
			defer span.End()
			if got := span.SpanContext().IsValid(); got != tc.enabled {
				t.Errorf("span valid = %v, want %v", got, tc.enabled)
			}
			if got := len(tracing.Fields(ctx)) == 2; got != tc.enabled {
				t.Errorf("Fields(ctx) = %v, want fields: %v", tracing.Fields(ctx), tc.enabled)
			}
		})
	}
}
