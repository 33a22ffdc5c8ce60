package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/api-gateway/internal/gatewaytest"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/pkg/webhook"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

const (
	pro    = gatewaytest.Pro
	okBody = gatewaytest.CreateBody
)

// newEnv is the gateway with the admin API on a private Redis, its
// dependencies changed by edit (nil: none) before it is built.
func newEnv(t *testing.T, edit func(*gatewaytest.Env, *gatewaytest.Deps)) *gatewaytest.Env {
	t.Helper()
	return gatewaytest.New(t, redistest.Start(t).Client(t), nil, zap.NewNop(), store.Options{}, edit)
}

func admin(e *gatewaytest.Env, method, path, token, body string) gatewaytest.Reply {
	e.T.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + token}
	if body != "" {
		hdr["Content-Type"] = "application/json"
	}
	return e.Do(method, "/admin/v1"+path, hdr, body)
}

func data(t *testing.T, r gatewaytest.Reply) json.RawMessage {
	t.Helper()
	var env struct {
		Code int             `json:"code"`
		Msg  string          `json:"msg"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &env); err != nil || r.Status != 200 || env.Code != 200 || env.Msg != "success" {
		t.Fatalf("admin reply %d %s", r.Status, r.Body)
	}
	return env.Data
}

func TestAdminAPI(t *testing.T) {
	e := newEnv(t, nil)
	gatewaytest.AssertEnvelope(t, admin(e, "GET", "/accounts", "", ""), 401, "admin token")
	gatewaytest.AssertEnvelope(t, admin(e, "GET", "/accounts", "wrong", ""), 401, "admin token")
	gatewaytest.AssertEnvelope(t, admin(e, "GET", "/accounts", e.KeyA, ""), 401, "admin token") // an API key is not an admin token

	var acct account.Account
	r := admin(e, "POST", "/accounts", gatewaytest.AdminToken, `{"name":"acme","credits":50,"rate_limit":7,"max_inflight":4,"models":["`+pro+`"]}`)
	if err := json.Unmarshal(data(t, r), &acct); err != nil || acct.ID == "" || acct.Credits != 50 || acct.RateLimit != 7 || acct.MaxInflight != 4 || len(acct.Models) != 1 || acct.Models[0] != catalog.Pro {
		t.Fatalf("created %+v (%v)", acct, err)
	}
	gatewaytest.AssertEnvelope(t, admin(e, "POST", "/accounts", gatewaytest.AdminToken, `{"name":"x","credit":5}`), 400, `unknown field "credit"`)
	gatewaytest.AssertEnvelope(t, admin(e, "POST", "/accounts", gatewaytest.AdminToken, `{"name":""}`), 400, "name")
	gatewaytest.AssertEnvelope(t, admin(e, "POST", "/accounts", gatewaytest.AdminToken, `{"name":"x","models":["dalle"]}`), 400, "unknown model")

	var created struct {
		Key, Prefix string
	}
	if err := json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/keys", gatewaytest.AdminToken, "")), &created); err != nil || !strings.HasPrefix(created.Key, "esk_") || created.Prefix != created.Key[:12] {
		t.Fatalf("key %+v %v", created, err)
	}
	// The new key works at once.
	if r := e.Create(created.Key, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"p"}}`); r.Status != 200 {
		t.Fatalf("create with the new key: %d %s", r.Status, r.Body)
	}
	var keys []account.Key
	_ = json.Unmarshal(data(t, admin(e, "GET", "/accounts/"+acct.ID+"/keys", gatewaytest.AdminToken, "")), &keys)
	if len(keys) != 1 || keys[0].Prefix != created.Prefix || strings.Contains(string(admin(e, "GET", "/accounts/"+acct.ID+"/keys", gatewaytest.AdminToken, "").Body), created.Key) {
		t.Errorf("keys %+v", keys)
	}

	var bal struct{ Balance int64 }
	_ = json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/credits", gatewaytest.AdminToken, `{"amount":100,"note":"invoice 7"}`)), &bal)
	if bal.Balance != 50-18+100 {
		t.Errorf("balance %d", bal.Balance)
	}
	gatewaytest.AssertEnvelope(t, admin(e, "POST", "/accounts/"+acct.ID+"/credits", gatewaytest.AdminToken, `{"amount":-1000}`), 400, "below 0")
	gatewaytest.AssertEnvelope(t, admin(e, "POST", "/accounts/"+acct.ID+"/credits", gatewaytest.AdminToken, `{}`), 400, "amount is required")

	var ledger []account.LedgerEntry
	_ = json.Unmarshal(data(t, admin(e, "GET", "/accounts/"+acct.ID+"/ledger", gatewaytest.AdminToken, "")), &ledger)
	if len(ledger) != 3 || ledger[0].Note != "invoice 7" || ledger[1].Kind != account.Debit || ledger[1].TaskID == "" || ledger[2].Kind != account.Credit {
		t.Errorf("ledger %+v", ledger)
	}

	var limited account.Account
	_ = json.Unmarshal(data(t, admin(e, "PATCH", "/accounts/"+acct.ID+"/limits", gatewaytest.AdminToken, `{"query_rate_limit":9,"models":[]}`)), &limited)
	if limited.QueryRateLimit != 9 || limited.RateLimit != 7 || len(limited.Models) != 0 {
		t.Errorf("after limits %+v", limited)
	}

	_ = json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/disable", gatewaytest.AdminToken, "")), &acct)
	if acct.Status != account.Disabled {
		t.Errorf("status %s", acct.Status)
	}
	gatewaytest.AssertEnvelope(t, e.Create(created.Key, okBody), 403, "disabled")
	_ = json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/enable", gatewaytest.AdminToken, "")), &acct)
	if r := e.Create(created.Key, okBody); r.Status != 200 {
		t.Errorf("re-enabled: %d", r.Status)
	}

	var revoked account.Key
	_ = json.Unmarshal(data(t, admin(e, "POST", "/keys/revoke", gatewaytest.AdminToken, `{"prefix":"`+created.Prefix+`"}`)), &revoked)
	if !revoked.Revoked {
		t.Errorf("revoke %+v", revoked)
	}
	gatewaytest.AssertEnvelope(t, e.Create(created.Key, okBody), 401, "revoked")

	var list []account.Account
	_ = json.Unmarshal(data(t, admin(e, "GET", "/accounts", gatewaytest.AdminToken, "")), &list)
	if len(list) != 4 { // a, b, off from the env, and acme
		t.Errorf("%d accounts", len(list))
	}
	gatewaytest.AssertEnvelope(t, admin(e, "GET", "/accounts/acct_nope", gatewaytest.AdminToken, ""), 404, "not found")
}

func TestNoAdminRoutesWithoutToken(t *testing.T) {
	srv := httptest.NewServer(gatewaytest.Handler(gatewaytest.Deps{Config: web.Config{Log: zap.NewNop()}}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/admin/v1/accounts")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("admin route without EASEL_ADMIN_TOKEN: %d; want 404", resp.StatusCode)
	}
}

// Wrong admin tokens spend the same budgets as bad API keys (40 in a row
// are not all answered 401); the right token from another address still
// works, and never counts.
func TestWrongAdminTokensThrottled(t *testing.T) {
	e := newEnv(t, func(_ *gatewaytest.Env, d *gatewaytest.Deps) {
		d.AuthGuard = auth.NewGuard(auth.GuardLimits{PerAddress: 1, PerPrefix: 100})
		d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	from := func(addr, token string) int {
		return e.Do("GET", "/admin/v1/accounts", map[string]string{"Authorization": "Bearer " + token, "X-Forwarded-For": addr}, "").Status
	}
	codes := map[int]int{}
	for i := range 40 {
		codes[from("198.51.100.1", fmt.Sprintf("wrong-token-%d", i))]++
	}
	if codes[401] > 5 || codes[429] < 35 {
		t.Errorf("40 wrong admin tokens from one address: %v; want 4 or 5 answered 401, the rest 429", codes)
	}
	for i := range 10 {
		if c := from("198.51.100.2", gatewaytest.AdminToken); c != 200 {
			t.Fatalf("the admin token from another address, request %d: %d", i, c)
		}
	}
}

func TestAdminWebhookSecret(t *testing.T) {
	e := newEnv(t, nil)
	path := "/accounts/" + e.AcctA + "/webhook-secret"
	gatewaytest.AssertEnvelope(t, admin(e, "GET", path, "", ""), 401, "admin token")
	gatewaytest.AssertEnvelope(t, admin(e, "POST", path+"/rotate", e.KeyA, ""), 401, "admin token")

	type reply struct {
		AccountID          string `json:"account_id"`
		Secret             string `json:"secret"`
		PreviousValidUntil *int64 `json:"previous_valid_until"`
	}
	var first reply
	r := admin(e, "GET", path, gatewaytest.AdminToken, "")
	if err := json.Unmarshal(data(t, r), &first); err != nil || first.AccountID != e.AcctA || !strings.HasPrefix(first.Secret, "whsec_") || first.PreviousValidUntil != nil {
		t.Fatalf("secret %+v %v", first, err)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", r.Header.Get("Cache-Control"))
	}
	if _, err := webhook.Key(first.Secret); err != nil {
		t.Errorf("secret %q: %v", first.Secret, err)
	}
	if cur, _ := e.Hooks.Secret(context.Background(), e.AcctA); cur != first.Secret {
		t.Errorf("the store's secret %q; the API showed %q", cur, first.Secret)
	}
	var again reply
	_ = json.Unmarshal(data(t, admin(e, "GET", path, gatewaytest.AdminToken, "")), &again)
	if again.Secret != first.Secret {
		t.Errorf("second read %q; want %q", again.Secret, first.Secret)
	}

	var rotated reply
	before := time.Now()
	if err := json.Unmarshal(data(t, admin(e, "POST", path+"/rotate", gatewaytest.AdminToken, "")), &rotated); err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == first.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.PreviousValidUntil == nil ||
		*rotated.PreviousValidUntil < before.Add(24*time.Hour).UnixMilli() || *rotated.PreviousValidUntil > time.Now().Add(24*time.Hour).UnixMilli() {
		t.Fatalf("rotated %+v; want a new secret, the old one valid 24 h", rotated)
	}
	var after reply
	_ = json.Unmarshal(data(t, admin(e, "GET", path, gatewaytest.AdminToken, "")), &after)
	if after.Secret != rotated.Secret {
		t.Errorf("after the rotation the secret is %q; want %q", after.Secret, rotated.Secret)
	}
	if secrets, _ := e.Hooks.Secrets(context.Background(), e.AcctA); len(secrets) != 2 || secrets[1] != first.Secret {
		t.Errorf("signing secrets %v; want the new and the old", secrets)
	}

	gatewaytest.AssertEnvelope(t, admin(e, "GET", "/accounts/acct_nope/webhook-secret", gatewaytest.AdminToken, ""), 404, "not found")
	gatewaytest.AssertEnvelope(t, admin(e, "POST", "/accounts/acct_nope/webhook-secret/rotate", gatewaytest.AdminToken, ""), 404, "not found")
}

// Wrong admin tokens sent at once, 50 at a time from one address, are
// checked at most the address's burst (4 s of its rate) and a little
// refill; the rest are answered 429 unchecked.
func TestWrongAdminTokensThrottledAtOnce(t *testing.T) {
	e := newEnv(t, func(_ *gatewaytest.Env, d *gatewaytest.Deps) {
		d.AuthGuard = auth.NewGuard(auth.GuardLimits{PerAddress: 5, PerPrefix: 20, Global: 500})
	})
	const total, atOnce = 100, 50
	codes := make(chan int, total)
	sem := make(chan struct{}, atOnce)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range total {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			codes <- admin(e, "GET", "/accounts", fmt.Sprintf("wrong-token-%d", i), "").Status
		})
	}
	wg.Wait()
	close(codes)
	took := time.Since(start)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	// The burst, and what 5 a second refill over the run.
	most := 20 + int(took.Seconds()*5) + 1
	if got[401] > most || got[401]+got[429] != total {
		t.Errorf("%d wrong admin tokens, %d at once, in %s: %v; want at most %d answered 401, the rest 429", total, atOnce, took, got, most)
	}
}

// GET /upstreams/file tells the upstreams file's state as the workers
// recorded it: null without a pool, then where it was loaded from and
// when, and a change they refused, with why.
func TestAdminUpstreamsFile(t *testing.T) {
	e := newEnv(t, func(e *gatewaytest.Env, d *gatewaytest.Deps) {
		d.Admin.UpstreamsFile = func(ctx context.Context) (*upstream.FileState, error) { return upstream.ReadFileState(ctx, e.RDB) }
	})
	if got := string(data(t, admin(e, "GET", "/upstreams/file", gatewaytest.AdminToken, ""))); got != "null" {
		t.Errorf("without a pool: %s; want null", got)
	}
	ctx := context.Background()
	loaded := time.Date(2026, 11, 27, 9, 30, 0, 0, time.UTC)
	if err := upstream.RecordLoaded(ctx, e.RDB, "/etc/easel/upstreams.json", loaded); err != nil {
		t.Fatal(err)
	}
	if err := upstream.RecordRefused(ctx, e.RDB, "/etc/easel/upstreams.json", loaded.Add(time.Hour), fmt.Errorf("upstreams file: unknown field %q", "wieght")); err != nil {
		t.Fatal(err)
	}
	want := `{"path":"/etc/easel/upstreams.json","loaded_at":"2026-11-27T09:30:00Z","refused_at":"2026-11-27T10:30:00Z","refusal":"upstreams file: unknown field \"wieght\""}`
	if got := string(data(t, admin(e, "GET", "/upstreams/file", gatewaytest.AdminToken, ""))); got != want {
		t.Errorf("after a refused change: %s; want %s", got, want)
	}
	// A load after it: the refusal no longer stands.
	if err := upstream.RecordLoaded(ctx, e.RDB, "/etc/easel/upstreams.json", loaded.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	want = `{"path":"/etc/easel/upstreams.json","loaded_at":"2026-11-27T11:30:00Z"}`
	if got := string(data(t, admin(e, "GET", "/upstreams/file", gatewaytest.AdminToken, ""))); got != want {
		t.Errorf("after a load: %s; want %s", got, want)
	}
	if r := admin(e, "GET", "/upstreams/file", "wrong-token", ""); r.Status != 401 {
		t.Errorf("a wrong token: %d", r.Status)
	}
}
