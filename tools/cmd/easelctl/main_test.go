package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

type result struct {
	code           int
	stdout, stderr string
}

func ctl(t *testing.T, url string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := map[string]string{"EASEL_REDIS_URL": url}
	code := run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
	return result{code, out.String(), errOut.String()}
}

func TestCommands(t *testing.T) {
	url := redistest.Start(t).URL

	r := ctl(t, url, "account", "create", "--name", "Acme", "--credits", "100", "--rate-limit", "5", "--max-inflight", "3", "--models", "pro")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "acct_") || strings.Contains(id, "\n") {
		t.Fatalf("account create: %+v", r)
	}

	var a account.Account
	r = ctl(t, url, "account", "show", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || a.ID != id || a.Credits != 100 || a.RateLimit != 5 || a.MaxInflight != 3 || len(a.Models) != 1 {
		t.Fatalf("account show --json: %+v %v", r, err)
	}
	if r := ctl(t, url, "account", "show", id); r.code != 0 || !strings.Contains(r.stdout, "credits") || !strings.Contains(r.stdout, "100") {
		t.Errorf("account show: %+v", r)
	}

	r = ctl(t, url, "key", "create", "--account", id)
	key := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(key, "esk_") || len(key) < 36 {
		t.Fatalf("key create: %+v", r)
	}
	if r := ctl(t, url, "key", "list", "--account", id); r.code != 0 || !strings.Contains(r.stdout, key[:12]) || strings.Contains(r.stdout, key) {
		t.Errorf("key list: %+v", r)
	}

	if r := ctl(t, url, "credits", "add", id, "50"); r.code != 0 || strings.TrimSpace(r.stdout) != "150" {
		t.Errorf("credits add: %+v", r)
	}
	if r := ctl(t, url, "credits", "add", id, "-20", "--note", "refund of invoice 3"); r.code != 0 || strings.TrimSpace(r.stdout) != "130" {
		t.Errorf("credits add negative: %+v", r)
	}
	if r := ctl(t, url, "credits", "add", id, "-1000"); r.code != 1 || !strings.Contains(r.stderr, "below 0") {
		t.Errorf("overdraw: %+v", r)
	}
	if r := ctl(t, url, "credits", "add", id, "--json", "1"); r.code != 0 || strings.TrimSpace(r.stdout) != `{
  "balance": 131
}` {
		t.Errorf("credits add --json: %+v", r)
	}

	var entries []account.LedgerEntry
	r = ctl(t, url, "ledger", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 4 || entries[1].Note != "refund of invoice 3" || entries[1].Amount != -20 {
		t.Errorf("ledger: %+v %v", r, err)
	}
	if r := ctl(t, url, "ledger", id); r.code != 0 || !strings.Contains(r.stdout, "refund of invoice 3") {
		t.Errorf("ledger text: %+v", r)
	}

	var limited account.Account
	r = ctl(t, url, "account", "limits", id, "--rate-limit", "9", "--models", "all", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &limited); err != nil || limited.RateLimit != 9 || limited.MaxInflight != 3 || len(limited.Models) != 0 {
		t.Errorf("limits: %+v", r)
	}
	if r := ctl(t, url, "account", "disable", id); r.code != 0 || !strings.Contains(r.stdout, "disabled") {
		t.Errorf("disable: %+v", r)
	}
	if r := ctl(t, url, "account", "enable", id); r.code != 0 || !strings.Contains(r.stdout, "active") {
		t.Errorf("enable: %+v", r)
	}
	if r := ctl(t, url, "account", "list"); r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "Acme") {
		t.Errorf("list: %+v", r)
	}
	if r := ctl(t, url, "key", "revoke", key[:12]); r.code != 0 || !strings.Contains(r.stdout, "revoked") {
		t.Errorf("revoke: %+v", r)
	}
	if r := ctl(t, url, "key", "list", "--account", id); !strings.Contains(r.stdout, "revoked") {
		t.Errorf("key list after revoke: %+v", r)
	}

	// The webhook secret: made on first read, the same on the next, a new
	// one on --rotate.
	r = ctl(t, url, "webhook-secret", id)
	secret := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(secret, "whsec_") || strings.Contains(secret, "\n") {
		t.Fatalf("webhook-secret: %+v", r)
	}
	if r := ctl(t, url, "webhook-secret", id); strings.TrimSpace(r.stdout) != secret {
		t.Errorf("webhook-secret again: %+v; want %s", r, secret)
	}
	var rotated struct {
		AccountID          string `json:"account_id"`
		Secret             string `json:"secret"`
		PreviousValidUntil int64  `json:"previous_valid_until"`
	}
	r = ctl(t, url, "webhook-secret", id, "--rotate", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &rotated); err != nil || rotated.AccountID != id || rotated.Secret == secret || !strings.HasPrefix(rotated.Secret, "whsec_") ||
		rotated.PreviousValidUntil < time.Now().Add(23*time.Hour).UnixMilli() {
		t.Errorf("webhook-secret --rotate --json: %+v %v", r, err)
	}
	if r := ctl(t, url, "webhook-secret", id); strings.TrimSpace(r.stdout) != rotated.Secret {
		t.Errorf("webhook-secret after the rotation: %+v; want %s", r, rotated.Secret)
	}
}

func TestMain(m *testing.M) {
	redisconn.LogTo(zap.NewNop())
	os.Exit(m.Run())
}

func TestErrors(t *testing.T) {
	url := redistest.Start(t).URL
	tests := []struct {
		name string
		url  string
		args []string
		code int
		msg  string
	}{
		{"no redis url", "", []string{"account", "list"}, 2, "EASEL_REDIS_URL"},
		{"unknown command", url, []string{"acount", "list"}, 2, "unknown command"},
		{"unknown flag", url, []string{"account", "create", "--nam", "x"}, 2, "unknown flag"},
		{"missing name", url, []string{"account", "create"}, 2, "--name is required"},
		{"bad number", url, []string{"account", "create", "--name", "x", "--credits", "lots"}, 2, "invalid argument"},
		{"missing arg", url, []string{"account", "show"}, 2, "accepts 1 arg"},
		{"unknown account", url, []string{"account", "show", "acct_nope"}, 1, "account acct_nope not found"},
		{"credits usage", url, []string{"credits", "add", "acct_x"}, 2, "usage"},
		{"credits not a number", url, []string{"credits", "add", "acct_x", "ten"}, 2, "want an integer"},
		{"credits unknown account", url, []string{"credits", "add", "acct_nope", "5"}, 1, "not found"},
		{"key for unknown account", url, []string{"key", "create", "--account", "acct_nope"}, 1, "not found"},
		{"revoke unknown", url, []string{"key", "revoke", "esk_nothing1"}, 1, "no key"},
		{"bad model", url, []string{"account", "create", "--name", "x", "--models", "dalle"}, 2, "unknown model"},
		{"negative limit", url, []string{"account", "create", "--name", "x", "--rate-limit", "-1"}, 1, "rate limit"},
		{"unreachable redis", "redis://127.0.0.1:1/0", []string{"account", "list"}, 1, "redis"},
		{"webhook secret of an unknown account", url, []string{"webhook-secret", "acct_nope"}, 1, "not found"},
		{"webhook secret rotation of an unknown account", url, []string{"webhook-secret", "acct_nope", "--rotate"}, 1, "not found"},
		{"webhook secret without an account", url, []string{"webhook-secret"}, 2, "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ctl(t, tt.url, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.msg) || r.stdout != "" {
				t.Errorf("%v: %+v; want exit %d and %q on stderr", tt.args, r, tt.code, tt.msg)
			}
		})
	}
}
