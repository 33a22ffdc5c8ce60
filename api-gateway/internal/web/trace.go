package web

import (
	"context"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the gateway's own spans' instrumentation scope.
const TracerName = "github.com/easelhq/easel/api-gateway"

// HeaderTraceID is the response header that names the request's trace.
const HeaderTraceID = "X-Trace-Id"

// attrRoute is the server span's route pattern.
const attrRoute = attribute.Key("http.route")

// traced (with tracing on) names the request's server span after its route,
// "METHOD /route" (never the raw path, whose ids would make a name each), and
// tells the client its trace (X-Trace-Id).
func (s *Server) traced(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		span := trace.SpanFromContext(c.Request().Context())
		if sc := span.SpanContext(); sc.IsValid() {
			c.Response().Header().Set(HeaderTraceID, sc.TraceID().String())
		}
		if route := c.Path(); span.IsRecording() && s.routes[route] {
			span.SetName(c.Request().Method + " " + route)
			span.SetAttributes(attrRoute.String(route))
		}
		return next(c)
	}
}

// SetSpanAttributes sets attrs on the span ctx holds, if it records.
func SetSpanAttributes(ctx context.Context, attrs ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrs...)
	}
}
