// Package console is the account console: a page at /console and its
// JSON API under /console/api, for the users of an account
// (docs/console.md). A user signs in with an email and a password; the
// session is a cookie scoped to /console, and every write also carries the
// session's CSRF token in X-CSRF-Token and, from a browser, an Origin of
// the gateway's own. The console's task routes are the public API's
// handlers, served for the session's account; its operator view's changes
// are the admin API's.
package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/admin"
	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/pkg/users"
)

// Console paths and names.
const (
	Path          = "/console"
	pathAPI       = "/console/api"
	SessionCookie = "easel_session"
	HeaderCSRF    = "X-CSRF-Token"
	ctxUser       = "easel.user"
	ctxSession    = "easel.session"
)

// Users signs users in and keeps their sessions (users.Service).
type Users interface {
	SignIn(ctx context.Context, email, pw, addr string) (users.Signed, error)
	Session(ctx context.Context, token string) (users.Session, *account.User, error)
	SignOut(ctx context.Context, token string) error
}

// Accounts is what the console does with accounts, their keys, credits
// and usage.
type Accounts interface {
	Get(ctx context.Context, id string) (*account.Account, error)
	Keys(ctx context.Context, accountID string) ([]*account.Key, error)
	NewKey(ctx context.Context, accountID string, spec account.KeySpec) (string, *account.Key, error)
	UpdateKey(ctx context.Context, accountID, keyOrPrefix string, u account.KeyUpdate) (*account.Key, error)
	RevokeKeyOf(ctx context.Context, accountID, keyOrPrefix string) (*account.Key, error)
	LedgerPage(ctx context.Context, id, before string, limit int64) ([]account.LedgerEntry, string, error)
	// The operator view.
	Page(ctx context.Context, cursor string, limit int) ([]*account.Account, string, error)
	SearchNames(ctx context.Context, q string, limit int) ([]*account.Account, error)
	SetLimits(ctx context.Context, id string, l account.LimitsUpdate) (*account.Account, error)
	SetStatus(ctx context.Context, id string, st account.Status) error
	AddCredits(ctx context.Context, id string, n int64, note string) (int64, error)
}

// Directory finds an account's users, and a user by email (a user not
// found: apperr.NotFound), for the operator view.
type Directory interface {
	UsersOf(ctx context.Context, accountID string) ([]*account.User, error)
	UserByEmail(ctx context.Context, email string) (*account.User, string, error)
}

// Secrets shows and rotates an account's webhook signing secret.
type Secrets interface {
	Secret(ctx context.Context, accountID string) (string, error)
	RotateSecret(ctx context.Context, accountID string) (string, time.Time, error)
}

// Upstreams reads the workers' upstream pool's state
// (upstream.Statuses).
type Upstreams func(ctx context.Context) ([]upstream.Status, error)

// UpstreamsFile reads the state of the workers' upstreams file
// (upstream.ReadFileState): nil without a pool.
type UpstreamsFile func(ctx context.Context) (*upstream.FileState, error)

// Tasks are the public API's task handlers (api.Handlers): the console
// serves them for the session's account, for its gallery and its
// playground.
type Tasks interface {
	Create(c echo.Context) error
	Query(c echo.Context) error
	List(c echo.Context) error
	Cancel(c echo.Context) error
	Webhooks(c echo.Context) error
	Stream(c echo.Context) error
	AccountWebhook(c echo.Context) error
	SetAccountWebhook(c echo.Context) error
	DeleteAccountWebhook(c echo.Context) error
	TestAccountWebhook(c echo.Context) error
	Redeliver(c echo.Context) error
	AccountDeliveries(c echo.Context) error
	AccountUsage(c echo.Context) error
	AccountUsageCSV(c echo.Context) error
	Upload(c echo.Context) error
}

// Deps enables the console.
type Deps struct {
	Users     Users
	Accounts  Accounts
	Directory Directory
	Secrets   Secrets
	Catalog   *catalog.Catalog
	Tasks     Tasks
	// Upstreams reads the upstream pool's state, for the operator view
	// (nil: none).
	Upstreams Upstreams
	// UpstreamsFile reads the upstreams file's state, for the same view
	// (nil: none).
	UpstreamsFile UpstreamsFile
	// Pages serves the console's page (web.NewPages with the public API's
	// image sources: the gallery shows results).
	Pages *web.Pages
	// SecureCookie marks the session cookie Secure (the gateway is
	// reached over TLS: EASEL_PUBLIC_URL is https). A request that came
	// over TLS gets it Secure anyway.
	SecureCookie bool
	// Origins are the origins besides the request's own host that may
	// write (the public URL's).
	Origins []string
	// KeyCacheTTL is how long a gateway trusts what it read of a key
	// (EASEL_AUTH_CACHE_TTL): a revoke's or an edit's bound on every
	// gateway, which the page says.
	KeyCacheTTL time.Duration
}

type console struct {
	Deps
	now func() time.Time
	// budget is a request's Redis budget (web.Config.RequestTimeout; 0:
	// none).
	budget time.Duration
	// page is the console's page, with the playground's form in it.
	page *template.Template
}

// Register adds the console to s: its page under Path, its API under
// Path/api.
func Register(s *web.Server, d Deps) {
	cs := &console{Deps: d, now: s.Now, budget: s.RequestTimeout,
		page: template.Must(api.PlaygroundTemplates().ParseFS(pageFiles, pageDir+"/"+pageIndex))}
	e := s.Echo
	web.Get(e, Path, cs.servePage)
	web.Get(e, Path+"/*", cs.servePage)

	g := e.Group(pathAPI, s.Deadline, cs.noStore, cs.sameOrigin)
	g.POST("/session", cs.signIn)
	in := g.Group("", cs.session, cs.csrf)
	web.Get(in, "/session", cs.whoami)
	in.DELETE("/session", cs.signOut)
	// The account's own routes: a disabled account's users may look, not
	// change anything (no keys minted for the day it is enabled again, no
	// secret rotated), its admin users included.
	own := in.Group("", cs.activeForChanges)
	web.Get(own, "/catalog", cs.catalog)
	web.Get(own, "/account", cs.account)
	web.Get(own, "/keys", cs.listKeys)
	own.POST("/keys", cs.createKey)
	own.PATCH("/keys/:prefix", cs.renameKey)
	own.POST("/keys/:prefix/revoke", cs.revokeKey)
	web.Get(own, "/ledger", cs.ledger)
	web.Get(own, "/usage", d.Tasks.AccountUsage)
	web.Get(own, "/usage.csv", d.Tasks.AccountUsageCSV)
	web.Get(own, "/webhook-secret", cs.webhookSecret)
	own.POST("/webhook-secret/rotate", cs.rotateWebhookSecret)
	// The public API's task routes, for the session's account: the
	// console's gallery and playground.
	query := s.Limit(ratelimit.Query)
	own.POST("/task/create", d.Tasks.Create, s.Limit(ratelimit.Create))
	web.Get(own, "/task/query", d.Tasks.Query, query)
	web.Get(own, "/task/stream", d.Tasks.Stream, query)
	web.Get(own, "/task/list", d.Tasks.List, query)
	own.POST("/task/cancel", d.Tasks.Cancel, query)
	web.Get(own, "/task/webhooks", d.Tasks.Webhooks, query)
	// The public API's uploads, for the playground's source images.
	own.POST("/uploads", d.Tasks.Upload, s.Limit(ratelimit.Create))
	// The account's default webhook endpoint and its deliveries: the
	// public API's handlers.
	web.Get(own, "/account/webhook", d.Tasks.AccountWebhook, query)
	own.PUT("/account/webhook", d.Tasks.SetAccountWebhook, query)
	own.DELETE("/account/webhook", d.Tasks.DeleteAccountWebhook, query)
	own.POST("/account/webhook/test", d.Tasks.TestAccountWebhook, query)
	own.POST("/account/webhook/redeliver", d.Tasks.Redeliver, query)
	web.Get(own, "/account/webhook/deliveries", d.Tasks.AccountDeliveries, query)
	// The operator view: admin users only.
	// Its changes are the admin API's own handlers.
	op := in.Group("/admin", cs.adminOnly)
	web.Get(op, "/accounts", cs.opAccounts)
	web.Get(op, "/accounts/:id", cs.opAccount)
	op.POST("/accounts/:id/credits", admin.AddCredits(d.Accounts))
	op.PATCH("/accounts/:id/limits", admin.SetLimits(d.Accounts, d.Catalog))
	op.POST("/accounts/:id/disable", admin.SetStatus(d.Accounts, account.Disabled))
	op.POST("/accounts/:id/enable", admin.SetStatus(d.Accounts, account.Active))
	op.PATCH("/accounts/:id/keys/:prefix", cs.opUpdateKey)
	op.POST("/accounts/:id/keys/:prefix/revoke", cs.opRevokeKey)
	web.Get(op, "/upstreams", cs.opUpstreams)
}

// opUpstreams lists the upstream pool's state ([] without a pool) and its
// file's (null without one).
func (cs *console) opUpstreams(c echo.Context) error {
	list := []upstream.Status{}
	if cs.Upstreams != nil {
		var err error
		if list, err = cs.Upstreams(c.Request().Context()); err != nil {
			return err
		}
	}
	var file *upstream.FileState
	if cs.UpstreamsFile != nil {
		var err error
		if file, err = cs.UpstreamsFile(c.Request().Context()); err != nil {
			return err
		}
	}
	return web.OK(c, map[string]any{"upstreams": list, "file": file})
}

// noStore keeps every console answer out of caches.
func (cs *console) noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "no-store")
		return next(c)
	}
}

func isWrite(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// sameOrigin refuses a write a browser sent from another origin: its
// Origin must be the gateway's own (the Host it was sent to, or a
// configured one), and a browser's Sec-Fetch-Site must not say
// cross-site. A client that is no browser sends neither, and still needs
// the session and its CSRF token.
func (cs *console) sameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !isWrite(r.Method) {
			return next(c)
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
			return apperr.New(apperr.Forbidden, "console writes are accepted from the console's own origin only")
		}
		if o := r.Header.Get(echo.HeaderOrigin); o != "" && !cs.ownOrigin(o, c.Scheme(), r.Host) {
			return apperr.New(apperr.Forbidden, "console writes are accepted from the console's own origin only")
		}
		return next(c)
	}
}

// ownOrigin: origin is exactly the scheme and host the request came to
// (behind a proxy, the scheme it forwarded), or a configured origin. A
// browser's Origin is scheme://host[:port] and nothing else, so anything
// more (a path, a user) is no origin of ours.
func (cs *console) ownOrigin(origin, scheme, host string) bool {
	if slices.ContainsFunc(cs.Origins, func(o string) bool { return o != "" && strings.EqualFold(o, origin) }) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	return strings.EqualFold(u.Scheme, scheme) && strings.EqualFold(u.Host, host)
}

// session finds the request's session (the cookie) and puts its user and
// account on the request, as web.Server.Authenticate does for a key: the
// task routes then serve the session's account.
func (cs *console) session(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ck, err := c.Cookie(SessionCookie)
		if err != nil {
			return users.ErrNoSession
		}
		ctx := c.Request().Context()
		ss, u, err := cs.Users.Session(ctx, ck.Value)
		if err != nil {
			return err
		}
		acct, err := cs.Accounts.Get(ctx, ss.AccountID)
		if err != nil {
			if apperr.CodeOf(err) == apperr.NotFound {
				return users.ErrNoSession
			}
			return err
		}
		logging.AddFields(ctx, zap.String("account_id", acct.ID), zap.String("user_id", u.ID))
		c.Set(ctxSession, ss)
		c.Set(ctxUser, u)
		// The session's rate-limit buckets: its user's own.
		web.SetAccount(c, acct, "console:"+u.ID)
		return next(c)
	}
}

// activeForChanges refuses a change to a disabled account.
func (cs *console) activeForChanges(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if isWrite(c.Request().Method) && web.AccountOf(c).Status != account.Active {
			return apperr.ErrAccountDisabled
		}
		return next(c)
	}
}

// csrf checks a write carries the session's CSRF token.
func (cs *console) csrf(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !isWrite(c.Request().Method) {
			return next(c)
		}
		ss := c.Get(ctxSession).(users.Session)
		sent := c.Request().Header.Get(HeaderCSRF)
		if sent == "" || subtle.ConstantTimeCompare([]byte(sent), []byte(ss.CSRF)) != 1 {
			return apperr.Errorf(apperr.Forbidden, "missing or wrong %s header: send the csrf_token of the session", HeaderCSRF)
		}
		return next(c)
	}
}

// adminOnly lets admin users through, and logs what they do.
func (cs *console) adminOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !userOf(c).Admin {
			return apperr.New(apperr.Forbidden, "the operator view is for admin users")
		}
		if isWrite(c.Request().Method) {
			logging.From(c.Request().Context()).Info("console operator request", zap.String("method", c.Request().Method),
				zap.String("route", c.Path()), zap.String("target_account", c.Param("id")))
		}
		return next(c)
	}
}

func userOf(c echo.Context) *account.User { return c.Get(ctxUser).(*account.User) }

// sessionData is the answer of a sign-in and of GET /session.
type sessionData struct {
	User struct {
		ID          string `json:"id"`
		Email       string `json:"email"`
		AccountID   string `json:"account_id"`
		AccountName string `json:"account_name"`
		Admin       bool   `json:"admin"`
	} `json:"user"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (cs *console) sessionReply(c echo.Context, u *account.User, ss users.Session, accountName string) error {
	var d sessionData
	d.User.ID, d.User.Email, d.User.AccountID, d.User.AccountName, d.User.Admin = u.ID, u.Email, u.AccountID, accountName, u.Admin
	d.CSRFToken, d.ExpiresAt = ss.CSRF, ss.Until.UTC()
	return web.OK(c, d)
}

func (cs *console) signIn(c echo.Context) error {
	var req admin.EmailPassword
	if err := req.Bind(c); err != nil {
		return err
	}
	ctx := c.Request().Context()
	// A cookie the client brought is not reused: its session ends, and
	// the sign-in makes a new id (no session fixation).
	if old, err := c.Cookie(SessionCookie); err == nil {
		_ = cs.Users.SignOut(ctx, old.Value)
	}
	// The sign-in bounds its own Redis calls and its wait for a hashing
	// slot (users.Config): the wait may outlast the request's budget.
	signed, err := cs.Users.SignIn(web.BaseContext(c), req.Email, req.Password, c.RealIP())
	var throttled *users.ThrottledError
	if errors.As(err, &throttled) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(max(web.CeilSeconds(throttled.RetryAfter), 1)))
		return apperr.New(apperr.LimitExceeded, throttled.Error())
	}
	if err != nil {
		return err
	}
	logging.From(ctx).Info("console sign-in", zap.String("user_id", signed.User.ID), zap.String("account_id", signed.User.AccountID))
	name := ""
	if cs.budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(web.BaseContext(c), cs.budget)
		defer cancel()
	}
	if a, err := cs.Accounts.Get(ctx, signed.User.AccountID); err == nil {
		name = a.Name
	}
	cs.setCookie(c, signed.Token, signed.Session.Until)
	return cs.sessionReply(c, signed.User, signed.Session, name)
}

// setCookie sets the session cookie: HttpOnly, SameSite=Lax, scoped to
// the console (a result download never sees it), Secure over TLS.
func (cs *console) setCookie(c echo.Context, value string, until time.Time) {
	ck := &http.Cookie{Name: SessionCookie, Value: value, Path: Path, HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: cs.SecureCookie || c.Request().TLS != nil}
	if until.IsZero() {
		ck.MaxAge = -1
	} else {
		ck.Expires = until
	}
	c.SetCookie(ck)
}

func (cs *console) whoami(c echo.Context) error {
	return cs.sessionReply(c, userOf(c), c.Get(ctxSession).(users.Session), web.AccountOf(c).Name)
}

func (cs *console) signOut(c echo.Context) error {
	ck, _ := c.Cookie(SessionCookie)
	if err := cs.Users.SignOut(c.Request().Context(), ck.Value); err != nil {
		return err
	}
	cs.setCookie(c, "", time.Time{})
	return web.OK(c, nil)
}

type catalogModel struct {
	ID        string       `json:"id"`
	Tier      catalog.Tier `json:"tier"`
	ImageSize bool         `json:"image_size"`
}

func (cs *console) catalog(c echo.Context) error {
	out := struct {
		Models       []catalogModel `json:"models"`
		AspectRatios []string       `json:"aspect_ratios"`
		ImageSizes   []string       `json:"image_sizes"`
		DefaultRatio string         `json:"default_ratio"`
	}{Models: []catalogModel{}, AspectRatios: catalog.AspectRatios, ImageSizes: catalog.ImageSizes, DefaultRatio: catalog.DefaultAspectRatio}
	for _, m := range cs.Catalog.Models() {
		out.Models = append(out.Models, catalogModel{ID: m.ID, Tier: m.Tier, ImageSize: m.SupportsImageSize()})
	}
	return web.OK(c, out)
}

func (cs *console) account(c echo.Context) error { return web.OK(c, web.AccountOf(c)) }

// keyView is a key as listed: with its state now.
type keyView struct {
	*account.Key
	Status string `json:"status"`
}

func (cs *console) view(k *account.Key) keyView { return keyView{Key: k, Status: k.Status(cs.now())} }

func (cs *console) listKeys(c echo.Context) error {
	keys, err := cs.Accounts.Keys(c.Request().Context(), web.AccountOf(c).ID)
	if err != nil {
		return err
	}
	out := make([]keyView, len(keys))
	for i, k := range keys {
		out[i] = cs.view(k)
	}
	return web.OK(c, map[string]any{"keys": out})
}

func (cs *console) createKey(c echo.Context) error {
	var req admin.KeyRequest
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	if req.Name == nil || strings.TrimSpace(*req.Name) == "" {
		return apperr.New(apperr.Invalid, "name is required: what the key is for")
	}
	spec, err := req.Spec(cs.Catalog)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	key, k, err := cs.Accounts.NewKey(ctx, web.AccountOf(c).ID, spec)
	if err != nil {
		return err
	}
	logging.From(ctx).Info("console: API key created", zap.String("key_prefix", k.Prefix))
	return web.OK(c, map[string]any{"key": key, "info": cs.view(k)})
}

func (cs *console) renameKey(c echo.Context) error {
	var req struct {
		Name *string `json:"name"`
	}
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	if req.Name == nil {
		return apperr.New(apperr.Invalid, "name is required")
	}
	k, err := cs.Accounts.UpdateKey(c.Request().Context(), web.AccountOf(c).ID, c.Param("prefix"), account.KeyUpdate{Name: req.Name})
	if err != nil {
		return err
	}
	return web.OK(c, cs.view(k))
}

func (cs *console) revokeKey(c echo.Context) error {
	ctx := c.Request().Context()
	k, err := cs.Accounts.RevokeKeyOf(ctx, web.AccountOf(c).ID, c.Param("prefix"))
	if err != nil {
		return err
	}
	logging.From(ctx).Info("console: API key revoked", zap.String("key_prefix", k.Prefix))
	return web.OK(c, cs.view(k))
}

func (cs *console) ledger(c echo.Context) error {
	limit, err := web.LimitParam(c, 50, 500)
	if err != nil {
		return err
	}
	entries, next, err := cs.Accounts.LedgerPage(c.Request().Context(), web.AccountOf(c).ID, c.QueryParam("before"), limit)
	if err != nil {
		return err
	}
	return web.OK(c, map[string]any{"entries": entries, "next": next})
}

func (cs *console) webhookSecret(c echo.Context) error {
	id := web.AccountOf(c).ID
	secret, err := cs.Secrets.Secret(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return web.OK(c, map[string]string{"secret": secret})
}

func (cs *console) rotateWebhookSecret(c echo.Context) error {
	secret, until, err := cs.Secrets.RotateSecret(c.Request().Context(), web.AccountOf(c).ID)
	if err != nil {
		return err
	}
	return web.OK(c, map[string]any{"secret": secret, "previous_valid_until": until.UTC()})
}

// opAccounts lists accounts, newest first and paged, or finds them: q is
// an account id, a user's email or the start of an account name.
func (cs *console) opAccounts(c echo.Context) error {
	ctx := c.Request().Context()
	q := strings.TrimSpace(c.QueryParam("q"))
	var (
		list []*account.Account
		next string
		err  error
	)
	switch {
	case q == "":
		list, next, err = cs.Accounts.Page(ctx, c.QueryParam("cursor"), 50)
	case strings.HasPrefix(q, "acct_"):
		var a *account.Account
		if a, err = cs.Accounts.Get(ctx, q); err == nil {
			list = []*account.Account{a}
		} else if apperr.CodeOf(err) == apperr.NotFound {
			err = nil
		}
	case strings.Contains(q, "@"):
		u, _, uerr := cs.Directory.UserByEmail(ctx, q)
		if uerr == nil {
			var a *account.Account
			if a, err = cs.Accounts.Get(ctx, u.AccountID); err == nil {
				list = []*account.Account{a}
			}
		} else if apperr.CodeOf(uerr) != apperr.NotFound {
			err = uerr
		}
	default:
		list, err = cs.Accounts.SearchNames(ctx, q, 50)
	}
	if err != nil {
		return err
	}
	if list == nil {
		list = []*account.Account{}
	}
	return web.OK(c, map[string]any{"accounts": list, "next": next})
}

// opUpdateKey renames a key of an account or changes its limits (the
// admin API's PATCH /admin/v1/keys/{prefix}, within the account).
func (cs *console) opUpdateKey(c echo.Context) error {
	var req admin.KeyRequest
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	u, err := req.Update(cs.Catalog)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	k, err := cs.Accounts.UpdateKey(ctx, c.Param("id"), c.Param("prefix"), u)
	if err != nil {
		return err
	}
	logging.From(ctx).Info("console operator: API key changed", zap.String("key_prefix", k.Prefix))
	return web.OK(c, cs.view(k))
}

// opRevokeKey revokes a key of an account.
func (cs *console) opRevokeKey(c echo.Context) error {
	ctx := c.Request().Context()
	k, err := cs.Accounts.RevokeKeyOf(ctx, c.Param("id"), c.Param("prefix"))
	if err != nil {
		return err
	}
	logging.From(ctx).Info("console operator: API key revoked", zap.String("key_prefix", k.Prefix))
	return web.OK(c, cs.view(k))
}

func (cs *console) opAccount(c echo.Context) error {
	ctx := c.Request().Context()
	a, err := cs.Accounts.Get(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	keys, err := cs.Accounts.Keys(ctx, a.ID)
	if err != nil {
		return err
	}
	views := make([]keyView, len(keys))
	for i, k := range keys {
		views[i] = cs.view(k)
	}
	us, err := cs.Directory.UsersOf(ctx, a.ID)
	if err != nil {
		return err
	}
	return web.OK(c, map[string]any{"account": a, "keys": views, "users": us})
}

// pageFiles are the console page's files: plain HTML, CSS and
// JavaScript, with no build step and nothing loaded from elsewhere. The
// page's theme and its playground section are the /playground page's
// (api.PlaygroundTemplates, api.PlaygroundAsset).
//
//go:embed page
var pageFiles embed.FS

// pageDir is the directory of pageFiles holding the page, pageIndex the
// page itself, an html/template.
const (
	pageDir   = "page"
	pageIndex = "index.html"
)

// servePage serves GET /console (a redirect to /console/), the page at
// /console/ and its assets beside it. The page asks the API whether a
// session exists and shows the sign-in form if not.
func (cs *console) servePage(c echo.Context) error {
	if c.Path() == Path {
		return c.Redirect(http.StatusMovedPermanently, Path+"/")
	}
	name := c.Param("*")
	if name != "" && name != pageIndex {
		return cs.Pages.Asset(c, pageFiles, pageDir, name)
	}
	versions, err := web.AssetVersions(pageFiles, pageDir)
	if err != nil {
		return err
	}
	return cs.Pages.Page(c, cs.page, pageIndex, struct {
		Versions map[string]string
		// The playground's: the page's theme, and the playground
		// section's script and form.
		Theme, Script string
		Form          api.PlaygroundForm
		// KeyCacheMS is Deps.KeyCacheTTL in ms, for the page's words on
		// how soon a revoke holds everywhere.
		KeyCacheMS int64
	}{versions, api.PlaygroundAsset(api.PlaygroundTheme), api.PlaygroundAsset(api.PlaygroundScript), api.NewPlaygroundForm(cs.Catalog, "pg-"),
		cs.KeyCacheTTL.Milliseconds()})
}
