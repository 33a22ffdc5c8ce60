package web

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/tracing"
)

// knownKeys is an authenticator that can tell, for nothing, a key it has
// resolved lately (auth.Cache).
type knownKeys interface {
	Known(key string) (*account.Account, bool)
}

// Authenticate checks the Bearer key and puts its account on the request
// (AccountOf), its rate limits counted under the key's hash. A check that
// may fail takes a try from the client's budgets of failures first
// (auth.Guard): past them it is refused, 429, before any lookup. A key
// this gateway resolved lately is known without one. The key's own
// limits are its account's to decide (account.Key.Admit): here its expiry
// and the addresses it is accepted from, a create's model once the body
// names it.
func (s *Server) Authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.authenticateTraced(c); err != nil {
			return err
		}
		return next(c)
	}
}

// authenticateTraced is authenticate within a span "auth" (when the request
// is traced), the account it found on it and on the request's span.
func (s *Server) authenticateTraced(c echo.Context) error {
	r := c.Request()
	ctx, span := s.tracer.Start(r.Context(), "auth")
	if !span.IsRecording() {
		return s.authenticate(c)
	}
	defer span.End()
	c.SetRequest(r.WithContext(ctx))
	err := s.authenticate(c)
	c.SetRequest(r) // the request's own span is the handler's
	if err != nil {
		span.SetStatus(codes.Error, string(apperr.CodeOf(err)))
		return err
	}
	acct := tracing.AttrAccountID.String(AccountOf(c).ID)
	span.SetAttributes(acct)
	SetSpanAttributes(r.Context(), acct)
	return nil
}

// authenticate is Authenticate's check: the request's account set, or the
// refusal.
func (s *Server) authenticate(c echo.Context) error {
	key, err := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
	var acct *account.Account
	if err == nil {
		if k, ok := s.Auth.(knownKeys); ok {
			acct, _ = k.Known(key)
		}
	}
	switch {
	case err != nil:
		parsed := err
		err = s.Guarded(c, "API key", func() error { return parsed })
	case acct == nil:
		// Concurrent requests with one key share one lookup and one try
		// of the guard: a client that opens many connections at once is
		// not refused for its own concurrency.
		ctx, addr := c.Request().Context(), c.RealIP()
		v, lerr, _ := s.lookups.Do(key, func() (any, error) {
			var l lookup
			l.wait, l.err = s.guard(ctx, addr, "API key", func() (err error) {
				l.acct, err = s.Auth.Authenticate(ctx, key)
				return err
			})
			return l, nil
		})
		l := v.(lookup)
		if lerr != nil {
			l.err = lerr
		}
		if l.wait > 0 {
			s.refused(c, l.wait)
		}
		acct, err = l.acct, l.err
	}
	if err != nil {
		if reason := authRefusal(err); reason != "" {
			s.Metrics.AuthRefused(reason)
		}
		return err
	}
	if k := acct.Via; k != nil {
		if err := k.Admit(account.KeyUse{Now: s.Now(), Addr: c.RealIP}); err != nil {
			s.Metrics.AuthRefused(metrics.AuthKeyLimit)
			return err
		}
	}
	logging.AddFields(c.Request().Context(), zap.String("account_id", acct.ID))
	SetAccount(c, acct, account.HashKey(key))
	return nil
}

// Guarded runs check, a credential check that may fail (what is checked
// is named in the 429), under the client address's budgets of failures
// (auth.Guard): a spent budget refuses it before it runs, and a check that
// did not refuse the credential gives its try back.
func (s *Server) Guarded(c echo.Context, what string, check func() error) error {
	wait, err := s.guard(c.Request().Context(), c.RealIP(), what, check)
	if wait > 0 {
		s.refused(c, wait)
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
func (s *Server) refused(c echo.Context, wait time.Duration) {
	s.Metrics.AuthRefused(metrics.AuthLimited)
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(CeilSeconds(wait), 1)))
}

// guard is Guarded without the request: a refusal is the wait and its
// 429.
func (s *Server) guard(ctx context.Context, addr, what string, check func() error) (time.Duration, error) {
	try, wait, ok := s.AuthGuard.Try(ctx, addr)
	if !ok {
		return wait, apperr.Errorf(apperr.LimitExceeded, "too many requests with a missing or invalid %s from this address or network; retry after %s", what, wait.Round(time.Millisecond))
	}
	ended := false
	defer func() {
		if !ended { // check panicked
			try.Failed()
		}
	}()
	err := check()
	ended = true
	if err == nil || apperr.CodeOf(err) != apperr.Unauthenticated {
		try.Good()
	} else {
		try.Failed()
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

// Limit applies the request's rate limit for a class of request (its
// account's, else the default, counted under BucketOf) and reports it in
// X-RateLimit-* headers; over the limit, 429 with Retry-After.
//
// If the limiter cannot reach Redis, by default the request is 503 with
// Retry-After: the rest of the request needs Redis too, and on a Redis that
// answers only some keys (a cluster with a master down) waving it through
// would let it escape its limit. With RateLimitFailOpen it goes on,
// unlimited and without X-RateLimit headers. Either way the failure is
// logged once per burst, not once per request.
func (s *Server) Limit(class ratelimit.Class) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if class == ratelimit.Create {
			// A create refused here is a create all the same: counted,
			// before its model is known.
			return func(c echo.Context) error {
				if err := s.allow(c, class); err != nil {
					s.Metrics.Create(metrics.UnknownModel, CreateOutcome(err))
					return err
				}
				return next(c)
			}
		}
		return func(c echo.Context) error {
			if err := s.allow(c, class); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// allow applies the request's rate limit for a class of request: nil lets
// the request go on.
func (s *Server) allow(c echo.Context, class ratelimit.Class) error {
	acct := AccountOf(c)
	perSecond := s.Limits.Create
	if class == ratelimit.Query {
		perSecond = s.Limits.Query
		if acct.QueryRateLimit > 0 {
			perSecond = acct.QueryRateLimit
		}
	} else if acct.RateLimit > 0 {
		perSecond = acct.RateLimit
	}
	ctx := c.Request().Context()
	res, err := s.Limiter.Allow(ctx, ratelimit.Bucket(class, BucketOf(c)), perSecond)
	if err != nil {
		if s.RateLimitFailOpen {
			s.limiterDown.Fail(logging.From(ctx), err, zap.String("choice", "failing open: requests go on unlimited"))
			return nil
		}
		s.limiterDown.Fail(logging.From(ctx), err, zap.String("choice", "failing closed: requests are refused, 503"))
		return Logged(apperr.Transient(err, apperr.Unavailable, "the service is unavailable, try again"))
	}
	if s.limiterDown.Failing() { // else no logger is built: the common case
		s.limiterDown.OK(logging.From(ctx))
	}
	hdr := c.Response().Header()
	hdr.Set("X-RateLimit-Limit", strconv.Itoa(res.Limit))
	hdr.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
	hdr.Set("X-RateLimit-Reset", strconv.Itoa(CeilSeconds(res.ResetAfter)))
	if !res.Allowed {
		limit := metrics.LimitCreate
		if class == ratelimit.Query {
			limit = metrics.LimitQuery
		}
		s.Metrics.RateLimited(limit)
		hdr.Set("Retry-After", strconv.Itoa(max(CeilSeconds(res.RetryAfter), 1)))
		what := "task creations"
		if class == ratelimit.Query {
			what = "queries"
		}
		return apperr.Errorf(apperr.LimitExceeded, "rate limit exceeded: at most %d %s per second per API key; retry after %s", res.Limit, what, res.RetryAfter.Round(time.Millisecond))
	}
	return nil
}
