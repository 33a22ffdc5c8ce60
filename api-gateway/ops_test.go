package gateway

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The operations listener serves probes and metrics apart from the API,
// which keeps /metrics to itself unless told.
func TestOperationsListener(t *testing.T) {
	srv := redistest.Start(t)
	for _, onAPI := range []bool{false, true} {
		ops := "http://" + localnet.FreeAddr(t)
		env := map[string]string{"EASEL_METRICS_ADDR": strings.TrimPrefix(ops, "http://")}
		if onAPI {
			env["EASEL_METRICS_ON_API"] = "true"
		}
		base := startGateway(t, srv.URL, env)
		localnet.WaitStatus(t, ops+"/readyz", 200, 15*time.Second)
		if code, _, _ := status(t, "POST", base+"/v1/task/create", `{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`); code != 200 {
			t.Fatalf("create: %d", code)
		}
		if code, body := get(t, ops+"/healthz"); code != 200 || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("operations /healthz: %d %s", code, body)
		}
		code, body := get(t, ops+"/metrics")
		for _, part := range []string{
			`easel_tasks_created_total{model="lumen-2.5-flash-image",outcome="created"} 1`,
			`easel_credits_debited_total{model="lumen-2.5-flash-image"} 4`,
			`easel_http_requests_total{code="200",method="POST",route="/v1/task/create"} 1`,
			"go_goroutines", "process_resident_memory_bytes",
		} {
			if code != 200 || !strings.Contains(body, part) {
				t.Errorf("operations /metrics: %d, no %s in\n%s", code, part, body)
			}
		}
		want := 404
		if onAPI {
			want = 200
		}
		if code, body := get(t, base+"/metrics"); code != want {
			t.Errorf("EASEL_METRICS_ON_API=%v: API /metrics %d %s; want %d", onAPI, code, body, want)
		}
	}
}

// A port that cannot be had stops the gateway at start, saying which.
func TestOperationsListenerTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, err := LoadConfig(map[string]string{
		"EASEL_REDIS_URL":      redistest.Start(t).URL,
		"EASEL_BLOB_URL":       "file://" + t.TempDir(),
		"EASEL_HTTP_ADDR":      "127.0.0.1:0",
		"EASEL_METRICS_ADDR":   taken.Addr().String(),
		"EASEL_SIGNING_SECRET": strings.Repeat("s", 32),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Run(ctx, cfg, zap.NewNop(), nil); err == nil || !strings.Contains(err.Error(), "EASEL_METRICS_ADDR") {
		t.Errorf("Run: %v; want the operations listener's error", err)
	}
}
