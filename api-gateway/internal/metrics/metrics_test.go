package metrics

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/easelhq/easel/pkg/prom"
	"github.com/easelhq/easel/pkg/prom/promtest"
)

const std = "lumen-2.5-flash-image"

// Each recording moves exactly its series, by exactly its amount.
func TestRecordings(t *testing.T) {
	promtest.RunCases(t, newMetrics, []promtest.Case[*Metrics]{
		{Name: "request", Record: func(m *Metrics) { m.Request("/v1/task/create", "POST", 200, 30*time.Millisecond, "") },
			Want: map[string]float64{`easel_http_requests_total{code="200",method="POST",route="/v1/task/create"}`: 1,
				`easel_http_request_duration_seconds_count{method="POST",route="/v1/task/create"}`: 1,
				`easel_http_request_duration_seconds_sum{method="POST",route="/v1/task/create"}`:   0.03}},
		{Name: "request traced", Record: func(m *Metrics) {
			m.Request("/v1/task/create", "POST", 201, 20*time.Millisecond, "4bf92f3577b34da6a3ce929d0e0e4736")
		},
			Want: map[string]float64{`easel_http_requests_total{code="201",method="POST",route="/v1/task/create"}`: 1,
				`easel_http_request_duration_seconds_count{method="POST",route="/v1/task/create"}`: 1,
				`easel_http_request_duration_seconds_sum{method="POST",route="/v1/task/create"}`:   0.02}},
		{Name: "create", Record: func(m *Metrics) { m.Create(std, Created); m.Create(std, Created); m.Create(UnknownModel, Invalid) },
			Want: map[string]float64{`easel_tasks_created_total{model="` + std + `",outcome="created"}`: 2,
				`easel_tasks_created_total{model="unknown",outcome="invalid"}`: 1}},
		{Name: "auth refusal", Record: func(m *Metrics) { m.AuthRefused(AuthInvalid) },
			Want: map[string]float64{`easel_auth_refusals_total{reason="invalid"}`: 1}},
		{Name: "rate limit", Record: func(m *Metrics) { m.RateLimited(LimitQuery); m.RateLimited(LimitQuery) },
			Want: map[string]float64{`easel_rate_limit_refusals_total{limit="query"}`: 2}},
		{Name: "debited", Record: func(m *Metrics) { m.Debited(std, 4); m.Debited(std, 24) },
			Want: map[string]float64{`easel_credits_debited_total{model="` + std + `"}`: 28}},
	})

}

// The refusals' series and the models' exist at 0 from the start.
func TestInitialSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg).InitModels([]string{std})
	got := promtest.Series(t, reg)
	want := map[string]float64{`easel_credits_debited_total{model="` + std + `"}`: 0}
	for _, r := range []string{"missing", "invalid", "disabled", "limited", "key_limit"} {
		want[`easel_auth_refusals_total{reason="`+r+`"}`] = 0
	}
	for _, l := range []string{"create", "query", "inflight"} {
		want[`easel_rate_limit_refusals_total{limit="`+l+`"}`] = 0
	}
	for _, o := range Outcomes {
		want[`easel_tasks_created_total{model="`+std+`",outcome="`+o+`"}`] = 0
	}
	if !maps.Equal(got, want) {
		t.Errorf("series %v\nwant %v", got, want)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// The handler serves the registry in the text format, the standard
// collectors with it.
func TestHandler(t *testing.T) {
	reg := prom.NewRegistry()
	New(reg).Debited(std, 4)
	srv := httptest.NewServer(prom.Handler(reg))
	defer srv.Close()
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(`
# HELP easel_credits_debited_total Credits charged for tasks created, by model.
# TYPE easel_credits_debited_total counter
easel_credits_debited_total{model="`+std+`"} 4
`), "easel_credits_debited_total"); err != nil {
		t.Error(err)
	}
	all, err := prom.Series(reg)
	if _, ok := all["go_goroutines"]; err != nil || !ok {
		t.Errorf("go_goroutines missing: %v", err)
	}
	if _, ok := all["process_cpu_seconds_total"]; !ok {
		t.Error("process_cpu_seconds_total missing")
	}
}

// A traced request's duration carries its trace id as an exemplar, served
// to a scraper that asks for OpenMetrics; the text format stays the default.
func TestExemplar(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		name, accept string
		exemplar     bool
	}{
		{"openmetrics", "application/openmetrics-text; version=1.0.0", true},
		{"text", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prom.NewRegistry()
			m := New(reg)
			m.Request("/v1/task/create", "POST", 200, 30*time.Millisecond, traceID)
			m.Request("/v1/task/query", "GET", 200, 30*time.Millisecond, "")
			srv := httptest.NewServer(prom.Handler(reg))
			defer srv.Close()
			req, _ := http.NewRequest("GET", srv.URL, nil)
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			got := strings.Contains(string(body), `# {trace_id="`+traceID+`"}`)
			if got != tc.exemplar {
				t.Fatalf("exemplar served: %v, want %v (Content-Type %s)", got, tc.exemplar, resp.Header.Get("Content-Type"))
			}
			if n := strings.Count(string(body), "trace_id="); tc.exemplar && n != 1 {
				t.Errorf("%d exemplars, want 1 (the untraced request has none)", n)
			}
		})
	}
}

// newMetrics makes the metrics on reg, with the standard model's series.
func newMetrics(reg prometheus.Registerer) *Metrics {
	m := New(reg)
	m.InitModels([]string{std})
	return m
}
