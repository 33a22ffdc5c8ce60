package api_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
)

// newAccount makes an account from n and returns its id and a key.
func (e *env) newAccount(n account.Spec) (string, string) {
	e.T.Helper()
	ctx := context.Background()
	a, err := e.Accounts.Create(ctx, n)
	if err != nil {
		e.T.Fatal(err)
	}
	k, _, err := e.Accounts.CreateKey(ctx, a.ID)
	if err != nil {
		e.T.Fatal(err)
	}
	return a.ID, k
}

func TestPaymentRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	id, key := e.newAccount(account.Spec{Name: "poor", Credits: 21})
	// A 4K pro task costs 24.
	r := e.Create(key, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"p","image_size":"4K"}}`)
	assertEnvelope(t, r, 402, "this task costs 24 credits and the balance is 21")
	// A cheaper task still fits.
	if r := e.Create(key, okBody); r.Status != 200 {
		t.Fatalf("standard task: %d %s", r.Status, r.Body)
	}
	if a, _ := e.Accounts.Get(context.Background(), id); a.Credits != 17 {
		t.Errorf("balance %d; want 17", a.Credits)
	}
	// Query costs nothing.
	for i := 0; i < 3; i++ {
		e.Query(key, "task_lumen_1")
	}
	if a, _ := e.Accounts.Get(context.Background(), id); a.Credits != 17 {
		t.Errorf("balance %d after queries; want 17", a.Credits)
	}
}

func TestAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, proOnly := e.newAccount(account.Spec{Name: "pro-only", Credits: 100, Models: []catalog.Tier{catalog.Pro}})
	assertEnvelope(t, e.Create(proOnly, okBody), 403, "this account may not use model "+std)
	if r := e.Create(proOnly, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"p"}}`); r.Status != 200 {
		t.Errorf("allowed model: %d %s", r.Status, r.Body)
	}

	id, key := e.newAccount(account.Spec{Name: "revoked", Credits: 100})
	if _, err := e.Accounts.RevokeKey(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	assertEnvelope(t, e.Create(key, okBody), 401, "revoked")
	assertEnvelope(t, e.Query(key, "task_lumen_1"), 401, "revoked")
	_ = id
}

func TestRateLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, key := e.newAccount(account.Spec{Name: "limited", Credits: 1000, RateLimit: 2, QueryRateLimit: 3})

	// Every authenticated response carries the headers, errors included.
	r := e.Create(key, `{"model":"nope"}`)
	if r.Status != 400 || r.Header.Get("X-RateLimit-Limit") != "2" || r.Header.Get("X-RateLimit-Remaining") != "1" || r.Header.Get("X-RateLimit-Reset") == "" {
		t.Fatalf("first create: %d %v", r.Status, r.Header)
	}
	if r := e.Create(key, okBody); r.Status != 200 || r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("second create: %d %v", r.Status, r.Header)
	}
	r = e.Create(key, okBody)
	assertEnvelope(t, r, 429, "rate limit exceeded: at most 2 task creations per second")
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	// Queries have their own limit.
	for i := 0; i < 3; i++ {
		q := e.Query(key, "task_lumen_1")
		if q.Status != 404 || q.Header.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("query %d: %d %v", i, q.Status, q.Header)
		}
	}
	assertEnvelope(t, e.Query(key, "task_lumen_1"), 429, "queries")
	// An unauthenticated request is not counted against anyone.
	if r := e.Do("GET", "/v1/task/query?task_id=x", nil, ""); r.Header.Get("X-RateLimit-Limit") != "" {
		t.Error("rate-limit headers on an unauthenticated request")
	}
}

func TestInflightLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, key := e.newAccount(account.Spec{Name: "small", Credits: 1000, MaxInflight: 2})
	for i := 0; i < 2; i++ {
		if r := e.Create(key, okBody); r.Status != 200 {
			t.Fatalf("create %d: %d %s", i, r.Status, r.Body)
		}
	}
	assertEnvelope(t, e.Create(key, okBody), 429, "too many tasks in flight")
}
