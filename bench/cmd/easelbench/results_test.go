package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// filled returns results as a run of parts fills them (figures made up).
func filled(parts ...string) *results {
	r := &results{Date: "2026-11-23", Machine: "test", Command: "easelbench --only " + strings.Join(parts, ","), Rounds: 2, Parts: parts, Redis: redisSingle, RedisNodes: 1}
	for _, p := range parts {
		switch p {
		case "http":
			r.CreateReal, r.CreateBaseline = []float64{7000, 7100}, []float64{11000, 12000}
			r.QueryReal, r.QueryBaseline = []float64{15000, 15500}, []float64{16000, 16500}
			r.CreateCPUReal = []map[string]float64{{"gateway": 93, "redis": 46, "self": 61}, {"gateway": 95, "redis": 44, "self": 60}}
			r.CreateCPUBaseline = []map[string]float64{{"gateway": 56, "redis": 16, "self": 52}, {"gateway": 55, "redis": 17, "self": 50}}
			r.CreateP50, r.QueryP50 = []float64{7.6, 7.8}, []float64{3.7, 3.9}
			r.GatewayRSSMB, r.TaskRecordBytes, r.PerTaskBytes = ptr(25.0), ptr(248.0), ptr(1285.0)
		case "drain":
			r.DrainReal, r.DrainBaseline = []float64{5100, 5150}, []float64{10500, 11300}
			r.DrainCPUReal = []map[string]float64{{"worker": 204, "redis": 116}, {"worker": 210, "redis": 110}}
			r.DrainCPUBaseline = []map[string]float64{{"worker": 93, "redis": 49}, {"worker": 95, "redis": 50}}
			r.WorkerRSSMB = ptr(82.1)
			r.LifeCPUReal = []map[string]float64{{"redis": 250}, {"redis": 260}}
			r.LifeCPUBaseline = []map[string]float64{{"redis": 60}, {"redis": 62}}
			r.LifeCommandsReal = &lifeCounts{Tasks: 2000, Sent: map[string]float64{"evalsha": 4.1, "bzpopmin": 0.6}, Stats: map[string]float64{"evalsha": 4.1, "hset": 9, "zadd": 6.2}, PeakParked: ptr(int64(1500))}
			r.LifeCommandsBaseline = &lifeCounts{Tasks: 2000, Sent: map[string]float64{"evalsha": 3.1}, Stats: map[string]float64{"evalsha": 3.1, "hset": 2, "lpush": 1}}
		case "pickup":
			r.PickupP50, r.PickupP90, r.PickupP99, r.PickupMax, r.PickupN = ptr(24.0), ptr(50.0), ptr(71.0), ptr(90.0), ptr(500)
		case "inflight":
			r.Inflight = &inflightResult{Requested: 2000, Accounts: 40, SimDelayS: 30, DurationS: 90, WindowStartS: 30, WindowEndS: 90,
				PeakInflight: 2000, PeakActive: 2000, MeanInflight: 1990, CompletedWindow: 3980, RatePerS: 66.3, ExpectedPerS: 66.3, Ratio: ptr(1.0),
				ProcessingMeanS: 30.1, Created: 7000, Completed: 5000, PeakRSSMB: ptr(300.0), PeakRedisConns: 40, WorkerCPUCores: 0.3, WorkerCPUPerTaskUs: 4500}
		}
	}
	return r
}

// rowParts says which part measures each row of the table, by the row's
// start.
var rowParts = []struct{ row, part string }{
	{"create throughput", "http"},
	{"query throughput", "http"},
	{"end-to-end tasks", "drain"},
	{"pick-up latency", "pickup"},
	{"gateway peak RSS", "http"},
	{"worker peak RSS", "drain"},
	{"Redis commands per task, whole life", "drain"},
	{"Redis round trips per task, whole life", "drain"},
	{"Redis CPU per task, whole life", "drain"},
	{"Redis memory per task record", "http"},
	{"Redis memory per task, all keys", "http"},
	{"in flight, peak", "inflight"},
	{"in flight, mean", "inflight"},
	{"in flight, completions", "inflight"},
	{"in flight, worker peak RSS", "inflight"},
	{"in flight, worker Redis connections", "inflight"},
}

// TestPrintNotRun prints the results of runs with each part left out, and
// each part alone: a figure whose part did not run reads "not run", never a
// number, NaN, a pass or a failure; a figure whose part ran is printed.
func TestPrintNotRun(t *testing.T) {
	runs := [][]string{
		{"http", "drain", "pickup"}, // make bench
		{"http", "drain", "pickup", "inflight"},
		{"drain", "pickup"}, // the worker's parts alone
		{"http", "pickup"},
		{"http", "drain"},
		{"http"}, {"drain"}, {"pickup"}, {"inflight"},
		{},
	}
	for _, parts := range runs {
		t.Run(strings.Join(append([]string{"only"}, parts...), "-"), func(t *testing.T) {
			var b bytes.Buffer
			filled(parts...).print(&b)
			out := b.String()
			if strings.Contains(out, "NaN") {
				t.Errorf("NaN in the output:\n%s", out)
			}
			lines := strings.Split(out, "\n")
			for _, rp := range rowParts {
				ran := slices.Contains(parts, rp.part)
				var found []string
				for _, l := range lines {
					if strings.HasPrefix(l, rp.row) {
						found = append(found, l)
					}
				}
				if rp.part == "inflight" && !ran {
					if len(found) != 0 {
						t.Errorf("inflight not run, but a row %q: %q", rp.row, found)
					}
					continue
				}
				if len(found) != 1 {
					t.Errorf("%d rows %q; want 1:\n%s", len(found), rp.row, out)
					continue
				}
				checkRow(t, found[0], ran)
			}
			// The inflight part not run is one row.
			var slow []string
			for _, l := range lines {
				if strings.HasPrefix(l, "slow generations in flight") {
					slow = append(slow, l)
				}
			}
			if ran := slices.Contains(parts, "inflight"); ran && len(slow) != 0 {
				t.Errorf("inflight ran, but a not run row: %q", slow)
			} else if !ran {
				if len(slow) != 1 {
					t.Errorf("inflight did not run: %d rows saying so; want 1:\n%s", len(slow), out)
				} else {
					checkRow(t, slow[0], false)
				}
			}

			// The lines under the table name only what ran.
			for _, l := range []struct{ start, part string }{
				{"real gateway p50 latency", "http"},
				{"CPU per create request", "http"},
				{"CPU per task drained", "drain"},
				{"Whole life of a task in Redis", "drain"},
				{"in flight: ", "inflight"},
			} {
				has := strings.Contains(out, "\n"+l.start)
				if ran := slices.Contains(parts, l.part); has != ran {
					t.Errorf("line %q printed %v; its part ran %v:\n%s", l.start, has, ran, out)
				}
			}
			rounds := ""
			for _, l := range lines {
				if strings.HasPrefix(l, "per round") {
					rounds = l
				}
			}
			if (rounds != "") != (slices.Contains(parts, "http") || slices.Contains(parts, "drain")) {
				t.Errorf("per round line %q with parts %v", rounds, parts)
			}
			if strings.Contains(rounds, "create") != slices.Contains(parts, "http") || strings.Contains(rounds, "end-to-end") != slices.Contains(parts, "drain") {
				t.Errorf("per round line %q with parts %v", rounds, parts)
			}
		})
	}
}

func checkRow(t *testing.T, line string, ran bool) {
	t.Helper()
	f := strings.Fields(line)
	verdict := slices.Contains(f, "yes") || slices.Contains(f, "NO")
	switch {
	case !ran && !strings.Contains(line, notRun):
		t.Errorf("not run, but %q", line)
	case !ran && verdict:
		t.Errorf("not run, but a verdict: %q", line)
	case ran && strings.Contains(line, notRun):
		t.Errorf("ran, but %q", line)
	}
}

// TestPrintVerdicts checks the met column of the rows that have a target.
func TestPrintVerdicts(t *testing.T) {
	r := filled("http", "drain", "pickup", "inflight")
	r.CreateReal = []float64{6800} // 0.59 of 11,500: under the 0.60 target
	r.GatewayRSSMB = ptr(150.0)
	r.PickupP99 = ptr(400.0)
	r.LifeCommandsReal.Sent["evalsha"] = 4.9 // 5.5 round trips, over the 5
	r.Inflight.PeakInflight = 16
	r.Inflight.Ratio = ptr(0.8)
	r.Inflight.PeakRSSMB = nil // unreadable
	r.Inflight.PeakRedisConns = 2016
	var b bytes.Buffer
	r.print(&b)
	want := map[string]string{
		"create throughput":                      "NO", // 0.59
		"query throughput":                       "yes",
		"end-to-end tasks":                       "NO",  // 0.47
		"Redis commands per task, whole life":    "yes", // 19.3
		"Redis round trips per task, whole life": "NO",  // 5.5
		"Redis CPU per task, whole life":         "NO",  // 4.1×
		"pick-up latency":                        "NO",
		"gateway peak RSS":                       "NO",
		"in flight, peak":                        "NO",
		"in flight, completions":                 "NO",
		"in flight, worker peak RSS":             "unknown",
		"in flight, worker Redis connections":    "NO",
	}
	for _, l := range strings.Split(b.String(), "\n") {
		for row, v := range want {
			if strings.HasPrefix(l, row) {
				f := strings.Fields(l)
				if f[len(f)-1] != v {
					t.Errorf("%q: met %q; want %q", l, f[len(f)-1], v)
				}
				delete(want, row)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("rows not found: %v\n%s", want, b.String())
	}
}

// TestJSONNotRun: a figure of a part that did not run is left out of the
// JSON, not written as 0 (which would read as measured).
func TestJSONNotRun(t *testing.T) {
	keys := map[string][]string{
		"http": {"create_real_per_s", "query_baseline_per_s", "create_real_cpu_us_per_request", "create_real_p50_ms", "gateway_peak_rss_mb", "task_record_bytes", "redis_bytes_per_task"},
		"drain": {"drain_real_per_s", "drain_baseline_per_s", "drain_real_cpu_us_per_task", "worker_peak_rss_mb",
			"life_real_commands", "life_baseline_commands", "life_real_redis_cpu_us_per_task", "life_baseline_redis_cpu_us_per_task"},
		"pickup":   {"pickup_p50_ms", "pickup_p99_ms", "pickup_tasks"},
		"inflight": {"inflight"},
	}
	for _, parts := range [][]string{{"drain", "pickup"}, {"http"}, {"inflight"}, {"http", "drain", "pickup", "inflight"}} {
		b, err := json.Marshal(filled(parts...))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for part, ks := range keys {
			ran := slices.Contains(parts, part)
			for _, k := range ks {
				if _, ok := m[k]; ok != ran {
					t.Errorf("parts %v: key %s present %v; want %v", parts, k, ok, ran)
				}
			}
		}
		if got := m["parts"]; len(got.([]any)) != len(parts) {
			t.Errorf("parts %v: JSON parts %v", parts, got)
		}
	}
}

func TestParseParts(t *testing.T) {
	p, err := parseParts(defaultOnly)
	if err != nil || len(p) != 4 || !p["http"] || !p["drain"] || !p["pickup"] || !p["downloads"] || p["inflight"] {
		t.Errorf("default parts %v, %v: want http, drain, pickup, downloads", p, err)
	}
	if p, err := parseParts(" drain , inflight "); err != nil || !p["drain"] || !p["inflight"] || len(p) != 2 {
		t.Errorf("drain, inflight: %v, %v", p, err)
	}
	for _, bad := range []string{"", ",", "drian", "http,pick-up"} {
		if _, err := parseParts(bad); err == nil {
			t.Errorf("--only %q accepted", bad)
		}
	}
}
