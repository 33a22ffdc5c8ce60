package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/prom"
)

// The operations listener answers /healthz, /readyz and /metrics, counting
// none of it.
func TestOps(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	var notReady error
	srv := httptest.NewServer(web.NewOps(web.OpsDeps{
		Ready:   func(context.Context) error { return notReady },
		Metrics: prom.Handler(reg),
	}))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	m.Debited("lumen-2.5-flash-image", 4)
	for _, c := range []struct {
		path   string
		status int
		part   string
	}{
		{"/healthz", 200, `"status":"ok"`},
		{"/readyz", 200, `"status":"ok"`},
		{"/metrics", 200, `easel_credits_debited_total{model="lumen-2.5-flash-image"} 4`},
		{"/v1/task/create", 404, `"code":404`},
	} {
		if st, body := get(c.path); st != c.status || !strings.Contains(body, c.part) {
			t.Errorf("%s: %d %s; want %d with %s", c.path, st, body, c.status, c.part)
		}
	}
	notReady = errors.New("Redis is down")
	if st, body := get("/readyz"); st != 503 || !strings.Contains(body, `"code":503`) {
		t.Errorf("/readyz not ready: %d %s", st, body)
	}
	if _, body := get("/metrics"); strings.Contains(body, "easel_http_requests_total{") {
		t.Errorf("operations requests were counted: %s", body)
	}
}
