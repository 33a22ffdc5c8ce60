package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// ChildTransport is Transport for a client whose requests belong to a
// traced unit of work (a worker's run, a webhook delivery): a request made
// within a sampled span gets a client span and carries the trace context;
// one made outside any (an untraced task's) gets neither, and starts no
// trace of its own.
func ChildTransport(base http.RoundTripper, t *Tracing) http.RoundTripper {
	if !t.Enabled() {
		return Transport(base, t)
	}
	return otelhttp.NewTransport(base, append(HTTPOptions(t), otelhttp.WithTracerProvider(childOnly{t.provider}))...)
}
