// Package api is the gateway's HTTP edge: Echo routes, middleware, the JSON
// shapes of the public API and the mapping of application errors to HTTP.
// Everything behind it takes a context and returns apperr errors.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/api-gateway/internal/watch"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
)

// Tasks creates and reads tasks.
type Tasks interface {
	// Create creates a task; under an idempotency key (idem.Key not empty)
	// a repeat of an earlier create returns its task, Replayed.
	Create(ctx context.Context, by task.Caller, in task.Input, idem task.Idempotency) (task.Created, error)
	Get(ctx context.Context, accountID, taskID string) (*task.Task, error)
	Cancel(ctx context.Context, accountID, taskID string) (task.Cancellation, error)
	List(ctx context.Context, accountID string, f task.Filter) ([]*task.Task, string, error)
	// GetPositioned is Get with a pending task's place in its queue (nil:
	// none known).
	GetPositioned(ctx context.Context, accountID, taskID string) (*task.Task, *task.QueuePosition, error)
}

// Signer makes and checks result URLs.
type Signer interface {
	Sign(path string, expires time.Time) string
	Verify(path, expires, sig string, now time.Time) error
}

// Blobs opens stored results.
type Blobs interface {
	Open(ctx context.Context, key string) (blob.Object, blob.Info, error)
}

// Presigner gives out a store's own short-lived URLs of results, for
// downloads answered with a redirect (EASEL_BLOB_REDIRECT).
type Presigner interface {
	Presign(ctx context.Context, key string, ttl time.Duration) (string, error)
}

// Limiter limits request rates.
type Limiter interface {
	Allow(ctx context.Context, bucket string, perSecond int) (ratelimit.Result, error)
}

// Limits are the default per-key rate limits, in requests per second; an
// account may set its own.
type Limits struct {
	Create, Query int
}

// Deps is what the API needs.
type Deps struct {
	Log     *zap.Logger
	Tasks   Tasks
	Auth    auth.Authenticator
	Limiter Limiter
	Limits  Limits
	// RateLimitFailOpen lets requests through, unlimited, while the limiter
	// cannot reach Redis; false (the default) refuses them, 503.
	RateLimitFailOpen bool
	Decoder           *createreq.Decoder
	Signer            Signer
	Blobs             Blobs
	// Redirect, when set, answers downloads with a 302 to a URL it
	// presigns instead of streaming them.
	Redirect Presigner
	// Ready reports whether the gateway can serve (Redis takes writes).
	Ready func(ctx context.Context) error
	// RequestTimeout bounds the work of an API request (0: none): past it,
	// a request waiting on Redis is 503 with Retry-After.
	RequestTimeout time.Duration
	// AuthGuard limits failed authentications per client address (nil:
	// none).
	AuthGuard *auth.Guard
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client's address (none: the client is the TCP peer).
	TrustedProxies []netip.Prefix
	Now            func() time.Time
	// Admin, when not nil, adds the admin API under /admin/v1.
	Admin *AdminDeps
	// Console, when not nil, adds the account console at /console.
	Console *ConsoleDeps
	// Metrics records requests, creates and refusals (nil: recorded
	// nowhere).
	Metrics *metrics.Metrics
	// MetricsHandler, when not nil, serves /metrics on the API's port
	// (EASEL_METRICS_ON_API).
	MetricsHandler http.Handler
	// Webhooks reads tasks' webhook deliveries (GET /v1/task/webhooks).
	Webhooks WebhookLog
	// Watch wakes requests waiting on a task (query's wait, the stream);
	// nil: a hub nothing feeds (waits run to their end).
	Watch *watch.Hub
}

// Paths.
const (
	PathCreate = "/v1/task/create"
	PathQuery  = "/v1/task/query"
	// FilesPrefix starts every result URL path; the blob key follows.
	FilesPrefix = taskview.FilesPrefix
)

const (
	ctxAccount = "easel.account"
	ctxKeyHash = "easel.keyhash"
	// ctxBase is the request's context before its budget (deadline).
	ctxBase = "easel.basectx"
)

// limit applies the key's rate limit for a class of request and reports it
// in X-RateLimit-* headers; over the limit, 429 with Retry-After.
//
// If the limiter cannot reach Redis, by default the request is 503 with
// Retry-After: the rest of the request needs Redis too, and on a Redis that
// answers only some keys (a cluster with a master down) waving it through
// would let it escape its limit. With RateLimitFailOpen it goes on,
// unlimited and without X-RateLimit headers. Either way the failure is
// logged once per burst, not once per request.
func (h *handlers) limit(class ratelimit.Class) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if class == ratelimit.Create {
			// A create refused here is a create all the same: counted,
			// before its model is known.
			allow := h.allow(class)
			return func(c echo.Context) error {
				if err := allow(c); err != nil {
					h.Metrics.Create(metrics.UnknownModel, createOutcome(err))
					return err
				}
				return next(c)
			}
		}
		allow := h.allow(class)
		return func(c echo.Context) error {
			if err := allow(c); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// allow applies the key's rate limit for a class of request: nil lets
// the request go on.
func (h *handlers) allow(class ratelimit.Class) func(c echo.Context) error {
	return func(c echo.Context) error {
		acct := accountOf(c)
		perSecond := h.Limits.Create
		if class == ratelimit.Query {
			perSecond = h.Limits.Query
			if acct.QueryRateLimit > 0 {
				perSecond = acct.QueryRateLimit
			}
		} else if acct.RateLimit > 0 {
			perSecond = acct.RateLimit
		}
		ctx := c.Request().Context()
		res, err := h.Limiter.Allow(ctx, ratelimit.Bucket(class, c.Get(ctxKeyHash).(string)), perSecond)
		if err != nil {
			if h.RateLimitFailOpen {
				h.limiterDown.Fail(logging.From(ctx), err, zap.String("choice", "failing open: requests go on unlimited"))
				return nil
			}
			h.limiterDown.Fail(logging.From(ctx), err, zap.String("choice", "failing closed: requests are refused, 503"))
			return logged{apperr.Transient(err, apperr.Unavailable, "the service is unavailable, try again")}
		}
		if h.limiterDown.Failing() { // else no logger is built: the common case
			h.limiterDown.OK(logging.From(ctx))
		}
		hdr := c.Response().Header()
		hdr.Set("X-RateLimit-Limit", strconv.Itoa(res.Limit))
		hdr.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
		hdr.Set("X-RateLimit-Reset", strconv.Itoa(ceilSeconds(res.ResetAfter)))
		if !res.Allowed {
			limit := metrics.LimitCreate
			if class == ratelimit.Query {
				limit = metrics.LimitQuery
			}
			h.Metrics.RateLimited(limit)
			hdr.Set("Retry-After", strconv.Itoa(max(ceilSeconds(res.RetryAfter), 1)))
			what := "task creations"
			if class == ratelimit.Query {
				what = "queries"
			}
			return apperr.Errorf(apperr.LimitExceeded, "rate limit exceeded: at most %d %s per second per API key; retry after %s", res.Limit, what, res.RetryAfter.Round(time.Millisecond))
		}
		return nil
	}
}

func ceilSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// New returns the gateway's HTTP handler.
func New(d Deps) *echo.Echo {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Metrics == nil {
		d.Metrics = metrics.New(nil)
	}
	if d.Watch == nil {
		d.Watch = watch.New()
	}
	h := &handlers{Deps: d, accessLog: d.Log.WithOptions(zap.WithCaller(false)),
		limiterDown: logging.NewBurst("rate limiter: Redis", 10*time.Second)}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = handleError
	e.JSONSerializer = jsonSerializer{}
	// The client's address is the TCP peer's, unless the gateway was told
	// which proxies to believe: X-Forwarded-For from anyone else is a
	// client's word, and would let it choose whose limits it uses.
	e.IPExtractor = ipExtractor(d.TrustedProxies)
	e.Use(
		h.observe,
		h.requestID,
		middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
			LogMethod:  true,
			LogURIPath: true, // never the query: it holds URL signatures
			LogStatus:  true,
			LogLatency: true,
			LogError:   true,
			// Write the error response before the access line, so the line
			// carries the status the client received.
			HandleError:   true,
			LogValuesFunc: h.logRequest,
		}),
		middleware.RecoverWithConfig(middleware.RecoverConfig{
			LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
				logging.From(c.Request().Context()).Error("panic", zap.Error(err), zap.ByteString("stack", stack))
				return err
			},
		}),
	)

	get(e, "/healthz", h.healthz)
	get(e, "/readyz", h.readyz)
	get(e, "/openapi.json", h.openapi)
	get(e, "/playground", h.playground)
	get(e, "/playground/*", h.playground)

	v1 := e.Group("/v1")
	v1.POST("/task/create", h.create, h.deadline, h.authenticate, h.limit(ratelimit.Create))
	get(v1, "/task/query", h.query, h.deadline, h.authenticate, h.limit(ratelimit.Query))
	get(v1, "/task/webhooks", h.webhooks, h.deadline, h.authenticate, h.limit(ratelimit.Query))
	v1.POST("/task/cancel", h.cancel, h.deadline, h.authenticate, h.limit(ratelimit.Query))
	get(v1, "/task/list", h.list, h.deadline, h.authenticate, h.limit(ratelimit.Query))
	get(v1, "/task/stream", h.stream, h.deadline, h.authenticate, h.limit(ratelimit.Query))
	get(v1, "/files/*", h.download)
	if d.Admin != nil {
		registerAdmin(e.Group("/admin/v1", h.deadline), h, d.Admin)
	}
	if d.Console != nil {
		registerConsole(e, h, d.Console)
	}
	if d.MetricsHandler != nil {
		get(e, "/metrics", echo.WrapHandler(d.MetricsHandler))
	}
	h.routes = map[string]bool{}
	for _, r := range e.Routes() {
		h.routes[r.Path] = true
	}
	return e
}

// router is what get registers on: an *echo.Echo or an *echo.Group.
type router interface {
	Match(methods []string, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) []*echo.Route
}

// get registers a GET route and its HEAD: every resource served to GET
// answers HEAD with the same status and headers and no body (net/http
// drops the body of a HEAD response).
func get(r router, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	r.Match([]string{http.MethodGet, http.MethodHead}, path, h, m...)
}

type handlers struct {
	Deps
	// accessLog writes the one line per request. Its caller would always be
	// logRequest, so it is left out: finding it costs a stack walk per line.
	accessLog *zap.Logger
	// limiterDown logs the limiter's failures once per burst.
	limiterDown *logging.Burst
	// routes are the route patterns, the values of the request metrics'
	// route label.
	routes map[string]bool
	// lookups shares one lookup of a key among the requests that need it
	// at once.
	lookups singleflight.Group
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
func (h *handlers) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		id := newRequestID()
		// Room for what the request adds (account, task, model, price...):
		// one allocation rather than a slice grown field by field.
		fields := make([]zap.Field, 1, 8)
		fields[0] = zap.String("request_id", id)
		echoed := id
		if cid := r.Header.Get(echo.HeaderXRequestID); validClientRequestID(cid) {
			fields = append(fields, zap.String("client_request_id", cid))
			echoed = cid
		}
		c.Response().Header().Set(echo.HeaderXRequestID, echoed)
		c.SetRequest(r.WithContext(logging.WithLogger(r.Context(), h.Log, fields...)))
		return next(c)
	}
}

// logRequest writes the access log: one line per request, with the request
// id, the account and the task it created, if any.
func (h *handlers) logRequest(c echo.Context, v middleware.RequestLoggerValues) error {
	fields := append(logging.Fields(c.Request().Context()),
		zap.String("method", v.Method),
		zap.String("path", v.URIPath),
		zap.Int("status", v.Status),
		zap.Duration("latency", v.Latency),
	)
	if v.Status >= 500 {
		h.accessLog.Warn("request", fields...)
		return nil
	}
	h.accessLog.Info("request", fields...)
	return nil
}

// knownKeys is an authenticator that can tell, for nothing, a key it has
// resolved lately (auth.Cache).
type knownKeys interface {
	Known(key string) (*account.Account, bool)
}

// authenticate checks the Bearer key and puts the account on the context.
// A check that may fail takes a try from the client's budgets of failures
// first (auth.Guard): past them it is refused, 429, before any lookup. A key
// this gateway resolved lately is known without one.
func (h *handlers) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, err := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
		var acct *account.Account
		if err == nil {
			if k, ok := h.Auth.(knownKeys); ok {
				acct, _ = k.Known(key)
			}
		}
		switch {
		case err != nil:
			parsed := err
			err = h.guarded(c, "API key", func() error { return parsed })
		case acct == nil:
			// Concurrent requests with one key share one lookup and one try
			// of the guard: a client that opens many connections at once is
			// not refused for its own concurrency.
			ctx, addr := c.Request().Context(), c.RealIP()
			v, lerr, _ := h.lookups.Do(key, func() (any, error) {
				var l lookup
				l.wait, l.err = h.guard(addr, "API key", func() (err error) {
					l.acct, err = h.Auth.Authenticate(ctx, key)
					return err
				})
				return l, nil
			})
			l := v.(lookup)
			if lerr != nil {
				l.err = lerr
			}
			if l.wait > 0 {
				h.refused(c, l.wait)
			}
			acct, err = l.acct, l.err
		}
		if err != nil {
			if reason := authRefusal(err); reason != "" {
				h.Metrics.AuthRefused(reason)
			}
			return err
		}
		if err := h.keyLimits(c, acct.Via); err != nil {
			h.Metrics.AuthRefused(metrics.AuthKeyLimit)
			return err
		}
		c.Set(ctxKeyHash, account.HashKey(key))
		logging.AddFields(c.Request().Context(), zap.String("account_id", acct.ID))
		c.Set(ctxAccount, acct)
		return next(c)
	}
}

// keyLimits applies what an API key's limits say at authentication: its
// expiry (401) and the client addresses it is accepted from (403, the
// address as the trusted-proxy rules found it). Its models are checked
// once a create's model is known (createTask), its spend limit where it
// is charged.
func (h *handlers) keyLimits(c echo.Context, k *account.Key) error {
	if k == nil {
		return nil
	}
	if k.Expired(h.Now()) {
		return apperr.Errorf(apperr.Unauthenticated, "API key %s expired at %s", k.Prefix, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if len(k.AllowedIPs) == 0 {
		return nil // the common case: no client address to find
	}
	if addr := c.RealIP(); !k.AllowsAddr(addr) {
		if _, err := netip.ParseAddr(addr); err != nil {
			addr = "unknown"
		}
		return apperr.Errorf(apperr.Forbidden, "API key %s may not be used from this address (%s): it is limited to %s", k.Prefix, addr, joinPrefixes(k.AllowedIPs))
	}
	return nil
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
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

// deadline gives the request its budget (RequestTimeout).
func (h *handlers) deadline(next echo.HandlerFunc) echo.HandlerFunc {
	if h.RequestTimeout <= 0 {
		return next
	}
	return func(c echo.Context) error {
		r := c.Request()
		c.Set(ctxBase, r.Context())
		ctx, cancel := context.WithTimeout(r.Context(), h.RequestTimeout)
		defer cancel()
		c.SetRequest(r.WithContext(ctx))
		return next(c)
	}
}

// guarded runs check, a credential check that may fail (what is checked
// is named in the 429), under the client address's budgets of failures
// (auth.Guard): a spent budget refuses it before it runs, and a check that
// did not refuse the credential gives its try back.
func (h *handlers) guarded(c echo.Context, what string, check func() error) error {
	wait, err := h.guard(c.RealIP(), what, check)
	if wait > 0 {
		h.refused(c, wait)
	}
	return err
}

// lookup is what one lookup of a key found, for every request that waited
// on it.
type lookup struct {
	acct *account.Account
	wait time.Duration // refused by the guard: the wait
	err  error
}

// refused marks c's answer as the guard's 429.
func (h *handlers) refused(c echo.Context, wait time.Duration) {
	h.Metrics.AuthRefused(metrics.AuthLimited)
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(ceilSeconds(wait), 1)))
}

// guard is guarded without the request: a refusal is the wait and its
// 429.
func (h *handlers) guard(addr, what string, check func() error) (time.Duration, error) {
	try, wait, ok := h.AuthGuard.Try(addr)
	if !ok {
		return wait, apperr.Errorf(apperr.LimitExceeded, "too many requests with a missing or invalid %s from this address or network; retry after %s", what, wait.Round(time.Millisecond))
	}
	err := check()
	if err == nil || apperr.CodeOf(err) != apperr.Unauthenticated {
		try.Good()
	}
	return 0, err
}

// bearer reads the API key of an Authorization header.
func bearer(hdr string) (string, error) {
	if hdr == "" {
		return "", apperr.New(apperr.Unauthenticated, "missing Authorization header: send Authorization: Bearer <API key>")
	}
	scheme, key, ok := strings.Cut(hdr, " ")
	key = strings.TrimSpace(key)
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", apperr.New(apperr.Unauthenticated, "malformed Authorization header: want Authorization: Bearer <API key>")
	}
	return key, nil
}

func accountOf(c echo.Context) *account.Account {
	return c.Get(ctxAccount).(*account.Account)
}

func (h *handlers) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handlers) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := h.Ready(ctx); err != nil {
		return apperr.Wrap(err, apperr.Unavailable, "not ready: Redis is unreachable or refuses writes")
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}
