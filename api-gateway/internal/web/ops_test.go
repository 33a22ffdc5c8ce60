package web_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

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

// A readiness probe answered "still starting" is expected: its access
// line is at debug level, so a start-up polled for readiness prints no
// warning; any other "not ready" warns.
func TestReadyzStartingIsQuiet(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	s := web.New(web.Config{Log: zap.New(core)})
	var notReady error
	web.Get(s.Echo, "/readyz", web.Readyz(func(context.Context) error { return notReady }))
	h := s.Handler()
	for _, c := range []struct {
		err   error
		level zapcore.Level
	}{
		{fmt.Errorf("gateway: %w", web.ErrStarting), zapcore.DebugLevel},
		{errors.New("Redis is down"), zapcore.WarnLevel},
		{nil, zapcore.InfoLevel},
	} {
		notReady = c.err
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		lines := logs.FilterMessage("request").TakeAll()
		if len(lines) != 1 || lines[0].Level != c.level {
			t.Errorf("/readyz answering %d for %v: access lines %v; want one at %s", rec.Code, c.err, lines, c.level)
		}
		if c.err != nil && rec.Code != 503 {
			t.Errorf("/readyz for %v: %d; want 503", c.err, rec.Code)
		}
		for _, l := range logs.TakeAll() {
			if l.Level >= zapcore.WarnLevel && errors.Is(c.err, web.ErrStarting) {
				t.Errorf("a start-up's readiness probe logged %s %q", l.Level, l.Message)
			}
		}
	}
}
