// Package metrics is the gateway's Prometheus instrumentation: the metrics
// it exports (docs/metrics.md lists them), registered on a registry the
// gateway's Run makes, and the handler that serves them. Nothing here is
// global: each gateway, and each test, has a registry of its own.
//
// The HTTP edge records requests, creates and refusals through *Metrics;
// the task service records debits through its own small interface, which
// *Metrics satisfies.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/easelhq/easel/pkg/prom"
)

// Outcomes of a create (easel_tasks_created_total's outcome label).
const (
	Created             = "created"
	Replayed            = "replayed"
	InsufficientCredits = "insufficient_credits"
	RateLimited         = "rate_limited"
	Invalid             = "invalid"
	Forbidden           = "forbidden"
	Unavailable         = "unavailable"
	OutcomeUnknown      = "outcome_unknown"
	Error               = "error"
)

// Outcomes lists every create outcome.
var Outcomes = []string{Created, Replayed, InsufficientCredits, RateLimited, Invalid, Forbidden, Unavailable, OutcomeUnknown, Error}

// UnknownModel labels a create refused before its model was known (a
// rate-limited or malformed request).
const UnknownModel = "unknown"

// Reasons for refusing an API key (easel_auth_refusals_total's reason).
const (
	// AuthMissing: no Authorization header, or not a Bearer key.
	AuthMissing = "missing"
	// AuthInvalid: a key that is unknown or revoked.
	AuthInvalid = "invalid"
	// AuthDisabled: the key's account is disabled.
	AuthDisabled = "disabled"
	// AuthLimited: the client address failed authentication too often
	// lately (EASEL_AUTH_FAIL_RATE), refused before any lookup.
	AuthLimited = "limited"
	// AuthKeyLimit: the key has expired, or is not accepted from the
	// client's address.
	AuthKeyLimit = "key_limit"
)

// Limits that refuse requests (easel_rate_limit_refusals_total's limit).
const (
	LimitCreate   = "create"   // the key's create rate (EASEL_RATE_LIMIT)
	LimitQuery    = "query"    // the key's query rate (EASEL_QUERY_RATE_LIMIT)
	LimitInflight = "inflight" // the account's unfinished tasks (EASEL_MAX_INFLIGHT)
)

// Unmatched labels a request that matched no route.
const Unmatched = "unmatched"

// Metrics are the gateway's metrics.
type Metrics struct {
	requests, creates, authRefusals, rateRefusals, debited *prometheus.CounterVec
	duration                                               *prometheus.HistogramVec
}

// New makes the gateway's metrics and registers them on reg (nil: on no
// registry, for tests that do not look at them).
func New(reg prometheus.Registerer) *Metrics {
	v := prom.Vecs{Reg: reg}
	m := &Metrics{
		requests: v.Counter("http_requests_total", "HTTP requests answered, by route pattern (unmatched: none), method and status code.",
			"route", "method", "code"),
		duration: v.Histogram("http_request_duration_seconds", "Time from a request's arrival to its answer's end, by route pattern and method.",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}, "route", "method"),
		creates: v.Counter("tasks_created_total", "Authenticated task creations, by model (unknown: refused before it was read) and outcome: created, replayed, insufficient_credits, rate_limited, invalid, forbidden, unavailable, error.",
			"model", "outcome"),
		authRefusals: v.Counter("auth_refusals_total", "API requests refused at authentication, by reason: missing, invalid (unknown or revoked key), disabled (account), limited (too many failed authentications from the address).",
			"reason"),
		rateRefusals: v.Counter("rate_limit_refusals_total", "Requests refused with 429 by a limit: create or query (a key's request rate), inflight (an account's unfinished tasks).",
			"limit"),
		debited: v.Counter("credits_debited_total", "Credits charged for tasks created, by model.", "model"),
	}
	for _, r := range []string{AuthMissing, AuthInvalid, AuthDisabled, AuthLimited, AuthKeyLimit} {
		m.authRefusals.WithLabelValues(r)
	}
	for _, l := range []string{LimitCreate, LimitQuery, LimitInflight} {
		m.rateRefusals.WithLabelValues(l)
	}
	return m
}

// InitModels makes the per-model series exist at 0 from the start, so that
// rates over them are defined before the first task of each model.
func (m *Metrics) InitModels(models []string) {
	for _, model := range models {
		for _, o := range Outcomes {
			m.creates.WithLabelValues(model, o)
		}
		m.debited.WithLabelValues(model)
	}
}

// Request records an HTTP request answered with status code after d.
// traceID, when not "" (the request's trace was sampled), is the duration's
// exemplar: a slow bucket links to a trace that shows why.
func (m *Metrics) Request(route, method string, code int, d time.Duration, traceID string) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	obs := m.duration.WithLabelValues(route, method)
	if traceID != "" {
		obs.(prometheus.ExemplarObserver).ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
		return
	}
	obs.Observe(d.Seconds())
}

// Create records a create's outcome (one of Outcomes).
func (m *Metrics) Create(model, outcome string) {
	m.creates.WithLabelValues(model, outcome).Inc()
}

// AuthRefused records a request refused at authentication.
func (m *Metrics) AuthRefused(reason string) {
	m.authRefusals.WithLabelValues(reason).Inc()
}

// RateLimited records a request refused by a limit.
func (m *Metrics) RateLimited(limit string) {
	m.rateRefusals.WithLabelValues(limit).Inc()
}

// Debited records the price of a task created.
func (m *Metrics) Debited(model string, credits int64) {
	m.debited.WithLabelValues(model).Add(float64(credits))
}
