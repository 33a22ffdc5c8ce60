// Package promtest reads what a registry holds, for the services' metrics
// tests: Easel's series (easel_*), and which of them moved.
package promtest

import (
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/easelhq/easel/pkg/prom"
)

// Series returns the easel_* series g gathers (prom.Series).
func Series(tb testing.TB, g prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	all, err := prom.Series(g)
	if err != nil {
		tb.Fatal(err)
	}
	maps.DeleteFunc(all, func(k string, _ float64) bool { return !strings.HasPrefix(k, "easel_") })
	return all
}

// Counts returns the easel_* series g gathers but the histograms' sums,
// which depend on timing.
func Counts(tb testing.TB, g prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	all := Series(tb, g)
	maps.DeleteFunc(all, func(k string, _ float64) bool {
		name, _, _ := strings.Cut(k, "{")
		return strings.HasSuffix(name, "_sum")
	})
	return all
}

// Moved returns the series whose value changed from before to after, by
// how much.
func Moved(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// CheckMoves runs record and checks that it moved exactly want's series of
// g, by exactly want's amounts.
func CheckMoves(tb testing.TB, g prometheus.Gatherer, record func(), want map[string]float64) {
	tb.Helper()
	before := Series(tb, g)
	record()
	if got := Moved(before, Series(tb, g)); !maps.Equal(got, want) {
		tb.Errorf("moved %v; want %v", got, want)
	}
}

// Case is one recording of a metrics table test: Record moves exactly
// Want's series of a fresh registry, by exactly Want's amounts.
type Case[M any] struct {
	Name   string
	Record func(m M)
	Want   map[string]float64
}

// RunCases runs each case on metrics newMetrics makes on a fresh
// registry.
func RunCases[M any](t *testing.T, newMetrics func(reg prometheus.Registerer) M, cases []Case[M]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := newMetrics(reg)
			CheckMoves(t, reg, func() { c.Record(m) }, c.Want)
		})
	}
}
