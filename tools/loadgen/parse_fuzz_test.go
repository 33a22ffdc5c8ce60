package loadgen

import (
	"math"
	"testing"
)

// FuzzParseStages: whatever it accepts formats back to the same stages, and
// its schedule's arrivals come in order within its length.
func FuzzParseStages(f *testing.F) {
	for _, s := range []string{"30s:100,60s:500,30s:0", "0s:5,1s:5", "1ms:1e3", "1h:0.5", "1s:", ":1", "1s:1,,2s:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStages(s)
		if err != nil {
			return
		}
		back, err := ParseStages(FormatStages(st))
		if err != nil || len(back) != len(st) {
			t.Fatalf("%q formats as %q, which reads back as %v, %v", s, FormatStages(st), back, err)
		}
		for i := range st {
			if back[i] != st[i] {
				t.Fatalf("%q: stage %d %v read back as %v", s, i, st[i], back[i])
			}
		}
		sched := newSchedule(st, 0, 0)
		var last float64
		for k := int64(0); k < 200; k++ {
			off, ok := sched.at(k)
			if !ok {
				break
			}
			if float64(off) < last || off > sched.length() {
				t.Fatalf("%q: arrival %d at %v (previous %v, length %v)", s, k, off, last, sched.length())
			}
			last = float64(off)
		}
	})
}

// FuzzParseThreshold: an accepted threshold has a known metric and
// operator and a finite value, and checking it never panics.
func FuzzParseThreshold(f *testing.F) {
	for _, s := range []string{"p99<500ms", "errors<1%", "achieved>95%", "max<=2s", "p50<0.5", "dropped<1e2%", "p99<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		th, err := ParseThreshold(s)
		if err != nil {
			return
		}
		if !latencyMetrics[th.Metric] && !ratioMetrics[th.Metric] {
			t.Fatalf("%q: metric %q", s, th.Metric)
		}
		switch th.Op {
		case "<", "<=", ">", ">=":
		default:
			t.Fatalf("%q: operator %q", s, th.Op)
		}
		if math.IsNaN(th.Value) || math.IsInf(th.Value, 0) {
			t.Fatalf("%q: value %v", s, th.Value)
		}
		rep := &Report{Offered: 10, Sent: 9, Completed: 8, Failed: 1, Dropped: 1, Latency: Percentiles{P50: 1, P90: 2, P99: 3, Max: 4}}
		if got := rep.Check([]Threshold{th}); len(rep.Thresholds) != 1 || len(got) > 1 {
			t.Fatalf("%q: %v %v", s, rep.Thresholds, got)
		}
	})
}
