package loadgen

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Threshold is a service-level objective checked at the end of a run, e.g.
// "p99<500ms", "errors<1%", "achieved>95%".
//
// Latency metrics (p50, p90, p99, max) are of the completed units, from their
// scheduled moments; a bare number is milliseconds. Ratio metrics are
// percentages: errors is failed ÷ sent, achieved is completed ÷ offered,
// dropped and unfinished are over offered.
type Threshold struct {
	Expr   string
	Metric string
	Op     string
	Value  float64 // milliseconds or percent
}

// ThresholdResult is a threshold and what the run measured.
type ThresholdResult struct {
	Expr     string  `json:"expr"`
	Measured float64 `json:"measured"` // milliseconds or percent
	OK       bool    `json:"ok"`
}

var thresholdRE = regexp.MustCompile(`^\s*([a-z0-9]+)\s*(<=|>=|<|>)\s*([0-9.]+)\s*([a-zµ%]*)\s*$`)

var latencyMetrics = map[string]bool{"p50": true, "p90": true, "p99": true, "max": true}
var ratioMetrics = map[string]bool{"errors": true, "achieved": true, "dropped": true, "unfinished": true}

// ParseThreshold reads one threshold expression.
func ParseThreshold(s string) (Threshold, error) {
	m := thresholdRE.FindStringSubmatch(s)
	if m == nil {
		return Threshold{}, fmt.Errorf("threshold %q: want METRIC<VALUE or METRIC>VALUE, e.g. p99<500ms or errors<1%%", s)
	}
	t := Threshold{Expr: strings.TrimSpace(s), Metric: m[1], Op: m[2]}
	v, err := strconv.ParseFloat(m[3], 64)
	if err != nil {
		return Threshold{}, fmt.Errorf("threshold %q: %q is not a number", s, m[3])
	}
	switch {
	case latencyMetrics[t.Metric]:
		switch m[4] {
		case "", "ms":
			t.Value = v
		default:
			d, err := time.ParseDuration(m[3] + m[4])
			if err != nil {
				return Threshold{}, fmt.Errorf("threshold %q: %q is not a duration", s, m[3]+m[4])
			}
			t.Value = float64(d) / float64(time.Millisecond)
		}
	case ratioMetrics[t.Metric]:
		if m[4] != "%" {
			return Threshold{}, fmt.Errorf("threshold %q: %s is a percentage (e.g. %s<1%%)", s, t.Metric, t.Metric)
		}
		t.Value = v
	default:
		return Threshold{}, fmt.Errorf("threshold %q: unknown metric %q (p50, p90, p99, max, errors, achieved, dropped, unfinished)", s, t.Metric)
	}
	return t, nil
}

// measure is the threshold's metric in the report.
func (t Threshold) measure(rep *Report) float64 {
	pct := func(n, of int64) float64 {
		if of == 0 {
			return 0
		}
		return 100 * float64(n) / float64(of)
	}
	switch t.Metric {
	case "p50":
		return rep.Latency.P50
	case "p90":
		return rep.Latency.P90
	case "p99":
		return rep.Latency.P99
	case "max":
		return rep.Latency.Max
	case "errors":
		return pct(rep.Failed, rep.Sent)
	case "achieved":
		return pct(rep.Completed, rep.Offered)
	case "dropped":
		return pct(rep.Dropped, rep.Offered)
	case "unfinished":
		return pct(rep.Unfinished, rep.Offered)
	}
	return 0
}

// Check evaluates the thresholds on the report, records the results in it
// and returns the ones that failed.
func (rep *Report) Check(ts []Threshold) []ThresholdResult {
	rep.Thresholds = nil
	var failed []ThresholdResult
	for _, t := range ts {
		v := t.measure(rep)
		var ok bool
		switch t.Op {
		case "<":
			ok = v < t.Value
		case "<=":
			ok = v <= t.Value
		case ">":
			ok = v > t.Value
		case ">=":
			ok = v >= t.Value
		}
		// A latency objective of a run where nothing completed is not met.
		if latencyMetrics[t.Metric] && rep.Completed == 0 {
			ok = false
		}
		r := ThresholdResult{Expr: t.Expr, Measured: v, OK: ok}
		rep.Thresholds = append(rep.Thresholds, r)
		if !ok {
			failed = append(failed, r)
		}
	}
	return failed
}

// Unit is the measure's: "ms" or "%".
func (r ThresholdResult) Unit() string {
	if m := thresholdRE.FindStringSubmatch(r.Expr); m != nil && ratioMetrics[m[1]] {
		return "%"
	}
	return "ms"
}

// String is "p99<500ms FAILED (measured 734.20ms)".
func (r ThresholdResult) String() string {
	unit := r.Unit()
	verdict := "met"
	if !r.OK {
		verdict = "FAILED"
	}
	return fmt.Sprintf("%s %s (measured %.2f%s)", r.Expr, verdict, r.Measured, unit)
}
