package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	return ctlIn(t, url, "", args...)
}

// ctlIn runs easelctl with stdin.
func ctlIn(t *testing.T, url, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := map[string]string{"EASEL_REDIS_URL": url}
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] })
	return result{code, out.String(), errOut.String()}
}

func TestCommands(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

func TestKeyLimits(t *testing.T) {
	t.Parallel()
	url := redistest.Start(t).URL
	id := newAccount(t, url, "Acme")
	expires := time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(time.Second)

	// The key alone on stdout; its limits on stderr.
	r := ctl(t, url, "key", "create", "--account", id, "--name", "ci runner", "--models", "standard,pro,standard", "--allowed-ips", "10.1.2.3/8, 203.0.113.7,2001:db8::/32",
		"--expires-at", expires.Format(time.RFC3339), "--spend-limit", "500")
	key := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(key, "esk_") || strings.Contains(key, "\n") {
		t.Fatalf("key create: %+v", r)
	}
	for _, want := range []string{key[:12], "ci runner", "standard,pro", "10.0.0.0/8,203.0.113.7/32,2001:db8::/32", expires.Format(time.RFC3339), "500", "only this once"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("key create's stderr lacks %q: %s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, key) {
		t.Errorf("the key is printed twice: %s", r.stderr)
	}

	// listed returns the key as key list --json prints it.
	listed := func() account.Key {
		t.Helper()
		var keys []account.Key
		r := ctl(t, url, "key", "list", "--account", id, "--json")
		if err := json.Unmarshal([]byte(r.stdout), &keys); err != nil || r.code != 0 {
			t.Fatalf("key list --json: %+v %v", r, err)
		}
		for _, k := range keys {
			if k.Prefix == key[:12] {
				return k
			}
		}
		t.Fatalf("key list --json lacks %s: %+v", key[:12], r)
		return account.Key{}
	}
	k := listed()
	if k.Prefix != key[:12] || k.Name != "ci runner" || k.SpendLimit != 500 || !k.ExpiresAt.Equal(expires) || k.Revoked ||
		fmt.Sprint(k.Models) != "[standard pro]" || fmt.Sprint(k.AllowedIPs) != "[10.0.0.0/8 203.0.113.7/32 2001:db8::/32]" {
		t.Errorf("key list --json: %+v", k)
	}
	if r := ctl(t, url, "key", "list", "--account", id); r.code != 0 {
		t.Errorf("key list: %+v", r)
	} else {
		for _, want := range []string{"NAME", "SPENT", "SPEND LIMIT", "ALLOWED IPS", "EXPIRES", key[:12], "ci runner", "active", "500", "standard,pro", "203.0.113.7/32", expires.Format(time.RFC3339)} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("key list lacks %q: %s", want, r.stdout)
			}
		}
	}

	// --json: the key and its record.
	var created struct {
		Secret string `json:"key"`
		account.Key
	}
	r = ctl(t, url, "key", "create", "--account", id, "--models", "pro", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || !strings.HasPrefix(created.Secret, "esk_") || created.Prefix != created.Secret[:12] ||
		created.AccountID != id || fmt.Sprint(created.Models) != "[pro]" || created.SpendLimit != 0 || !created.ExpiresAt.IsZero() || r.stderr != "" {
		t.Errorf("key create --json: %+v %v", r, err)
	}

	steps := []struct {
		name  string
		args  []string
		check func(k account.Key) bool
	}{
		{"rename only", []string{"--name", "nightly"}, func(k account.Key) bool {
			return k.Name == "nightly" && k.SpendLimit == 500 && len(k.Models) == 2 && len(k.AllowedIPs) == 3 && k.ExpiresAt.Equal(expires)
		}},
		{"change", []string{"--models", "pro", "--allowed-ips", "192.0.2.0/24", "--spend-limit", "9000", "--expires-at", "2099-01-31"}, func(k account.Key) bool {
			return k.Name == "nightly" && k.SpendLimit == 9000 && fmt.Sprint(k.Models) == "[pro]" && fmt.Sprint(k.AllowedIPs) == "[192.0.2.0/24]" &&
				k.ExpiresAt.Equal(time.Date(2099, 1, 31, 0, 0, 0, 0, time.UTC))
		}},
		{"clear", []string{"--models", "", "--allowed-ips", "", "--spend-limit", "0", "--expires-at", "never"}, func(k account.Key) bool {
			return k.Name == "nightly" && k.SpendLimit == 0 && len(k.Models) == 0 && len(k.AllowedIPs) == 0 && k.ExpiresAt.IsZero()
		}},
		{"models and no name", []string{"--models", "standard", "--name", ""}, func(k account.Key) bool { return k.Name == "" && fmt.Sprint(k.Models) == "[standard]" }},
		{"models back to the account's", []string{"--models", "all"}, func(k account.Key) bool { return len(k.Models) == 0 }},
	}
	for _, s := range steps {
		var printed account.Key
		r := ctl(t, url, append([]string{"key", "limits", key[:12], "--json"}, s.args...)...)
		if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || r.code != 0 || !s.check(printed) {
			t.Errorf("%s: key limits %v: %+v %v", s.name, s.args, r, err)
		}
		if l := listed(); !s.check(l) {
			t.Errorf("%s: key limits %v; listed %+v", s.name, s.args, l)
		}
	}
	// By the whole key, printed as text.
	if r := ctl(t, url, "key", "limits", key, "--spend-limit", "7"); r.code != 0 || !strings.Contains(r.stdout, "spend limit  7") || !strings.Contains(r.stdout, "allowed ips  any") ||
		!strings.Contains(r.stdout, "expires      never") || !strings.Contains(r.stdout, key[:12]) {
		t.Errorf("key limits, text: %+v", r)
	}
}

func TestKeyErrors(t *testing.T) {
	t.Parallel()
	url := redistest.Start(t).URL
	id := newAccount(t, url, "Acme")
	r := ctl(t, url, "key", "create", "--account", id)
	if r.code != 0 {
		t.Fatalf("key create: %+v", r)
	}
	prefix := strings.TrimSpace(r.stdout)[:12]
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"bad CIDR", []string{"key", "create", "--account", id, "--allowed-ips", "10.0.0.0/33"}, 1, `allowed_ips: "10.0.0.0/33" is neither an IP address nor a CIDR prefix`},
		{"bad address", []string{"key", "create", "--account", id, "--allowed-ips", "10.0.0.1,example.com"}, 1, `"example.com" is neither an IP address nor a CIDR prefix`},
		{"bad model", []string{"key", "create", "--account", id, "--models", "standard,dalle"}, 2, `unknown model "dalle": use standard, pro, all or a model id`},
		{"bad time", []string{"key", "create", "--account", id, "--expires-at", "tomorrow"}, 2, `--expires-at: "tomorrow" is not an RFC 3339 time or a date`},
		{"past expiry", []string{"key", "create", "--account", id, "--expires-at", "2001-01-01T00:00:00Z"}, 1, "expires_at is not in the future"},
		{"negative spend limit", []string{"key", "create", "--account", id, "--spend-limit", "-5"}, 1, "spend_limit must be 0 (none) to"},
		{"spend limit not a number", []string{"key", "create", "--account", id, "--spend-limit", "lots"}, 2, "invalid argument"},
		{"name too long", []string{"key", "create", "--account", id, "--name", strings.Repeat("n", 101)}, 1, "a key's name must be at most 100 characters"},
		{"limits: bad CIDR", []string{"key", "limits", prefix, "--allowed-ips", "300.1.1.1"}, 1, `"300.1.1.1" is neither an IP address nor a CIDR prefix`},
		{"limits: bad model", []string{"key", "limits", prefix, "--models", "dalle"}, 2, `unknown model "dalle"`},
		{"limits: bad time", []string{"key", "limits", prefix, "--expires-at", "soon"}, 2, "--expires-at"},
		{"limits: nothing to change", []string{"key", "limits", prefix}, 2, "give at least one of --name, --models"},
		{"limits: unknown prefix", []string{"key", "limits", "esk_nothing1", "--spend-limit", "5"}, 1, "no key with prefix esk_nothing1"},
		{"limits: short prefix", []string{"key", "limits", "esk_", "--spend-limit", "5"}, 1, "12-character prefix"},
		{"limits: no key", []string{"key", "limits", "--spend-limit", "5"}, 2, "accepts 1 arg"},
		{"list without an account", []string{"key", "list"}, 2, "--account is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ctl(t, url, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.msg) || r.stdout != "" {
				t.Errorf("%v: %+v; want exit %d and %q on stderr", tt.args, r, tt.code, tt.msg)
			}
		})
	}
	// The failed changes changed nothing, and no key was made.
	var keys []account.Key
	r = ctl(t, url, "key", "list", "--account", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &keys); err != nil || len(keys) != 1 || keys[0].Name != "" || keys[0].SpendLimit != 0 || len(keys[0].AllowedIPs) != 0 || len(keys[0].Models) != 0 {
		t.Errorf("keys after the errors: %+v %v", r, err)
	}
}
