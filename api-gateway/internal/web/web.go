// Package web is what the gateway's three HTTP applications share: the
// public API (package api), the admin API (package admin) and the account
// console (package console) each register their routes on one Server,
// under its middleware (request ids, the access log, request metrics,
// panics), its authentication of API keys, its rate limits and request
// budgets, and the one mapping of application errors to HTTP (errors.go).
// It also serves the embedded pages (pages.go) with their security headers.
//
// Echo stays here and in the applications: everything behind them takes
// a context and returns apperr errors.
package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/tracing"
)

// Limiter limits request rates.
type Limiter interface {
	Allow(ctx context.Context, bucket string, perSecond int) (ratelimit.Result, error)
}

// Limits are the default per-key rate limits, in requests per second; an
// account may set its own.
type Limits struct {
	Create, Query int
}

// Config is what the shared middleware needs.
type Config struct {
	Log *zap.Logger
	// Auth resolves API keys (Server.Authenticate).
	Auth    auth.Authenticator
	Limiter Limiter
	Limits  Limits
	// RateLimitFailOpen lets requests through, unlimited, while the limiter
	// cannot reach Redis; false (the default) refuses them, 503.
	RateLimitFailOpen bool
	// RequestTimeout bounds the work of a request under Server.Deadline (0:
	// none): past it, a request waiting on Redis is 503 with Retry-After.
	RequestTimeout time.Duration
	// AuthGuard limits failed authentications per client address (nil:
	// none).
	AuthGuard *auth.Guard
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client's address (none: the client is the TCP peer).
	TrustedProxies []netip.Prefix
	Now            func() time.Time
	// Metrics records requests, creates and refusals (nil: recorded
	// nowhere).
	Metrics *metrics.Metrics
	// Tracing, when on, gives every request a server span (Handler) and
	// its authentication a child span (nil: off).
	Tracing *tracing.Tracing
}

// Server is the gateway's HTTP server as the applications see it: Echo
// with the shared middleware on, and the middleware the applications put
// on their routes.
type Server struct {
	Config
	// Echo is what the applications register their routes on.
	Echo *echo.Echo
	// accessLog writes the one line per request. Its caller would always be
	// logRequest, so it is left out: finding it costs a stack walk per line.
	accessLog *zap.Logger
	// limiterDown logs the limiter's failures once per burst.
	limiterDown *logging.Burst
	// routes are the route patterns, the values of the request metrics'
	// route label (Handler fills it).
	routes map[string]bool
	// lookups shares one lookup of a key among the requests that need it
	// at once.
	lookups singleflight.Group
	// tracer starts the spans within a request's (ChildTracer).
	tracer trace.Tracer
}

// Request context names.
const (
	ctxAccount = "easel.account"
	ctxBucket  = "easel.bucket"
	// ctxBase is the request's context before its budget (Deadline).
	ctxBase = "easel.basectx"
	// ctxExpected marks an answer that is no failure whatever its status
	// (a readiness probe's "still starting"): its access line is debug.
	ctxExpected = "easel.expected"
)

// New returns a server with the shared middleware and no routes.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.Tracing == nil {
		cfg.Tracing = tracing.Noop()
	}
	s := &Server{Config: cfg, accessLog: cfg.Log.WithOptions(zap.WithCaller(false)),
		limiterDown: logging.NewBurst("rate limiter: Redis", 10*time.Second), tracer: cfg.Tracing.ChildTracer(TracerName)}
	e := newEcho()
	// The client's address is the TCP peer's, unless the gateway was told
	// which proxies to believe: X-Forwarded-For from anyone else is a
	// client's word, and would let it choose whose limits it uses.
	e.IPExtractor = ipExtractor(cfg.TrustedProxies)
	if cfg.Tracing.Enabled() {
		e.Use(s.traced)
	}
	e.Use(
		s.observe,
		s.requestID,
		middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
			LogMethod:  true,
			LogURIPath: true, // never the query: it holds URL signatures
			LogStatus:  true,
			LogLatency: true,
			LogError:   true,
			// Write the error response before the access line, so the line
			// carries the status the client received.
			HandleError:   true,
			LogValuesFunc: s.logRequest,
		}),
		middleware.RecoverWithConfig(middleware.RecoverConfig{
			LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
				logging.From(c.Request().Context()).Error("panic", zap.Error(err), zap.ByteString("stack", stack))
				return err
			},
		}),
	)
	s.Echo = e
	return s
}

// newEcho is Echo answering errors with the one mapper and writing JSON
// as the API does.
func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = handleError
	e.JSONSerializer = jsonSerializer{}
	return e
}

// Handler returns the server's handler, once every application has
// registered its routes: their patterns become the request metrics'
// route label. With tracing on, it starts a server span per request (or
// continues the client's trace: traceparent), the span the request's
// context holds from then on.
func (s *Server) Handler() http.Handler {
	s.routes = map[string]bool{}
	for _, r := range s.Echo.Routes() {
		s.routes[r.Path] = true
	}
	if !s.Tracing.Enabled() {
		return s.Echo
	}
	return otelhttp.NewHandler(s.Echo, "", tracing.HTTPOptions(s.Tracing)...)
}

// Router is what Get registers on: an *echo.Echo or an *echo.Group.
type Router interface {
	Match(methods []string, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) []*echo.Route
}

// Get registers a GET route and its HEAD: every resource served to GET
// answers HEAD with the same status and headers and no body (net/http
// drops the body of a HEAD response).
func Get(r Router, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	r.Match([]string{http.MethodGet, http.MethodHead}, path, h, m...)
}

// SetAccount makes acct the request's account, and bucket the name its
// rate limits are counted under (an API key's hash, a console user's).
func SetAccount(c echo.Context, acct *account.Account, bucket string) {
	c.Set(ctxAccount, acct)
	c.Set(ctxBucket, bucket)
}

// AccountOf is the request's account (Authenticate, SetAccount).
func AccountOf(c echo.Context) *account.Account {
	return c.Get(ctxAccount).(*account.Account)
}

// BucketOf is the name the request's rate limits are counted under: for
// a request with an API key, the key's hash.
func BucketOf(c echo.Context) string {
	return c.Get(ctxBucket).(string)
}

// BaseContext is the request's context before its budget (Deadline):
// what a waiting request waits on (it ends when the client goes away).
func BaseContext(c echo.Context) context.Context {
	if ctx, ok := c.Get(ctxBase).(context.Context); ok {
		return ctx
	}
	return c.Request().Context()
}

// Deadline gives the request its budget (RequestTimeout).
func (s *Server) Deadline(next echo.HandlerFunc) echo.HandlerFunc {
	if s.RequestTimeout <= 0 {
		return next
	}
	return func(c echo.Context) error {
		r := c.Request()
		c.Set(ctxBase, r.Context())
		ctx, cancel := context.WithTimeout(r.Context(), s.RequestTimeout)
		defer cancel()
		c.SetRequest(r.WithContext(ctx))
		return next(c)
	}
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// maxClientRequestID bounds the X-Request-Id a client may send.
const maxClientRequestID = 128

// validClientRequestID accepts a client's X-Request-Id only if it is short
// and of characters that are safe in a log line and a header: letters,
// digits and . _ : -.
func validClientRequestID(s string) bool {
	if s == "" || len(s) > maxClientRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// requestID gives every request the server's own id, on every log line
// (request_id), and a logger carrying it. A client's own X-Request-Id is
// accepted only if short and safe: then it is echoed in X-Request-Id and
// logged beside ours (client_request_id). Otherwise X-Request-Id is ours and
// whatever the client sent there is ignored.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		id := newRequestID()
		// Room for what the request adds (account, task, model, price...):
		// one allocation rather than a slice grown field by field.
		fields := make([]zap.Field, 1, 10)
		fields[0] = zap.String("request_id", id)
		// Within a trace (tracing on): its trace_id and span_id, on the
		// access line and every line the request logs.
		fields = append(fields, tracing.Fields(r.Context())...)
		echoed := id
		if cid := r.Header.Get(echo.HeaderXRequestID); validClientRequestID(cid) {
			fields = append(fields, zap.String("client_request_id", cid))
			echoed = cid
		}
		c.Response().Header().Set(echo.HeaderXRequestID, echoed)
		c.SetRequest(r.WithContext(logging.WithLogger(r.Context(), s.Log, fields...)))
		return next(c)
	}
}

// logRequest writes the access log: one line per request, with the request
// id, the account and the task it created, if any.
func (s *Server) logRequest(c echo.Context, v middleware.RequestLoggerValues) error {
	fields := append(logging.Fields(c.Request().Context()),
		zap.String("method", v.Method),
		zap.String("path", v.URIPath),
		zap.Int("status", v.Status),
		zap.Duration("latency", v.Latency),
	)
	if expected, _ := c.Get(ctxExpected).(bool); expected {
		s.accessLog.Debug("request", fields...)
		return nil
	}
	if v.Status >= 500 {
		s.accessLog.Warn("request", fields...)
		return nil
	}
	s.accessLog.Info("request", fields...)
	return nil
}

// ipExtractor finds a request's client address: the TCP peer, or the
// address a trusted proxy forwarded.
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// CeilSeconds is d in whole seconds, rounded up: a Retry-After.
func CeilSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// ClipID quotes a client's id for a message, cut to 80 bytes.
func ClipID(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80] + "...")
	}
	return strconv.Quote(s)
}

// Healthz answers a liveness probe.
func Healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// ErrStarting is a readiness check's answer while the gateway is still
// starting (waiting for Redis, making the dev key): 503, as any "not
// ready", but expected, so its access line is at debug level (a start-up
// polled for readiness prints nothing), where any other 503 warns.
var ErrStarting = errors.New("starting: waiting for Redis")

// Readyz answers a readiness probe: ready reports whether the gateway can
// serve (Redis takes writes).
func Readyz(ready func(ctx context.Context) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			if errors.Is(err, ErrStarting) {
				c.Set(ctxExpected, true)
			}
			// A probe's "not yet" is an answer, not a failure to log: the
			// requests that need Redis say so at warn level.
			return Logged(apperr.Wrap(err, apperr.Unavailable, "not ready: Redis is unreachable or refuses writes"))
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	}
}
