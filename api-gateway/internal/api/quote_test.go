package api_test

import (
	"context"
	"testing"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
)

// POST /v1/task/create?dry_run=true checks and prices a create as it would
// be made, and makes nothing: no task, no charge, no key spend.
func TestQuote(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	acctID, key := e.newAccount(account.Spec{Name: "quoted", Credits: 21})
	stdOnly, _, err := e.Accounts.NewKey(ctx, acctID, account.KeySpec{KeyLimits: account.KeyLimits{Models: []catalog.Tier{catalog.Standard}}})
	if err != nil {
		t.Fatal(err)
	}
	capped, _, err := e.Accounts.NewKey(ctx, acctID, account.KeySpec{KeyLimits: account.KeyLimits{SpendLimit: 3}})
	if err != nil {
		t.Fatal(err)
	}
	_, proOnly := e.newAccount(account.Spec{Name: "pro-only", Credits: 100, Models: []catalog.Tier{catalog.Pro}})
	pro4K := `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","image_size":"4K"}}`
	pro2K := `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","image_size":"2K"}}`
	quote := func(key, query, body string) reply {
		return e.Do("POST", "/v1/task/create?"+query, e.auth(key), body)
	}
	tests := []struct {
		name, key, query, body string
		status                 int
		price, balance         float64
		msg                    string
	}{
		{"standard", key, "dry_run=true", okBody, 200, 4, 21, ""},
		{"pro 2K, dry_run=1", key, "dry_run=1", pro2K, 200, 18, 21, ""},
		{"three images, priced each", key, "dry_run=true", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":3}}`, 200, 12, 21, ""},
		{"more images than the balance", key, "dry_run=true", `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","num_images":2}}`, 402, 0, 0, "this task costs 36 credits and the balance is 21"},
		{"more than the balance", key, "dry_run=true", pro4K, 402, 0, 0, "this task costs 24 credits and the balance is 21"},
		{"a model the account may not use", proOnly, "dry_run=true", okBody, 403, 0, 0, "this account may not use model " + std},
		{"a model the key may not use", stdOnly, "dry_run=true", pro2K, 403, 0, 0, ""},
		{"past the key's spend limit", capped, "dry_run=true", okBody, 402, 0, 0, ""},
		{"a bad body", key, "dry_run=true", `{"model":"nope"}`, 400, 0, 0, "model"},
		{"a bad dry_run", key, "dry_run=maybe", okBody, 400, 0, 0, "dry_run must be true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := quote(tt.key, tt.query, tt.body)
			if tt.status != 200 {
				assertEnvelope(t, r, tt.status, tt.msg)
				return
			}
			d, _ := r.JSON(t)["data"].(map[string]any)
			if r.Status != 200 || d["price"] != tt.price || d["balance"] != tt.balance || d["allowed"] != true {
				t.Fatalf("quote: %d %s", r.Status, r.Body)
			}
		})
	}
	// Nothing was made nor charged.
	if a, _ := e.Accounts.Get(ctx, acctID); a.Credits != 21 {
		t.Errorf("balance %d after quotes; want 21", a.Credits)
	}
	if tasks, _, err := e.Store.List(ctx, acctID, task.Filter{Limit: 10}); err != nil || len(tasks) != 0 {
		t.Errorf("tasks after quotes: %d, %v", len(tasks), err)
	}
	// dry_run=false is a create.
	if r := quote(key, "dry_run=false", okBody); r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	if a, _ := e.Accounts.Get(ctx, acctID); a.Credits != 17 {
		t.Errorf("balance %d after a create; want 17", a.Credits)
	}
}
