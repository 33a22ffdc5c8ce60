package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
)

// newAccount makes an account from n and returns its id and a key.
func (e *env) newAccount(n account.Spec) (string, string) {
	e.t.Helper()
	ctx := context.Background()
	a, err := e.accounts.Create(ctx, n)
	if err != nil {
		e.t.Fatal(err)
	}
	k, _, err := e.accounts.CreateKey(ctx, a.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return a.ID, k
}

func TestPaymentRequired(t *testing.T) {
	e := newEnv(t, nil)
	id, key := e.newAccount(account.Spec{Name: "poor", Credits: 21})
	// A 4K pro task costs 24.
	r := e.create(key, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"p","image_size":"4K"}}`)
	assertEnvelope(t, r, 402, "this task costs 24 credits and the balance is 21")
	// A cheaper task still fits.
	if r := e.create(key, okBody); r.status != 200 {
		t.Fatalf("standard task: %d %s", r.status, r.body)
	}
	if a, _ := e.accounts.Get(context.Background(), id); a.Credits != 17 {
		t.Errorf("balance %d; want 17", a.Credits)
	}
	// Query costs nothing.
	for i := 0; i < 3; i++ {
		e.query(key, "task_lumen_1")
	}
	if a, _ := e.accounts.Get(context.Background(), id); a.Credits != 17 {
		t.Errorf("balance %d after queries; want 17", a.Credits)
	}
}

func TestAccess(t *testing.T) {
	e := newEnv(t, nil)
	_, proOnly := e.newAccount(account.Spec{Name: "pro-only", Credits: 100, Models: []catalog.Tier{catalog.Pro}})
	assertEnvelope(t, e.create(proOnly, okBody), 403, "this account may not use model "+std)
	if r := e.create(proOnly, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"p"}}`); r.status != 200 {
		t.Errorf("allowed model: %d %s", r.status, r.body)
	}

	id, key := e.newAccount(account.Spec{Name: "revoked", Credits: 100})
	if _, err := e.accounts.RevokeKey(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	assertEnvelope(t, e.create(key, okBody), 401, "revoked")
	assertEnvelope(t, e.query(key, "task_lumen_1"), 401, "revoked")
	_ = id
}

func TestRateLimits(t *testing.T) {
	e := newEnv(t, nil)
	_, key := e.newAccount(account.Spec{Name: "limited", Credits: 1000, RateLimit: 2, QueryRateLimit: 3})

	// Every authenticated response carries the headers, errors included.
	r := e.create(key, `{"model":"nope"}`)
	if r.status != 400 || r.header.Get("X-RateLimit-Limit") != "2" || r.header.Get("X-RateLimit-Remaining") != "1" || r.header.Get("X-RateLimit-Reset") == "" {
		t.Fatalf("first create: %d %v", r.status, r.header)
	}
	if r := e.create(key, okBody); r.status != 200 || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("second create: %d %v", r.status, r.header)
	}
	r = e.create(key, okBody)
	assertEnvelope(t, r, 429, "rate limit exceeded: at most 2 task creations per second")
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// Queries have their own limit.
	for i := 0; i < 3; i++ {
		q := e.query(key, "task_lumen_1")
		if q.status != 404 || q.header.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("query %d: %d %v", i, q.status, q.header)
		}
	}
	assertEnvelope(t, e.query(key, "task_lumen_1"), 429, "queries")
	// An unauthenticated request is not counted against anyone.
	if r := e.do("GET", "/v1/task/query?task_id=x", nil, ""); r.header.Get("X-RateLimit-Limit") != "" {
		t.Error("rate-limit headers on an unauthenticated request")
	}
}

func TestInflightLimit(t *testing.T) {
	e := newEnv(t, nil)
	_, key := e.newAccount(account.Spec{Name: "small", Credits: 1000, MaxInflight: 2})
	for i := 0; i < 2; i++ {
		if r := e.create(key, okBody); r.status != 200 {
			t.Fatalf("create %d: %d %s", i, r.status, r.body)
		}
	}
	assertEnvelope(t, e.create(key, okBody), 429, "too many tasks in flight")
}

func admin(e *env, method, path, token, body string) reply {
	e.t.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + token}
	if body != "" {
		hdr["Content-Type"] = "application/json"
	}
	return e.do(method, "/admin/v1"+path, hdr, body)
}

func data(t *testing.T, r reply) json.RawMessage {
	t.Helper()
	var env struct {
		Code int             `json:"code"`
		Msg  string          `json:"msg"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || r.status != 200 || env.Code != 200 || env.Msg != "success" {
		t.Fatalf("admin reply %d %s", r.status, r.body)
	}
	return env.Data
}

func TestAdminAPI(t *testing.T) {
	e := newEnv(t, nil)
	assertEnvelope(t, admin(e, "GET", "/accounts", "", ""), 401, "admin token")
	assertEnvelope(t, admin(e, "GET", "/accounts", "wrong", ""), 401, "admin token")
	assertEnvelope(t, admin(e, "GET", "/accounts", e.keyA, ""), 401, "admin token") // an API key is not an admin token

	var acct account.Account
	r := admin(e, "POST", "/accounts", adminToken, `{"name":"acme","credits":50,"rate_limit":7,"max_inflight":4,"models":["`+pro+`"]}`)
	if err := json.Unmarshal(data(t, r), &acct); err != nil || acct.ID == "" || acct.Credits != 50 || acct.RateLimit != 7 || acct.MaxInflight != 4 || len(acct.Models) != 1 || acct.Models[0] != catalog.Pro {
		t.Fatalf("created %+v (%v)", acct, err)
	}
	assertEnvelope(t, admin(e, "POST", "/accounts", adminToken, `{"name":"x","credit":5}`), 400, `unknown field "credit"`)
	assertEnvelope(t, admin(e, "POST", "/accounts", adminToken, `{"name":""}`), 400, "name")
	assertEnvelope(t, admin(e, "POST", "/accounts", adminToken, `{"name":"x","models":["dalle"]}`), 400, "unknown model")

	var created struct {
		Key, Prefix string
	}
	if err := json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/keys", adminToken, "")), &created); err != nil || !strings.HasPrefix(created.Key, "esk_") || created.Prefix != created.Key[:12] {
		t.Fatalf("key %+v %v", created, err)
	}
	// The new key works at once.
	if r := e.create(created.Key, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"p"}}`); r.status != 200 {
		t.Fatalf("create with the new key: %d %s", r.status, r.body)
	}
	var keys []account.Key
	_ = json.Unmarshal(data(t, admin(e, "GET", "/accounts/"+acct.ID+"/keys", adminToken, "")), &keys)
	if len(keys) != 1 || keys[0].Prefix != created.Prefix || strings.Contains(string(admin(e, "GET", "/accounts/"+acct.ID+"/keys", adminToken, "").body), created.Key) {
		t.Errorf("keys %+v", keys)
	}

	var bal struct{ Balance int64 }
	_ = json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/credits", adminToken, `{"amount":100,"note":"invoice 7"}`)), &bal)
	if bal.Balance != 50-18+100 {
		t.Errorf("balance %d", bal.Balance)
	}
	assertEnvelope(t, admin(e, "POST", "/accounts/"+acct.ID+"/credits", adminToken, `{"amount":-1000}`), 400, "below 0")
	assertEnvelope(t, admin(e, "POST", "/accounts/"+acct.ID+"/credits", adminToken, `{}`), 400, "amount is required")

	var ledger []account.LedgerEntry
	_ = json.Unmarshal(data(t, admin(e, "GET", "/accounts/"+acct.ID+"/ledger", adminToken, "")), &ledger)
	if len(ledger) != 3 || ledger[0].Note != "invoice 7" || ledger[1].Kind != account.Debit || ledger[1].TaskID == "" || ledger[2].Kind != account.Credit {
		t.Errorf("ledger %+v", ledger)
	}

	var limited account.Account
	_ = json.Unmarshal(data(t, admin(e, "PATCH", "/accounts/"+acct.ID+"/limits", adminToken, `{"query_rate_limit":9,"models":[]}`)), &limited)
	if limited.QueryRateLimit != 9 || limited.RateLimit != 7 || len(limited.Models) != 0 {
		t.Errorf("after limits %+v", limited)
	}

	_ = json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/disable", adminToken, "")), &acct)
	if acct.Status != account.Disabled {
		t.Errorf("status %s", acct.Status)
	}
	assertEnvelope(t, e.create(created.Key, okBody), 403, "disabled")
	_ = json.Unmarshal(data(t, admin(e, "POST", "/accounts/"+acct.ID+"/enable", adminToken, "")), &acct)
	if r := e.create(created.Key, okBody); r.status != 200 {
		t.Errorf("re-enabled: %d", r.status)
	}

	var revoked account.Key
	_ = json.Unmarshal(data(t, admin(e, "POST", "/keys/revoke", adminToken, `{"prefix":"`+created.Prefix+`"}`)), &revoked)
	if !revoked.Revoked {
		t.Errorf("revoke %+v", revoked)
	}
	assertEnvelope(t, e.create(created.Key, okBody), 401, "revoked")

	var list []account.Account
	_ = json.Unmarshal(data(t, admin(e, "GET", "/accounts", adminToken, "")), &list)
	if len(list) != 4 { // a, b, off from the env, and acme
		t.Errorf("%d accounts", len(list))
	}
	assertEnvelope(t, admin(e, "GET", "/accounts/acct_nope", adminToken, ""), 404, "not found")
}

func TestNoAdminRoutesWithoutToken(t *testing.T) {
	srv := httptest.NewServer(api.New(api.Deps{Log: zap.NewNop()}))
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
