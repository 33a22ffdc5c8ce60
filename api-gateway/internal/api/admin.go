package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/logging"
)

// AdminAccounts is what the admin API does with accounts, their keys and
// their credits.
type AdminAccounts interface {
	Create(ctx context.Context, spec account.Spec) (*account.Account, error)
	List(ctx context.Context) ([]*account.Account, error)
	Get(ctx context.Context, id string) (*account.Account, error)
	SetLimits(ctx context.Context, id string, l account.LimitsUpdate) (*account.Account, error)
	SetStatus(ctx context.Context, id string, st account.Status) error
	AddCredits(ctx context.Context, id string, n int64, note string) (int64, error)
	Ledger(ctx context.Context, id string, limit int64) ([]account.LedgerEntry, error)
	CreateKey(ctx context.Context, accountID string) (string, *account.Key, error)
	Keys(ctx context.Context, accountID string) ([]*account.Key, error)
	RevokeKey(ctx context.Context, keyOrPrefix string) (*account.Key, error)
}

// AdminSecrets shows and rotates accounts' webhook signing secrets.
type AdminSecrets interface {
	Secret(ctx context.Context, accountID string) (string, error)
	RotateSecret(ctx context.Context, accountID string) (string, time.Time, error)
}

// AdminDeps enables the admin API.
type AdminDeps struct {
	// Token is the Bearer token every admin request must carry.
	Token    string
	Accounts AdminAccounts
	Secrets  AdminSecrets
	Catalog  *catalog.Catalog
}

type admin struct {
	AdminDeps
	h        *handlers // the API's guard of failed credentials, its metrics
	tokenSum [32]byte
}

func registerAdmin(g *echo.Group, h *handlers, d *AdminDeps) {
	a := &admin{AdminDeps: *d, h: h, tokenSum: sha256.Sum256([]byte(d.Token))}
	g.Use(a.guard)
	g.POST("/accounts", a.createAccount)
	get(g, "/accounts", a.listAccounts)
	get(g, "/accounts/:id", a.showAccount)
	g.PATCH("/accounts/:id/limits", a.setLimits)
	g.POST("/accounts/:id/disable", a.setStatus(account.Disabled))
	g.POST("/accounts/:id/enable", a.setStatus(account.Active))
	g.POST("/accounts/:id/credits", a.addCredits)
	get(g, "/accounts/:id/ledger", a.ledger)
	g.POST("/accounts/:id/keys", a.createKey)
	get(g, "/accounts/:id/keys", a.listKeys)
	get(g, "/accounts/:id/webhook-secret", a.webhookSecret)
	g.POST("/accounts/:id/webhook-secret/rotate", a.rotateWebhookSecret)
	g.POST("/keys/revoke", a.revokeKey)
}

// guard checks the admin token, comparing hashes in constant time, under
// the same budgets of failures as API keys (auth.Guard): wrong tokens from
// an address, a network or everyone are refused, 429, past them.
func (a *admin) guard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := a.h.guarded(c, "admin token", func() error {
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

func ok(c echo.Context, data any) error {
	return c.JSON(http.StatusOK, envelope{Code: http.StatusOK, Msg: "success", Data: data})
}

// bind decodes a JSON body strictly: unknown fields are refused, since an
// operator's typo should not silently do nothing.
func bind(c echo.Context, v any) error {
	body, err := jsonBody(c)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return apperr.Errorf(apperr.Invalid, "%s has the wrong type", te.Field)
		case errors.Is(err, io.EOF):
			return apperr.New(apperr.Invalid, "request body is empty: send a JSON object")
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return apperr.Errorf(apperr.Invalid, "%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return apperr.New(apperr.Invalid, "request body is not valid JSON")
	}
	return nil
}

func (a *admin) tiers(models []string) ([]catalog.Tier, error) {
	out := make([]catalog.Tier, 0, len(models))
	for _, m := range models {
		t, ok := a.Catalog.ParseTier(m)
		if !ok {
			return nil, apperr.Errorf(apperr.Invalid, "unknown model %q: use standard, pro or a model id (%s)", m, a.Catalog.IDs())
		}
		out = append(out, t)
	}
	return out, nil
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
	if err := bind(c, &req); err != nil {
		return err
	}
	tiers, err := a.tiers(req.Models)
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
	return ok(c, acct)
}

func (a *admin) listAccounts(c echo.Context) error {
	list, err := a.Accounts.List(c.Request().Context())
	if err != nil {
		return err
	}
	return ok(c, list)
}

func (a *admin) showAccount(c echo.Context) error {
	acct, err := a.Accounts.Get(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return ok(c, acct)
}

func (a *admin) setLimits(c echo.Context) error {
	var req struct {
		RateLimit      *int      `json:"rate_limit"`
		QueryRateLimit *int      `json:"query_rate_limit"`
		MaxInflight    *int      `json:"max_inflight"`
		Weight         *int      `json:"weight"`
		Models         *[]string `json:"models"`
	}
	if err := bind(c, &req); err != nil {
		return err
	}
	l := account.LimitsUpdate{RateLimit: req.RateLimit, QueryRateLimit: req.QueryRateLimit, MaxInflight: req.MaxInflight, Weight: req.Weight}
	if req.Models != nil {
		tiers, err := a.tiers(*req.Models)
		if err != nil {
			return err
		}
		l.Models = &tiers
	}
	acct, err := a.Accounts.SetLimits(c.Request().Context(), c.Param("id"), l)
	if err != nil {
		return err
	}
	return ok(c, acct)
}

func (a *admin) setStatus(st account.Status) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		if err := a.Accounts.SetStatus(ctx, c.Param("id"), st); err != nil {
			return err
		}
		acct, err := a.Accounts.Get(ctx, c.Param("id"))
		if err != nil {
			return err
		}
		return ok(c, acct)
	}
}

func (a *admin) addCredits(c echo.Context) error {
	var req struct {
		Amount *int64 `json:"amount"`
		Note   string `json:"note"`
	}
	if err := bind(c, &req); err != nil {
		return err
	}
	if req.Amount == nil {
		return apperr.New(apperr.Invalid, "amount is required (negative for a correction)")
	}
	bal, err := a.Accounts.AddCredits(c.Request().Context(), c.Param("id"), *req.Amount, req.Note)
	if err != nil {
		return err
	}
	return ok(c, map[string]int64{"balance": bal})
}

func (a *admin) ledger(c echo.Context) error {
	limit := int64(100)
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > 10000 {
			return apperr.New(apperr.Invalid, "limit must be 1 to 10000")
		}
		limit = n
	}
	entries, err := a.Accounts.Ledger(c.Request().Context(), c.Param("id"), limit)
	if err != nil {
		return err
	}
	return ok(c, entries)
}

func (a *admin) createKey(c echo.Context) error {
	key, k, err := a.Accounts.CreateKey(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return ok(c, map[string]any{"key": key, "prefix": k.Prefix, "account_id": k.AccountID, "created_at": k.CreatedAt})
}

func (a *admin) listKeys(c echo.Context) error {
	keys, err := a.Accounts.Keys(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return ok(c, keys)
}

func (a *admin) revokeKey(c echo.Context) error {
	var req struct {
		Key    string `json:"key"`
		Prefix string `json:"prefix"`
	}
	if err := bind(c, &req); err != nil {
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
	return ok(c, k)
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
	return ok(c, webhookSecretReply{AccountID: id, Secret: secret})
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
	return ok(c, webhookSecretReply{AccountID: id, Secret: secret, PreviousValidUntil: &ms})
}
