package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/pkg/apperr"
)

// observe counts every request and times it, by route pattern (never the
// raw path, whose task ids and blob keys would make a series each), method
// and the status the client received. It runs outside the access logger,
// which writes error responses, so the status is final when it looks.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil && !c.Response().Committed {
			status, _ = Classify(err)
		}
		route := c.Path()
		if !s.routes[route] {
			route = metrics.Unmatched
		}
		// A sampled request's trace is its duration's exemplar.
		var traceID string
		if sc := trace.SpanContextFromContext(c.Request().Context()); sc.IsSampled() {
			traceID = sc.TraceID().String()
		}
		s.Metrics.Request(route, methodLabel(c.Request().Method), status, time.Since(start), traceID)
		return err
	}
}

// methodLabel bounds the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// CreateOutcome names what became of a create that returned err.
func CreateOutcome(err error) string {
	if err == nil {
		return metrics.Created
	}
	switch apperr.CodeOf(err) {
	case apperr.InsufficientCredits:
		return metrics.InsufficientCredits
	case apperr.LimitExceeded:
		return metrics.RateLimited
	case apperr.Invalid, apperr.TooLarge, apperr.UnsupportedMediaType, apperr.Mismatch, apperr.Conflict:
		return metrics.Invalid
	case apperr.Forbidden:
		return metrics.Forbidden
	case apperr.Unavailable:
		return metrics.Unavailable
	case apperr.OutcomeUnknown:
		return metrics.OutcomeUnknown
	}
	return metrics.Error
}

// authRefusal names why authentication refused a request, or "" when err
// is no refusal (authentication could not find out: Redis is down).
func authRefusal(err error) string {
	switch {
	case errors.Is(err, apperr.ErrAccountDisabled):
		return metrics.AuthDisabled
	case errors.Is(err, apperr.ErrUnknownKey), errors.Is(err, apperr.ErrKeyRevoked):
		return metrics.AuthInvalid
	case apperr.CodeOf(err) == apperr.Unauthenticated:
		return metrics.AuthMissing
	case apperr.CodeOf(err) == apperr.Forbidden:
		return metrics.AuthDisabled
	}
	return ""
}

// OpsDeps is what the operations listener needs.
type OpsDeps struct {
	// Ready reports whether the gateway can serve (Redis takes writes).
	Ready func(ctx context.Context) error
	// Metrics serves /metrics.
	Metrics http.Handler
}

// NewOps returns the handler of the operations listener
// (EASEL_METRICS_ADDR): /metrics, and /healthz and /readyz as the API
// port answers them, so probes may use either port. Its requests are not
// counted in the request metrics: scrapes and probes would drown the
// API's.
func NewOps(d OpsDeps) http.Handler {
	e := newEcho()
	Get(e, "/healthz", Healthz)
	Get(e, "/readyz", Readyz(d.Ready))
	Get(e, "/metrics", echo.WrapHandler(d.Metrics))
	return e
}
