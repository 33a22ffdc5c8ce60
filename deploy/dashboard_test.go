package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const dashboardFile = "grafana/easel-dashboard.json"

// contractMetrics are the metric families the services export: Easel's
// own (docs/metrics.md), Asynq's queue collector (github.com/hibiken/asynq/x
// /metrics, registered on the workers) and client_golang's standard go_* and
// process_* collectors (checked by prefix).
var contractMetrics = map[string]string{
	// gateway
	"easel_http_requests_total":           "counter",
	"easel_http_request_duration_seconds": "histogram",
	"easel_tasks_created_total":           "counter",
	"easel_auth_refusals_total":           "counter",
	"easel_rate_limit_refusals_total":     "counter",
	"easel_credits_debited_total":         "counter",
	// worker
	"easel_task_queue_wait_seconds":           "histogram",
	"easel_task_stage_duration_seconds":       "histogram",
	"easel_tasks_finished_total":              "counter",
	"easel_task_retries_total":                "counter",
	"easel_upstream_requests_total":           "counter",
	"easel_upstream_request_duration_seconds": "histogram",
	"easel_generations_in_flight":             "gauge",
	"easel_credits_refunded_total":            "counter",
	// worker, the upstream pool (EASEL_UPSTREAMS_FILE)
	"easel_upstream_pool_calls_total":           "counter",
	"easel_upstream_pool_call_duration_seconds": "histogram",
	"easel_upstream_pool_breaker_state":         "gauge",
	// Asynq's collector on the workers
	"asynq_tasks_enqueued_total":            "gauge", // by queue and state, despite its name
	"asynq_queue_size":                      "gauge",
	"asynq_queue_latency_seconds":           "gauge",
	"asynq_queue_memory_usage_approx_bytes": "gauge",
	"asynq_tasks_processed_total":           "counter",
	"asynq_tasks_failed_total":              "counter",
	"asynq_queue_paused_total":              "gauge",
}

func standardMetric(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// family maps a series name to its metric family (a histogram's _bucket,
// _sum and _count series to the histogram).
func family(name string) (string, string, bool) {
	if kind, ok := contractMetrics[name]; ok {
		return name, kind, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && contractMetrics[base] == "histogram" {
			return base, "histogram", true
		}
	}
	return "", "", false
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promBraces   = regexp.MustCompile(`\{[^{}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeyword  = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
		"atan2": true,
	}
)

// promMetrics returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges and grouping
// clauses are removed that are neither keywords nor function calls.
func promMetrics(expr string) []string {
	s := promString.ReplaceAllString(expr, `""`)
	s = promBraces.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] == '$' || s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // a Grafana variable, or a number's exponent (1e-9)
		}
		if promKeyword[strings.ToLower(id)] || strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			continue
		}
		out = append(out, id)
	}
	return out
}

func TestPromMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (route) (rate(easel_http_requests_total{code=~"5.."}[$__rate_interval]))`:                                    {"easel_http_requests_total"},
		`histogram_quantile(0.95, sum by (le, stage) (rate(easel_task_stage_duration_seconds_bucket{model=~"$model"}[5m])))`: {"easel_task_stage_duration_seconds_bucket"},
		`a / clamp_min(sum(rate(b_total[1m])), 1e-9) * on(instance) group_left() c`:                                          {"a", "b_total", "c"},
		`max by (queue) (asynq_queue_latency_seconds{queue=~"$queue"}) > bool 3`:                                             {"asynq_queue_latency_seconds"},
	} {
		if got := promMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("promMetrics(%s) = %v; want %v", expr, got, want)
		}
	}
}

type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *dashDatasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource *dashDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// TestDashboard: the dashboard is valid JSON Grafana can import, queries
// only metrics the services export, uses each the way its type allows
// (counters through rate or increase, histograms through their buckets),
// and shows every Easel metric.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string      `json:"uid"`
		Title         string      `json:"title"`
		SchemaVersion int         `json:"schemaVersion"`
		Panels        []dashPanel `json:"panels"`
		Templating    struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      any             `json:"query"`
				Datasource *dashDatasource `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 {
		t.Errorf("uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]bool{"__rate_interval": true, "__range": true, "__interval": true}
	var exprs []string
	variableQuery := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: datasource %+v; want the ${datasource} variable", v.Name, v.Datasource)
		}
		switch q := v.Query.(type) {
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, variableExpr(s))
				variableQuery[variableExpr(s)] = true
			}
		case string:
			if v.Type == "query" {
				exprs = append(exprs, variableExpr(q))
				variableQuery[variableExpr(q)] = true
			}
		}
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: the dashboard would be tied to one Prometheus")
	}
	ids := map[int]bool{}
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %d %q: title or gridPos %+v", p.ID, p.Title, p.GridPos)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no queries", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if refs[tg.RefID] || tg.RefID == "" {
					t.Errorf("panel %q: refId %q missing or repeated", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				for _, ds := range []*dashDatasource{p.Datasource, tg.Datasource} {
					if ds == nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
						t.Errorf("panel %q: datasource %+v; want the ${datasource} variable", p.Title, ds)
					}
				}
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	walk(d.Panels)

	used := map[string]bool{}
	for _, e := range exprs {
		for _, v := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(e, -1) {
			if !vars[v[1]] {
				t.Errorf("%s: variable $%s is not defined", e, v[1])
			}
		}
		names := promMetrics(e)
		if len(names) == 0 {
			t.Errorf("%s: selects no metric", e)
		}
		for _, n := range names {
			if standardMetric(n) {
				continue
			}
			fam, kind, ok := family(n)
			if !ok {
				t.Errorf("%s: %s is not a metric the services export", e, n)
				continue
			}
			used[fam] = true
			switch {
			case kind == "histogram" && !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count"):
				t.Errorf("%s: %s is a histogram; query its _bucket, _sum or _count series", e, n)
			case kind == "histogram" && strings.HasSuffix(n, "_bucket") && !strings.Contains(e, "histogram_quantile("):
				t.Errorf("%s: %s outside histogram_quantile", e, n)
			case (kind == "counter" || kind == "histogram" && n != fam) && !strings.Contains(e, "rate(") && !strings.Contains(e, "increase(") && !variableQuery[e]:
				t.Errorf("%s: counter %s used without rate or increase", e, n)
			}
		}
	}
	var missing []string
	for name := range contractMetrics {
		if strings.HasPrefix(name, "easel_") && !used[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard shows none of %v", missing)
	}

	// docs/metrics.md, where it exists, documents every metric shown.
	if doc, err := os.ReadFile("../docs/metrics.md"); err == nil {
		for name := range used {
			if !strings.Contains(string(doc), name) {
				t.Errorf("the dashboard queries %s, which docs/metrics.md does not list", name)
			}
		}
	}
}

// variableExpr turns a Grafana variable query into the PromQL it runs.
func variableExpr(q string) string {
	if inner, ok := strings.CutPrefix(q, "label_values("); ok {
		if i := strings.LastIndex(inner, ","); i >= 0 {
			return strings.TrimSpace(inner[:i])
		}
		return strings.TrimSuffix(inner, ")")
	}
	if inner, ok := strings.CutPrefix(q, "query_result("); ok {
		return strings.TrimSuffix(inner, ")")
	}
	return q
}
