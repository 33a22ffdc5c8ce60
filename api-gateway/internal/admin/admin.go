// Package admin is the operators' API under /admin/v1: accounts, their
// limits, credits, keys and webhook secrets, console users and the
// upstream pool's state, behind the admin token. The console's operator
// view makes its changes with this package's handlers.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/upstream"
)

// Accounts is what the admin API does with accounts, their keys and
// their credits.
type Accounts interface {
	Create(ctx context.Context, spec account.Spec) (*account.Account, error)
	List(ctx context.Context) ([]*account.Account, error)
	Get(ctx context.Context, id string) (*account.Account, error)
	SetLimits(ctx context.Context, id string, l account.LimitsUpdate) (*account.Account, error)
	SetStatus(ctx context.Context, id string, st account.Status) error
	AddCredits(ctx context.Context, id string, n int64, note string) (int64, error)
	Ledger(ctx context.Context, id string, limit int64) ([]account.LedgerEntry, error)
	NewKey(ctx context.Context, accountID string, spec account.KeySpec) (string, *account.Key, error)
	UpdateKey(ctx context.Context, accountID, keyOrPrefix string, u account.KeyUpdate) (*account.Key, error)
	Keys(ctx context.Context, accountID string) ([]*account.Key, error)
	RevokeKey(ctx context.Context, keyOrPrefix string) (*account.Key, error)
}

// Secrets shows and rotates accounts' webhook signing secrets.
type Secrets interface {
	Secret(ctx context.Context, accountID string) (string, error)
	RotateSecret(ctx context.Context, accountID string) (string, time.Time, error)
}

// Users makes and changes console users (users.Service).
type Users interface {
	Create(ctx context.Context, accountID, email, pw string, admin bool) (*account.User, error)
	ResetPassword(ctx context.Context, email, pw string) (*account.User, error)
	SetStatus(ctx context.Context, email string, st account.Status) (*account.User, error)
	SetAdmin(ctx context.Context, email string, admin bool) (*account.User, error)
}

// Upstreams reads the workers' upstream pool's state
// (upstream.Statuses).
type Upstreams func(ctx context.Context) ([]upstream.Status, error)

// UpstreamsFile reads the state of the workers' upstreams file
// (upstream.ReadFileState): nil without a pool.
type UpstreamsFile func(ctx context.Context) (*upstream.FileState, error)

// Deps enables the admin API.
type Deps struct {
	// Token is the Bearer token every admin request must carry.
	Token    string
	Accounts Accounts
	Secrets  Secrets
	Catalog  *catalog.Catalog
	// Users, when not nil, adds the console users' routes.
	Users Users
	// Upstreams, when not nil, adds GET /upstreams.
	Upstreams Upstreams
	// UpstreamsFile, when not nil, adds GET /upstreams/file.
	UpstreamsFile UpstreamsFile
}

// Path is where the admin API's routes are.
const Path = "/admin/v1"

type admin struct {
	Deps
	s        *web.Server // its guard of failed credentials
	tokenSum [32]byte
}

// Register adds the admin API to s, under Path.
func Register(s *web.Server, d Deps) {
	a := &admin{Deps: d, s: s, tokenSum: sha256.Sum256([]byte(d.Token))}
	g := s.Echo.Group(Path, s.Deadline, a.guard)
	g.POST("/accounts", a.createAccount)
	web.Get(g, "/accounts", a.listAccounts)
	web.Get(g, "/accounts/:id", a.showAccount)
	g.PATCH("/accounts/:id/limits", SetLimits(d.Accounts, d.Catalog))
	g.POST("/accounts/:id/disable", SetStatus(d.Accounts, account.Disabled))
	g.POST("/accounts/:id/enable", SetStatus(d.Accounts, account.Active))
	g.POST("/accounts/:id/credits", AddCredits(d.Accounts))
	web.Get(g, "/accounts/:id/ledger", a.ledger)
	g.POST("/accounts/:id/keys", a.createKey)
	web.Get(g, "/accounts/:id/keys", a.listKeys)
	web.Get(g, "/accounts/:id/webhook-secret", a.webhookSecret)
	g.POST("/accounts/:id/webhook-secret/rotate", a.rotateWebhookSecret)
	g.POST("/keys/revoke", a.revokeKey)
	g.PATCH("/keys/:prefix", a.updateKey)
	if d.Upstreams != nil {
		web.Get(g, "/upstreams", a.upstreams)
	}
	if d.UpstreamsFile != nil {
		web.Get(g, "/upstreams/file", a.upstreamsFile)
	}
	if d.Users != nil {
		g.POST("/users", a.createUser)
		g.POST("/users/reset-password", a.resetPassword)
		g.POST("/users/disable", a.setUserStatus(account.Disabled))
		g.POST("/users/enable", a.setUserStatus(account.Active))
		g.POST("/users/admin", a.setUserAdmin)
	}
}

// guard checks the admin token, comparing hashes in constant time, under
// the same budgets of failures as API keys (auth.Guard): wrong tokens from
// an address, a network or everyone are refused, 429, past them.
func (a *admin) guard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := a.s.Guarded(c, "admin token", func() error {
			scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
			if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) != 1 {
				return apperr.New(apperr.Unauthenticated, "admin API: missing or invalid admin token (Authorization: Bearer <EASEL_ADMIN_TOKEN>)")
			}
			return nil
		})
		if err != nil {
			return err
		}
		logging.From(c.Request().Context()).Info("admin request", zap.String("method", c.Request().Method), zap.String("route", c.Path()))
		return next(c)
	}
}

type accountRequest struct {
	Name           string   `json:"name"`
	Credits        int64    `json:"credits"`
	RateLimit      *int     `json:"rate_limit"`
	QueryRateLimit *int     `json:"query_rate_limit"`
	MaxInflight    *int     `json:"max_inflight"`
	Weight         *int     `json:"weight"`
	Models         []string `json:"models"`
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func (a *admin) createAccount(c echo.Context) error {
	var req accountRequest
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	tiers, err := ParseTiers(a.Catalog, req.Models)
	if err != nil {
		return err
	}
	acct, err := a.Accounts.Create(c.Request().Context(), account.Spec{
		Name: req.Name, Credits: req.Credits, Models: tiers,
		RateLimit: deref(req.RateLimit), QueryRateLimit: deref(req.QueryRateLimit), MaxInflight: deref(req.MaxInflight),
		Weight: deref(req.Weight),
	})
	if err != nil {
		return err
	}
	return web.OK(c, acct)
}

func (a *admin) listAccounts(c echo.Context) error {
	list, err := a.Accounts.List(c.Request().Context())
	if err != nil {
		return err
	}
	return web.OK(c, list)
}

func (a *admin) showAccount(c echo.Context) error {
	acct, err := a.Accounts.Get(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return web.OK(c, acct)
}

// limitsRequest is a change of an account's limits, as the admin API
// and the console's operator view take it.
type limitsRequest struct {
	RateLimit      *int      `json:"rate_limit"`
	QueryRateLimit *int      `json:"query_rate_limit"`
	MaxInflight    *int      `json:"max_inflight"`
	Weight         *int      `json:"weight"`
	Models         *[]string `json:"models"`
}

func (r limitsRequest) update(cat *catalog.Catalog) (account.LimitsUpdate, error) {
	l := account.LimitsUpdate{RateLimit: r.RateLimit, QueryRateLimit: r.QueryRateLimit, MaxInflight: r.MaxInflight, Weight: r.Weight}
	if r.Models != nil {
		tiers, err := ParseTiers(cat, *r.Models)
		if err != nil {
			return l, err
		}
		l.Models = &tiers
	}
	return l, nil
}

// The account changes the admin API and the console's operator view
// share: each takes the small interface it uses.

type limitSetter interface {
	SetLimits(ctx context.Context, id string, l account.LimitsUpdate) (*account.Account, error)
}

// SetLimits handles PATCH .../accounts/:id/limits.
func SetLimits(accts limitSetter, cat *catalog.Catalog) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req limitsRequest
		if err := web.Bind(c, &req); err != nil {
			return err
		}
		l, err := req.update(cat)
		if err != nil {
			return err
		}
		acct, err := accts.SetLimits(c.Request().Context(), c.Param("id"), l)
		if err != nil {
			return err
		}
		return web.OK(c, acct)
	}
}

type statusSetter interface {
	SetStatus(ctx context.Context, id string, st account.Status) error
	Get(ctx context.Context, id string) (*account.Account, error)
}

// SetStatus handles POST .../accounts/:id/disable and /enable.
func SetStatus(accts statusSetter, st account.Status) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		if err := accts.SetStatus(ctx, c.Param("id"), st); err != nil {
			return err
		}
		acct, err := accts.Get(ctx, c.Param("id"))
		if err != nil {
			return err
		}
		return web.OK(c, acct)
	}
}

type crediter interface {
	AddCredits(ctx context.Context, id string, n int64, note string) (int64, error)
}

// AddCredits handles POST .../accounts/:id/credits.
func AddCredits(accts crediter) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req struct {
			Amount *int64 `json:"amount"`
			Note   string `json:"note"`
		}
		if err := web.Bind(c, &req); err != nil {
			return err
		}
		if req.Amount == nil {
			return apperr.New(apperr.Invalid, "amount is required (negative for a correction)")
		}
		bal, err := accts.AddCredits(c.Request().Context(), c.Param("id"), *req.Amount, req.Note)
		if err != nil {
			return err
		}
		return web.OK(c, map[string]int64{"balance": bal})
	}
}

func (a *admin) ledger(c echo.Context) error {
	limit, err := web.LimitParam(c, 100, 10000)
	if err != nil {
		return err
	}
	entries, err := a.Accounts.Ledger(c.Request().Context(), c.Param("id"), limit)
	if err != nil {
		return err
	}
	return web.OK(c, entries)
}

// createKey makes a key; the body (optional) gives its name and limits,
// as the console's.
func (a *admin) createKey(c echo.Context) error {
	var req KeyRequest
	if c.Request().ContentLength != 0 {
		if err := web.Bind(c, &req); err != nil {
			return err
		}
	}
	spec, err := req.Spec(a.Catalog)
	if err != nil {
		return err
	}
	key, k, err := a.Accounts.NewKey(c.Request().Context(), c.Param("id"), spec)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	// The key, shown this once, beside what is kept of it.
	return web.OK(c, newKeyReply{Secret: key, Key: k})
}

type newKeyReply struct {
	Secret string `json:"key"`
	*account.Key
}

// updateKey renames a key or changes its limits.
func (a *admin) updateKey(c echo.Context) error {
	var req KeyRequest
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	u, err := req.Update(a.Catalog)
	if err != nil {
		return err
	}
	k, err := a.Accounts.UpdateKey(c.Request().Context(), "", c.Param("prefix"), u)
	if err != nil {
		return err
	}
	return web.OK(c, k)
}

// upstreams lists the workers' upstream pool with each upstream's state.
func (a *admin) upstreams(c echo.Context) error {
	list, err := a.Upstreams(c.Request().Context())
	if err != nil {
		return err
	}
	return web.OK(c, list)
}

// upstreamsFile tells the upstreams file's state: its path, when the pool
// was loaded from it, the last change refused and why (null: no pool).
func (a *admin) upstreamsFile(c echo.Context) error {
	f, err := a.UpstreamsFile(c.Request().Context())
	if err != nil {
		return err
	}
	return web.OK(c, f)
}

type userRequest struct {
	AccountID string `json:"account_id"`
	Email     string `json:"email"`
	Password  string `json:"password"`
	Admin     bool   `json:"admin"`
}

func (a *admin) createUser(c echo.Context) error {
	var req userRequest
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	if req.AccountID == "" || req.Email == "" || req.Password == "" {
		return apperr.New(apperr.Invalid, "account_id, email and password are required")
	}
	u, err := a.Users.Create(c.Request().Context(), req.AccountID, req.Email, req.Password, req.Admin)
	if err != nil {
		return err
	}
	return web.OK(c, u)
}

// EmailPassword is a body of an email and a password: a console
// sign-in, a password reset.
type EmailPassword struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// Bind reads r from the request's body: both are required.
func (r *EmailPassword) Bind(c echo.Context) error {
	if err := web.Bind(c, r); err != nil {
		return err
	}
	if r.Email == "" || r.Password == "" {
		return apperr.New(apperr.Invalid, "email and password are required")
	}
	return nil
}

func (a *admin) resetPassword(c echo.Context) error {
	var req EmailPassword
	if err := req.Bind(c); err != nil {
		return err
	}
	u, err := a.Users.ResetPassword(c.Request().Context(), req.Email, req.Password)
	if err != nil {
		return err
	}
	return web.OK(c, u)
}

func (a *admin) setUserStatus(st account.Status) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req struct {
			Email string `json:"email"`
		}
		if err := web.Bind(c, &req); err != nil {
			return err
		}
		u, err := a.Users.SetStatus(c.Request().Context(), req.Email, st)
		if err != nil {
			return err
		}
		return web.OK(c, u)
	}
}

func (a *admin) setUserAdmin(c echo.Context) error {
	var req struct {
		Email string `json:"email"`
		Admin *bool  `json:"admin"`
	}
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	if req.Admin == nil {
		return apperr.New(apperr.Invalid, "admin (true or false) is required")
	}
	u, err := a.Users.SetAdmin(c.Request().Context(), req.Email, *req.Admin)
	if err != nil {
		return err
	}
	return web.OK(c, u)
}

func (a *admin) listKeys(c echo.Context) error {
	keys, err := a.Accounts.Keys(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return web.OK(c, keys)
}

func (a *admin) revokeKey(c echo.Context) error {
	var req struct {
		Key    string `json:"key"`
		Prefix string `json:"prefix"`
	}
	if err := web.Bind(c, &req); err != nil {
		return err
	}
	target := req.Key
	if target == "" {
		target = req.Prefix
	}
	if target == "" || (req.Key != "" && req.Prefix != "") {
		return apperr.New(apperr.Invalid, "give either key or prefix")
	}
	k, err := a.Accounts.RevokeKey(c.Request().Context(), target)
	if err != nil {
		return err
	}
	return web.OK(c, k)
}

type webhookSecretReply struct {
	AccountID string `json:"account_id"`
	Secret    string `json:"secret"`
	// PreviousValidUntil (a rotation only) is when the secret it replaced
	// stops signing deliveries, Unix ms.
	PreviousValidUntil *int64 `json:"previous_valid_until,omitempty"`
}

// webhookSecret shows an account's webhook signing secret, made on first
// read.
func (a *admin) webhookSecret(c echo.Context) error {
	id := c.Param("id")
	secret, err := a.Secrets.Secret(c.Request().Context(), id)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return web.OK(c, webhookSecretReply{AccountID: id, Secret: secret})
}

// rotateWebhookSecret gives an account a new webhook signing secret; the
// old one signs beside it for another 24 hours.
func (a *admin) rotateWebhookSecret(c echo.Context) error {
	id := c.Param("id")
	secret, until, err := a.Secrets.RotateSecret(c.Request().Context(), id)
	if err != nil {
		return err
	}
	ms := until.UnixMilli()
	c.Response().Header().Set("Cache-Control", "no-store")
	return web.OK(c, webhookSecretReply{AccountID: id, Secret: secret, PreviousValidUntil: &ms})
}

// KeyRequest is a key's name and limits as the admin API and the console
// take them.
type KeyRequest struct {
	Name       *string   `json:"name"`
	Models     *[]string `json:"models"`
	AllowedIPs *[]string `json:"allowed_ips"`
	// ExpiresAt: RFC 3339; "" (an update) removes the expiry.
	ExpiresAt  *string `json:"expires_at"`
	SpendLimit *int64  `json:"spend_limit"`
}

// Update reads r as a change of a key (nil fields: unchanged).
func (r KeyRequest) Update(cat *catalog.Catalog) (account.KeyUpdate, error) {
	u := account.KeyUpdate{Name: r.Name, SpendLimit: r.SpendLimit}
	if r.Models != nil {
		tiers, err := ParseTiers(cat, *r.Models)
		if err != nil {
			return u, err
		}
		u.Models = &tiers
	}
	if r.AllowedIPs != nil {
		ips, err := account.ParseAllowedIPs(*r.AllowedIPs)
		if err != nil {
			return u, err
		}
		u.AllowedIPs = &ips
	}
	if r.ExpiresAt != nil {
		var t time.Time
		if *r.ExpiresAt != "" {
			var err error
			if t, err = time.Parse(time.RFC3339, *r.ExpiresAt); err != nil {
				return u, apperr.New(apperr.Invalid, "expires_at must be an RFC 3339 time, like 2027-01-31T00:00:00Z")
			}
		}
		u.ExpiresAt = &t
	}
	return u, nil
}

// Spec reads r as a new key.
func (r KeyRequest) Spec(cat *catalog.Catalog) (account.KeySpec, error) {
	u, err := r.Update(cat)
	return u.Spec(), err
}

// ParseTiers reads models given as tiers or model ids.
func ParseTiers(cat *catalog.Catalog, models []string) ([]catalog.Tier, error) {
	out := make([]catalog.Tier, 0, len(models))
	for _, m := range models {
		t, ok := cat.ParseTier(m)
		if !ok {
			return nil, apperr.Errorf(apperr.Invalid, "unknown model %q: use standard, pro or a model id (%s)", web.ClipID(m), cat.IDs())
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}
