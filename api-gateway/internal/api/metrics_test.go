package api_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/api-gateway/internal/tasks"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/prom"
	"github.com/easelhq/easel/pkg/prom/promtest"
)

// meter gives the handler metrics on reg, as the gateway's Run wires
// them: the handler counts the creates (and the credits they debited)
// itself.
func meter(reg *prometheus.Registry, more func(*deps)) func(*deps) {
	return func(d *deps) {
		m := metrics.New(reg)
		m.InitModels([]string{std, pro})
		d.Metrics = m
		if more != nil {
			more(d)
		}
	}
}

func requests(route, method, code string, n float64) map[string]float64 {
	return map[string]float64{
		`easel_http_requests_total{code="` + code + `",method="` + method + `",route="` + route + `"}`: n,
		`easel_http_request_duration_seconds_count{method="` + method + `",route="` + route + `"}`:     n,
	}
}

func with(ms ...map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

func created(model, outcome string) string {
	return `easel_tasks_created_total{model="` + model + `",outcome="` + outcome + `"}`
}

func debited(model string) string { return `easel_credits_debited_total{model="` + model + `"}` }

// Each request moves exactly the series it should, by exactly the right
// amount, and nothing else.
func TestRequestMetrics(t *testing.T) {
	t.Parallel()
	const create, query = api.PathCreate, api.PathQuery
	proBody := `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","image_size":"4K"}}`
	key := func(t *testing.T, e *env, n account.Spec) string {
		t.Helper()
		n.Name = "metrics"
		a, err := e.Accounts.Create(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := e.Accounts.CreateKey(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	expect := func(t *testing.T, r reply, status int) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("status %d (%s); want %d", r.Status, r.Body, status)
		}
	}
	tests := []struct {
		name  string
		queue tasks.Queue
		edit  func(*deps)
		do    func(t *testing.T, e *env)
		want  map[string]float64
	}{
		{name: "create", do: func(t *testing.T, e *env) { expect(t, e.Create(e.KeyA, okBody), 200) },
			want: with(requests(create, "POST", "200", 1), map[string]float64{created(std, "created"): 1, debited(std): 4})},
		{name: "create pro 4K", do: func(t *testing.T, e *env) { expect(t, e.Create(e.KeyA, proBody), 200) },
			want: with(requests(create, "POST", "200", 1), map[string]float64{created(pro, "created"): 1, debited(pro): 24})},
		{name: "idempotent repeat: replayed, not created or debited again", do: func(t *testing.T, e *env) {
			hdr := map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": "application/json", "Idempotency-Key": "k"}
			expect(t, e.Do("POST", create, hdr, okBody), 200)
			expect(t, e.Do("POST", create, hdr, okBody), 200)
		}, want: with(requests(create, "POST", "200", 2), map[string]float64{created(std, "created"): 1, created(std, "replayed"): 1, debited(std): 4})},
		{name: "no key", do: func(t *testing.T, e *env) { expect(t, e.Create("", okBody), 401) },
			want: with(requests(create, "POST", "401", 1), map[string]float64{`easel_auth_refusals_total{reason="missing"}`: 1})},
		{name: "unknown key", do: func(t *testing.T, e *env) {
			expect(t, e.Create("esk_0000000000000000000000000000000000000000", okBody), 401)
		}, want: with(requests(create, "POST", "401", 1), map[string]float64{`easel_auth_refusals_total{reason="invalid"}`: 1})},
		{name: "disabled account", do: func(t *testing.T, e *env) { expect(t, e.Query(e.KeyOff, "task_lumen_1"), 403) },
			want: with(requests(query, "GET", "403", 1), map[string]float64{`easel_auth_refusals_total{reason="disabled"}`: 1})},
		{name: "too many failed authentications", edit: func(d *deps) { d.AuthGuard = auth.NewGuard(auth.GuardLimits{PerAddress: 0.001}) },
			do: func(t *testing.T, e *env) {
				expect(t, e.Create("esk_0000000000000000000000000000000000000000", okBody), 401)
				expect(t, e.Create("esk_0000000000000000000000000000000000000000", okBody), 429)
			},
			want: with(requests(create, "POST", "401", 1), requests(create, "POST", "429", 1),
				map[string]float64{`easel_auth_refusals_total{reason="invalid"}`: 1, `easel_auth_refusals_total{reason="limited"}`: 1})},
		{name: "invalid request", do: func(t *testing.T, e *env) {
			expect(t, e.Create(e.KeyA, `{"model":"dall-e-3","task_type":"image","input":{"prompt":"p"}}`), 400)
		}, want: with(requests(create, "POST", "400", 1), map[string]float64{created("unknown", "invalid"): 1})},
		{name: "not JSON", do: func(t *testing.T, e *env) {
			expect(t, e.Do("POST", create, map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": "text/plain"}, okBody), 415)
		}, want: with(requests(create, "POST", "415", 1), map[string]float64{created("unknown", "invalid"): 1})},
		{name: "insufficient credits", do: func(t *testing.T, e *env) {
			expect(t, e.Create(key(t, e, account.Spec{Credits: 3}), okBody), 402)
		}, want: with(requests(create, "POST", "402", 1), map[string]float64{created(std, "insufficient_credits"): 1})},
		{name: "create rate", do: func(t *testing.T, e *env) {
			k := key(t, e, account.Spec{Credits: 100, RateLimit: 1})
			expect(t, e.Create(k, okBody), 200)
			expect(t, e.Create(k, okBody), 429)
		}, want: with(requests(create, "POST", "200", 1), requests(create, "POST", "429", 1), map[string]float64{
			created(std, "created"): 1, debited(std): 4, created("unknown", "rate_limited"): 1, `easel_rate_limit_refusals_total{limit="create"}`: 1})},
		{name: "query rate", do: func(t *testing.T, e *env) {
			k := key(t, e, account.Spec{Credits: 100, QueryRateLimit: 1})
			expect(t, e.Query(k, "task_lumen_1"), 404)
			expect(t, e.Query(k, "task_lumen_1"), 429)
		}, want: with(requests(query, "GET", "404", 1), requests(query, "GET", "429", 1),
			map[string]float64{`easel_rate_limit_refusals_total{limit="query"}`: 1})},
		{name: "in-flight limit", do: func(t *testing.T, e *env) {
			k := key(t, e, account.Spec{Credits: 100, MaxInflight: 1})
			expect(t, e.Create(k, okBody), 200)
			expect(t, e.Create(k, okBody), 429)
		}, want: with(requests(create, "POST", "200", 1), requests(create, "POST", "429", 1), map[string]float64{
			created(std, "created"): 1, debited(std): 4, created(std, "rate_limited"): 1, `easel_rate_limit_refusals_total{limit="inflight"}`: 1})},
		{name: "model not allowed", do: func(t *testing.T, e *env) {
			expect(t, e.Create(key(t, e, account.Spec{Credits: 100, Models: []catalog.Tier{catalog.Standard}}), proBody), 403)
		}, want: with(requests(create, "POST", "403", 1), map[string]float64{created(pro, "forbidden"): 1})},
		{name: "queue down: not created, not debited",
			queue: queueFunc(func(context.Context, jobs.Ref, string) error { return errors.New("down") }),
			do:    func(t *testing.T, e *env) { expect(t, e.Create(e.KeyA, okBody), 503) },
			want:  with(requests(create, "POST", "503", 1), map[string]float64{created(std, "unavailable"): 1})},
		{name: "unmatched path", do: func(t *testing.T, e *env) { expect(t, e.Do("GET", "/v1/task/task_lumen_123", nil, ""), 404) },
			want: requests("unmatched", "GET", "404", 1)},
		{name: "wrong method", do: func(t *testing.T, e *env) { expect(t, e.Do("GET", create, nil, ""), 405) },
			want: requests(create, "GET", "405", 1)},
		{name: "a method of no standard", do: func(t *testing.T, e *env) { expect(t, e.Do("PROPFIND", query, nil, ""), 405) },
			want: requests(query, "other", "405", 1)},
		{name: "download, by pattern", do: func(t *testing.T, e *env) {
			for _, m := range []string{"GET", "HEAD"} {
				u := e.Signer.Sign(api.FilesPrefix+"2026/01/01/nothing-"+m+".png", time.Now().Add(time.Hour))
				expect(t, e.Do(m, strings.TrimPrefix(u, e.Srv.URL), nil, ""), 404)
			}
		}, want: with(requests("/v1/files/*", "GET", "404", 1), requests("/v1/files/*", "HEAD", "404", 1))},
		{name: "health", do: func(t *testing.T, e *env) { expect(t, e.Do("GET", "/healthz", nil, ""), 200) },
			want: requests("/healthz", "GET", "200", 1)},
		{name: "no /metrics on the API by default", do: func(t *testing.T, e *env) { expect(t, e.Do("GET", "/metrics", nil, ""), 404) },
			want: requests("unmatched", "GET", "404", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := newEnvWith(t, tt.queue, zap.NewNop(), meter(reg, tt.edit))
			before := promtest.Counts(t, reg)
			tt.do(t, e)
			if got := promtest.Moved(before, promtest.Counts(t, reg)); !maps.Equal(got, tt.want) {
				t.Errorf("moved %v\nwant  %v", got, tt.want)
			}
		})
	}
}

// EASEL_METRICS_ON_API: /metrics on the API's port, counted as a route.
func TestMetricsOnAPI(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnvWith(t, nil, zap.NewNop(), meter(reg, func(d *deps) { d.MetricsHandler = prom.Handler(reg) }))
	if r := e.Create(e.KeyA, okBody); r.Status != 200 {
		t.Fatal(r.Status)
	}
	r := e.Do("GET", "/metrics", nil, "")
	if r.Status != 200 || !strings.Contains(string(r.Body), `easel_tasks_created_total{model="`+std+`",outcome="created"} 1`) {
		t.Fatalf("/metrics: %d %s", r.Status, r.Body)
	}
	if got := promtest.Counts(t, reg)[`easel_http_requests_total{code="200",method="GET",route="/metrics"}`]; got != 1 {
		t.Errorf("scrapes counted %v; want 1", got)
	}
}
