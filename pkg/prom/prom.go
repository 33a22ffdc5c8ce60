// Package prom is what the gateway and the workers share of their
// Prometheus metrics: a registry with the standard collectors, the /metrics
// handler, and a flat reading of what a registry holds. Each service
// declares its own metrics (api-gateway/internal/metrics,
// worker/internal/metrics); none registers globally.
package prom

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry holding the Go runtime's and the
// process's standard collectors (go_*, process_*).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg's metrics in Prometheus's exposition formats: the
// text format, or OpenMetrics to a scraper that asks for it (Accept), the
// format that carries exemplars (a histogram's trace ids). A collector that
// fails leaves its metrics out; the rest are served.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:            reg, // promhttp_metric_handler_errors_total
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
		EnableOpenMetrics:   true,
	})
}

// Series flattens what g gathers into one value per series, keyed as the
// text format writes them: name{label="value",...} with the labels in
// name order (none: bare name). A histogram is its _count and _sum. For
// tests, and anyone reading a service's metrics in code.
func Series(g prometheus.Gatherer) (map[string]float64, error) {
	mfs, err := g.Gather()
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := func(suffix string) string {
				k := mf.GetName() + suffix
				if len(m.GetLabel()) == 0 {
					return k
				}
				k += "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						k += ","
					}
					k += l.GetName() + "=" + strconv.Quote(l.GetValue())
				}
				return k + "}"
			}
			switch {
			case m.Counter != nil:
				out[key("")] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key("")] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key("_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key("_sum")] = m.GetHistogram().GetSampleSum()
			case m.Untyped != nil:
				out[key("")] = m.GetUntyped().GetValue()
			}
		}
	}
	return out, err
}

// Namespace starts every Easel metric's name.
const Namespace = "easel"

// Vecs makes a service's metric vectors, named Namespace_<name>, and
// registers each on Reg (nil: on no registry, for tests that do not look).
type Vecs struct{ Reg prometheus.Registerer }

func (v Vecs) register(c prometheus.Collector) {
	if v.Reg != nil {
		v.Reg.MustRegister(c)
	}
}

// Counter makes a counter vector.
func (v Vecs) Counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	v.register(c)
	return c
}

// Gauge makes a gauge vector.
func (v Vecs) Gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	v.register(g)
	return g
}

// Histogram makes a histogram vector with the given buckets.
func (v Vecs) Histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
	v.register(h)
	return h
}
