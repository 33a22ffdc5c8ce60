package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/console"
	"github.com/easelhq/easel/api-gateway/internal/gatewaytest"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/password"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/pkg/users"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

const (
	std    = gatewaytest.Standard
	pro    = gatewaytest.Pro
	okBody = gatewaytest.CreateBody
)

const (
	consolePW  = "correct horse battery"
	emailA     = "owner@a.example"
	emailB     = "owner@b.example"
	emailAdmin = "ops@a.example"
)

// consoleEnv is env with the console on, and users: one of account A,
// one of account B, an admin of account A.
type consoleEnv struct {
	*gatewaytest.Env
	people *users.Service
}

func newConsoleEnv(t *testing.T, cfg users.Config) *consoleEnv {
	t.Helper()
	return newConsoleEnvWith(t, cfg, nil)
}

// newConsoleEnvWith is newConsoleEnv with the handler's dependencies
// changed by edit before it is built.
func newConsoleEnvWith(t *testing.T, cfg users.Config, edit func(*gatewaytest.Deps)) *consoleEnv {
	t.Helper()
	ce := &consoleEnv{}
	// Cheap hashes unless the test asks for others: the tests sign in
	// often.
	if cfg.Params == (password.Params{}) {
		cfg.Params = password.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}
	}
	ce.Env = gatewaytest.New(t, redistest.Start(t).Client(t), nil, zap.NewNop(), store.Options{}, func(e *gatewaytest.Env, d *gatewaytest.Deps) {
		var err error
		if ce.people, err = users.New(store.NewUsers(e.DB), cfg); err != nil {
			t.Fatal(err)
		}
		cat, _ := catalog.New("lumen")
		d.Console = &console.Deps{Users: ce.people, Accounts: e.Accounts, Directory: store.NewUsers(e.DB), Secrets: e.Hooks, Catalog: cat,
			Upstreams:     func(ctx context.Context) ([]upstream.Status, error) { return upstream.Statuses(ctx, e.RDB) },
			UpstreamsFile: func(ctx context.Context) (*upstream.FileState, error) { return upstream.ReadFileState(ctx, e.RDB) }}
		if edit != nil {
			edit(d)
		}
	})
	ctx := context.Background()
	for _, u := range []struct {
		acct, email string
		admin       bool
	}{{ce.AcctA, emailA, false}, {ce.AcctB, emailB, false}, {ce.AcctA, emailAdmin, true}} {
		if _, err := ce.people.Create(ctx, u.acct, u.email, consolePW, u.admin); err != nil {
			t.Fatal(err)
		}
	}
	return ce
}

// browserish is a console client: a cookie jar, the session's CSRF token,
// and the Origin a browser on the console's page sends.
type browserish struct {
	t    *testing.T
	e    *consoleEnv
	c    *http.Client
	csrf string
}

func (ce *consoleEnv) client() *browserish {
	jar, _ := cookiejar.New(nil)
	return &browserish{t: ce.T, e: ce, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browserish) send(method, path string, hdr map[string]string, body string) gatewaytest.Reply {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.e.Srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet {
		req.Header.Set("Origin", b.e.Srv.URL)
		if b.csrf != "" {
			req.Header.Set(console.HeaderCSRF, b.csrf)
		}
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return gatewaytest.Reply{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

// signIn signs in and keeps the CSRF token.
func (b *browserish) signIn(email, pw string) gatewaytest.Reply {
	b.t.Helper()
	r := b.send("POST", "/console/api/session", nil, `{"email":"`+email+`","password":"`+pw+`"}`)
	if r.Status == 200 {
		var env struct {
			Data struct {
				CSRFToken string `json:"csrf_token"`
			} `json:"data"`
		}
		_ = json.Unmarshal(r.Body, &env)
		b.csrf = env.Data.CSRFToken
	}
	return r
}

func (b *browserish) mustSignIn(email string) {
	b.t.Helper()
	if r := b.signIn(email, consolePW); r.Status != 200 {
		b.t.Fatalf("sign-in as %s: %d %s", email, r.Status, r.Body)
	}
}

// data decodes a console gatewaytest.Reply's data into v.
func consoleData(t *testing.T, r gatewaytest.Reply, v any) {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &env); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("data %s: %v", env.Data, err)
	}
}

func sessionCookie(t *testing.T, r gatewaytest.Reply) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == console.SessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", console.SessionCookie, r.Header.Values("Set-Cookie"))
	return nil
}

func TestConsoleSignIn(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	wrong := b.signIn(emailA, "not the password")
	unknown := b.signIn("nobody@a.example", consolePW)
	for _, r := range []gatewaytest.Reply{wrong, unknown} {
		gatewaytest.AssertEnvelope(t, r, 401, "wrong email or password")
		if len(r.Header.Values("Set-Cookie")) != 0 {
			t.Errorf("a failed sign-in set a cookie: %v", r.Header.Values("Set-Cookie"))
		}
	}
	if string(wrong.Body) != string(unknown.Body) {
		t.Errorf("a wrong password (%s) and an unknown email (%s) answer differently", wrong.Body, unknown.Body)
	}
	if r := b.send("GET", "/console/api/session", nil, ""); r.Status != 401 {
		t.Fatalf("session before sign-in: %d", r.Status)
	}

	r := b.signIn("  OWNER@A.example ", consolePW) // emails match whatever their case
	if r.Status != 200 {
		t.Fatalf("sign-in: %d %s", r.Status, r.Body)
	}
	ck := sessionCookie(t, r)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/console" || ck.Secure || len(ck.Value) < 40 {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Lax, Path=/console, not Secure over plain HTTP, a long opaque value", ck)
	}
	if b.csrf == "" {
		t.Fatal("no csrf_token in the sign-in's gatewaytest.Reply")
	}
	if strings.Contains(string(r.Body), ck.Value) {
		t.Error("the session id is in the body")
	}
	var who struct {
		User struct {
			Email string `json:"email"`
		} `json:"user"`
		CSRFToken string `json:"csrf_token"`
	}
	consoleData(t, b.send("GET", "/console/api/session", nil, ""), &who)
	if who.User.Email != emailA || who.CSRFToken != b.csrf {
		t.Errorf("session %+v; want %s with the sign-in's token", who, emailA)
	}

	// Session fixation: signing in again gives a new id and ends the one
	// the client brought.
	old := ck.Value
	second := sessionCookie(t, b.signIn(emailA, consolePW))
	if second.Value == old {
		t.Fatal("a second sign-in kept the session id")
	}
	req, _ := http.NewRequest("GET", ce.Srv.URL+"/console/api/session", nil)
	req.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: old})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("the session before the second sign-in still works: %v %v", resp.StatusCode, err)
	}

	// Signing out ends it.
	if r := b.send("DELETE", "/console/api/session", nil, ""); r.Status != 200 {
		t.Fatalf("sign out: %d %s", r.Status, r.Body)
	}
	if r := b.send("GET", "/console/api/session", nil, ""); r.Status != 401 {
		t.Errorf("session after sign-out: %d", r.Status)
	}
}

func TestConsoleCookieSecureBehindTLS(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	// A gateway whose public URL is https marks it Secure.
	h := gatewaytest.Handler(gatewaytest.Deps{Config: web.Config{Log: zap.NewNop()}, Console: &console.Deps{Users: ce.people, Accounts: ce.Accounts, SecureCookie: true}})
	rec := httptest.NewRecorder()
	req, _ := http.NewRequest("POST", "/console/api/session", strings.NewReader(`{"email":"`+emailA+`","password":"`+consolePW+`"}`))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	ck := sessionCookie(t, gatewaytest.Reply{Status: rec.Code, Header: rec.Header()})
	if !ck.Secure {
		t.Errorf("cookie %+v is not Secure", ck)
	}
}

func TestConsoleWritesNeedCSRFAndOrigin(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	b.mustSignIn(emailA)
	body := `{"name":"ci"}`
	cases := []struct {
		name   string
		hdr    map[string]string
		status int
		msg    string
	}{
		{"no token", map[string]string{console.HeaderCSRF: ""}, 403, "X-CSRF-Token"},
		{"wrong token", map[string]string{console.HeaderCSRF: "not-the-token"}, 403, "X-CSRF-Token"},
		{"another origin", map[string]string{"Origin": "https://evil.example"}, 403, "own origin"},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": ""}, 403, "own origin"},
		{"a null origin", map[string]string{"Origin": "null"}, 403, "own origin"},
		{"the gateway's host over another scheme", map[string]string{"Origin": strings.Replace(ce.Srv.URL, "http://", "https://", 1)}, 403, "own origin"},
		{"the gateway's origin with a path", map[string]string{"Origin": ce.Srv.URL + "/"}, 403, "own origin"},
		{"the gateway's origin with a user", map[string]string{"Origin": strings.Replace(ce.Srv.URL, "http://", "http://u@", 1)}, 403, "own origin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.AssertEnvelope(t, b.send("POST", "/console/api/keys", c.hdr, body), c.status, c.msg)
		})
	}
	var keys struct {
		Keys []json.RawMessage `json:"keys"`
	}
	consoleData(t, b.send("GET", "/console/api/keys", nil, ""), &keys)
	if len(keys.Keys) != 1 { // account A's first key, from env
		t.Fatalf("refused writes made keys: %d listed", len(keys.Keys))
	}
	if r := b.send("POST", "/console/api/keys", nil, body); r.Status != 200 {
		t.Fatalf("a write with the token from the console's origin: %d %s", r.Status, r.Body)
	}
	// Sign-in from another origin is refused too (login CSRF).
	other := ce.client()
	gatewaytest.AssertEnvelope(t, other.send("POST", "/console/api/session", map[string]string{"Origin": "https://evil.example"},
		`{"email":"`+emailA+`","password":"`+consolePW+`"}`), 403, "own origin")
}

func TestConsoleSignInThrottled(t *testing.T) {
	cfg := users.Defaults
	cfg.MaxPerPair, cfg.MaxPerAddr = 3, 5
	ce := newConsoleEnv(t, cfg)
	b := ce.client()
	for i := range 3 {
		gatewaytest.AssertEnvelope(t, b.signIn(emailA, "wrong"+string(rune('a'+i))), 401, "wrong email or password")
	}
	// This email's budget from this address is spent: even the right
	// password waits.
	r := b.signIn(emailA, consolePW)
	gatewaytest.AssertEnvelope(t, r, 429, "too many failed sign-ins")
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After %q", ra)
	}
	// Another email from the same address still signs in, until the
	// address's budget (5 attempts) is spent too.
	b.mustSignIn(emailB)
	for range 2 {
		b.signIn(emailB, "wrong")
	}
	gatewaytest.AssertEnvelope(t, b.signIn(emailAdmin, consolePW), 429, "too many failed sign-ins")
}

// Guesses made at once are each counted before they are checked: a burst
// cannot pass the budget.
func TestConsoleSignInThrottledUnderConcurrency(t *testing.T) {
	cfg := users.Defaults
	cfg.MaxPerPair = 3
	ce := newConsoleEnv(t, cfg)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := ce.client().signIn(emailA, "guess"+strconv.Itoa(i))
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[401] != 3 || statuses[429] != 37 {
		t.Fatalf("40 guesses at once: %v; want 3 checked (401) and 37 refused (429)", statuses)
	}
}

// Someone guessing an owner's password from elsewhere does not lock the
// owner out: the budget is per email and network.
func TestConsoleSignInNoLockout(t *testing.T) {
	cfg := users.Defaults
	cfg.MaxPerPair = 3
	// The test is the trusted proxy: X-Forwarded-For names the client.
	ce := newConsoleEnvWith(t, cfg, func(d *gatewaytest.Deps) {
		d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	attacker, owner := ce.client(), ce.client()
	from := func(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }
	body := func(pw string) string { return `{"email":"` + emailA + `","password":"` + pw + `"}` }
	for range 5 {
		attacker.send("POST", "/console/api/session", from("198.51.100.7"), body("guess"))
	}
	gatewaytest.AssertEnvelope(t, attacker.send("POST", "/console/api/session", from("198.51.100.7"), body(consolePW)), 429, "too many failed sign-ins")
	if r := owner.send("POST", "/console/api/session", from("203.0.113.9"), body(consolePW)); r.Status != 200 {
		t.Fatalf("the owner from their own address: %d %s", r.Status, r.Body)
	}
	// An IPv6 client's /64 is one network: other addresses of it share the
	// budget.
	for i := range 3 {
		attacker.send("POST", "/console/api/session", from("2001:db8:1:2::"+strconv.Itoa(i+1)), body("guess"))
	}
	gatewaytest.AssertEnvelope(t, attacker.send("POST", "/console/api/session", from("2001:db8:1:2::99"), body(consolePW)), 429, "too many failed sign-ins")
}

// A flood of wrong sign-ins for one email from many addresses, many at
// once, costs the owner nothing where they signed in before, and leaves
// other users' sign-ins answered: refusals and sign-ins never checked
// spend no budget, the owner's known network is spared failures from
// elsewhere, and the wait for a hashing slot is in turn with the flood.
func TestConsoleSignInFlood(t *testing.T) {
	cfg := users.Defaults
	// Hashes dear enough that the flood keeps every slot busy.
	cfg.Params = password.Params{Memory: 1024, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}
	ce := newConsoleEnvWith(t, cfg, func(d *gatewaytest.Deps) {
		d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		d.RequestTimeout = 800 * time.Millisecond // EASEL_REDIS_TIMEOUT's default, twice
	})
	from := func(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }
	body := func(email, pw string) string { return `{"email":"` + email + `","password":"` + pw + `"}` }
	const ownerAddr = "127.0.0.2"
	if r := ce.client().send("POST", "/console/api/session", from(ownerAddr), body(emailA, consolePW)); r.Status != 200 {
		t.Fatalf("the owner's first sign-in: %d %s", r.Status, r.Body)
	}

	const attempts, addrs, atOnce = 250, 25, 16
	var (
		mu      sync.Mutex
		flood   = map[int]int{}
		refused []string
		wg      sync.WaitGroup
	)
	next := make(chan int)
	for range atOnce {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := ce.client()
			for i := range next {
				r := b.send("POST", "/console/api/session", from("127.0.0."+strconv.Itoa(10+i%addrs)), body(emailA, "guess "+strconv.Itoa(i)))
				if r.Status == 503 && r.Header.Get("Retry-After") == "" {
					t.Errorf("a busy sign-in without Retry-After: %s", r.Body)
				}
				mu.Lock()
				flood[r.Status]++
				mu.Unlock()
			}
		}()
	}
	// Other users sign in while the flood runs, each from an address of
	// their own.
	begun := make(chan struct{})
	for i, email := range []string{emailB, emailAdmin, emailB, emailAdmin} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begun
			r := ce.client().send("POST", "/console/api/session", from("127.0.1."+strconv.Itoa(i+1)), body(email, consolePW))
			if r.Status != 200 {
				mu.Lock()
				refused = append(refused, strconv.Itoa(r.Status)+" "+string(r.Body))
				mu.Unlock()
			}
		}()
	}
	for i := range attempts {
		next <- i
		if i == 2*atOnce {
			close(begun)
		}
	}
	close(next)
	wg.Wait()
	for _, o := range refused {
		t.Errorf("another user's sign-in during the flood: %s; want 200", o)
	}
	t.Logf("the flood's answers: %v", flood)
	for status, n := range flood {
		if status != 401 && status != 429 && status != 503 {
			t.Errorf("%d of the flood's sign-ins answered %d; want 401, 429 or 503 (busy)", n, status)
		}
	}
	if flood[401] == 0 {
		t.Error("none of the flood's guesses was checked")
	}
	if r := ce.client().send("POST", "/console/api/session", from(ownerAddr), body(emailA, consolePW)); r.Status != 200 {
		t.Errorf("the owner from where they signed in before, after the flood: %d %s; want 200", r.Status, r.Body)
	}
}

func TestConsoleSessionLifetimes(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		cfg := users.Defaults
		cfg.Idle = time.Second
		ce := newConsoleEnv(t, cfg)
		b := ce.client()
		b.mustSignIn(emailA)
		time.Sleep(1500 * time.Millisecond)
		gatewaytest.AssertEnvelope(t, b.send("GET", "/console/api/account", nil, ""), 401, "sign in again")
	})
	t.Run("absolute", func(t *testing.T) {
		cfg := users.Defaults
		ce := newConsoleEnv(t, cfg)
		// Signed in almost Max ago: a second of it left, however used.
		ce.people.Now = func() time.Time { return time.Now().Add(-cfg.Max + time.Second) }
		b := ce.client()
		b.mustSignIn(emailA)
		if r := b.send("GET", "/console/api/account", nil, ""); r.Status != 200 {
			t.Fatalf("fresh session: %d", r.Status)
		}
		time.Sleep(1500 * time.Millisecond)
		gatewaytest.AssertEnvelope(t, b.send("GET", "/console/api/account", nil, ""), 401, "sign in again")
	})
	t.Run("password reset signs out", func(t *testing.T) {
		ce := newConsoleEnv(t, users.Defaults)
		b := ce.client()
		b.mustSignIn(emailA)
		if _, err := ce.people.ResetPassword(context.Background(), emailA, "a whole new password"); err != nil {
			t.Fatal(err)
		}
		gatewaytest.AssertEnvelope(t, b.send("GET", "/console/api/account", nil, ""), 401, "sign in again")
		gatewaytest.AssertEnvelope(t, b.signIn(emailA, consolePW), 401, "wrong email or password")
		if r := b.signIn(emailA, "a whole new password"); r.Status != 200 {
			t.Errorf("the new password: %d", r.Status)
		}
	})
	t.Run("disabled user", func(t *testing.T) {
		ce := newConsoleEnv(t, users.Defaults)
		b := ce.client()
		b.mustSignIn(emailA)
		if _, err := ce.people.SetStatus(context.Background(), emailA, account.Disabled); err != nil {
			t.Fatal(err)
		}
		gatewaytest.AssertEnvelope(t, b.send("GET", "/console/api/account", nil, ""), 401, "sign in again")
		gatewaytest.AssertEnvelope(t, b.signIn(emailA, consolePW), 401, "wrong email or password")
	})
}

type keyInfo struct {
	Prefix     string   `json:"prefix"`
	Name       string   `json:"name"`
	Status     string   `json:"status"`
	Spent      int64    `json:"spent"`
	Models     []string `json:"models"`
	AllowedIPs []string `json:"allowed_ips"`
	ExpiresAt  string   `json:"expires_at"`
	SpendLimit int64    `json:"spend_limit"`
}

func (b *browserish) newKey(body string) (string, keyInfo) {
	b.t.Helper()
	r := b.send("POST", "/console/api/keys", nil, body)
	if r.Status != 200 {
		b.t.Fatalf("create key %s: %d %s", body, r.Status, r.Body)
	}
	var out struct {
		Key  string  `json:"key"`
		Info keyInfo `json:"info"`
	}
	consoleData(b.t, r, &out)
	return out.Key, out.Info
}

func TestConsoleKeyLimitsAtAuthentication(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	b.mustSignIn(emailA)
	stdOnly, info := b.newKey(`{"name":"standard only","models":["standard"]}`)
	if info.Name != "standard only" || info.Status != "active" || strings.Join(info.Models, ",") != "standard" || !strings.HasPrefix(stdOnly, "esk_") {
		t.Fatalf("key %+v (%s)", info, stdOnly)
	}
	elsewhere, _ := b.newKey(`{"name":"office","allowed_ips":["10.0.0.0/8","2001:db8::1"]}`)
	here, _ := b.newKey(`{"name":"loopback","allowed_ips":["127.0.0.0/8"]}`)
	expiring, _ := b.newKey(`{"name":"soon","expires_at":"` + ce.Now.Add(time.Hour).UTC().Format(time.RFC3339) + `"}`)
	proBody := `{"model":"` + pro + `","task_type":"image","input":{"prompt":"a cat","image_size":"1K"}}`

	cases := []struct {
		name, key, body string
		status          int
		msg             string
	}{
		{"standard with a standard key", stdOnly, okBody, 200, ""},
		{"pro with a standard key", stdOnly, proBody, 403, "may not use model " + pro},
		{"from an address outside the key's", elsewhere, okBody, 403, "may not be used from this address (127.0.0.1): its owner limited the addresses it is accepted from"},
		{"from an address inside the key's", here, okBody, 200, ""},
		{"before expiry", expiring, okBody, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ce.Create(c.key, c.body)
			if c.status == 200 {
				if r.Status != 200 {
					t.Fatalf("%d %s", r.Status, r.Body)
				}
				return
			}
			gatewaytest.AssertEnvelope(t, r, c.status, c.msg)
		})
	}
	// Queries are refused from outside the key's addresses too.
	gatewaytest.AssertEnvelope(t, ce.Query(elsewhere, "lumen-0"), 403, "may not be used from this address")
	// Past its expiry (the gateway's clock), 401.
	ce.Now = ce.Now.Add(2 * time.Hour)
	gatewaytest.AssertEnvelope(t, ce.Create(expiring, okBody), 401, "expired at")
	var keys struct {
		Keys []keyInfo `json:"keys"`
	}
	consoleData(t, b.send("GET", "/console/api/keys", nil, ""), &keys)
	for _, k := range keys.Keys {
		if k.Name == "soon" && k.Status != "expired" {
			t.Errorf("the expired key is listed %s", k.Status)
		}
	}

	// Revoked from the console: refused at once (this env caches nothing).
	prefix := account.VisibleOf(stdOnly)
	if r := b.send("POST", "/console/api/keys/"+prefix+"/revoke", nil, ""); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	gatewaytest.AssertEnvelope(t, ce.Create(stdOnly, okBody), 401, "revoked")
}

func TestConsoleKeySpendLimit(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	b.mustSignIn(emailA)
	// Standard tasks cost 4: ten fit in 40.
	key, _ := b.newKey(`{"name":"capped","spend_limit":40}`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range 25 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := ce.Create(key, okBody)
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[200] != 10 || statuses[402] != 15 {
		t.Fatalf("25 racing creates under a limit of 10 tasks: %v; want 10 made, 15 refused 402", statuses)
	}
	r := ce.Create(key, okBody)
	gatewaytest.AssertEnvelope(t, r, 402, "API key spend limit reached: the key may spend 40 credits, it has spent 40 and this task costs 4")

	// A canceled (refunded) task gives its spend back.
	var list struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(ce.Do("GET", "/v1/task/list?limit=1&status=pending", map[string]string{"Authorization": "Bearer " + key}, "").Body, &list); err != nil || len(list.Tasks) == 0 {
		t.Fatalf("list: %v %+v", err, list)
	}
	if r := ce.Do("POST", "/v1/task/cancel", map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"}, `{"task_id":"`+list.Tasks[0].TaskID+`"}`); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	var keys struct {
		Keys []keyInfo `json:"keys"`
	}
	consoleData(t, b.send("GET", "/console/api/keys", nil, ""), &keys)
	for _, k := range keys.Keys {
		if k.Name == "capped" && (k.Spent != 36 || k.SpendLimit != 40) {
			t.Errorf("after a refund the key lists spent %d of %d; want 36 of 40", k.Spent, k.SpendLimit)
		}
	}
	if r := ce.Create(key, okBody); r.Status != 200 {
		t.Errorf("a create within the refunded room: %d %s", r.Status, r.Body)
	}
	// The console's own creates (no key) are not the key's spend.
	if r := b.send("POST", "/console/api/task/create", nil, okBody); r.Status != 200 {
		t.Errorf("console create: %d %s", r.Status, r.Body)
	}
}

func TestConsoleKeyRequestsValidated(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	b.mustSignIn(emailA)
	cases := []struct{ name, body, msg string }{
		{"no name", `{"models":["standard"]}`, "name is required"},
		{"unknown model", `{"name":"x","models":["ultra"]}`, "unknown model"},
		{"bad address", `{"name":"x","allowed_ips":["10.0.0.300/8"]}`, "neither an IP address nor a CIDR"},
		{"past expiry", `{"name":"x","expires_at":"2001-01-01T00:00:00Z"}`, "not in the future"},
		{"bad time", `{"name":"x","expires_at":"tomorrow"}`, "RFC 3339"},
		{"negative limit", `{"name":"x","spend_limit":-1}`, "spend_limit"},
		{"unknown field", `{"name":"x","quota":5}`, "unknown field"},
		{"control characters", `{"name":"a\u0007b"}`, "control characters"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.AssertEnvelope(t, b.send("POST", "/console/api/keys", nil, c.body), 400, c.msg)
		})
	}
}

func TestConsoleAccountsAreIsolated(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	// A task of account B, made with B's key.
	r := ce.Create(ce.KeyB, okBody)
	if r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var made struct {
		TaskID string `json:"task_id"`
	}
	consoleData(t, r, &made)
	b := ce.client()
	b.mustSignIn(emailA)
	bPrefix := account.VisibleOf(ce.KeyB)

	cases := []struct {
		name, method, path, body string
		status                   int
	}{
		{"B's task", "GET", "/console/api/task/query?task_id=" + made.TaskID, "", 404},
		{"B's task's webhooks", "GET", "/console/api/task/webhooks?task_id=" + made.TaskID, "", 404},
		{"cancel B's task", "POST", "/console/api/task/cancel", `{"task_id":"` + made.TaskID + `"}`, 404},
		{"revoke B's key", "POST", "/console/api/keys/" + bPrefix + "/revoke", "", 404},
		{"rename B's key", "PATCH", "/console/api/keys/" + bPrefix, `{"name":"mine now"}`, 404},
		{"revoke B's key by the whole key", "POST", "/console/api/keys/" + ce.KeyB + "/revoke", "", 404},
		{"the operator view", "GET", "/console/api/admin/accounts", "", 403},
		{"B's account in the operator view", "GET", "/console/api/admin/accounts/" + ce.AcctB, "", 403},
		{"credit B", "POST", "/console/api/admin/accounts/" + ce.AcctB + "/credits", `{"amount":5}`, 403},
		{"the upstreams", "GET", "/console/api/admin/upstreams", "", 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := b.send(c.method, c.path, nil, c.body)
			if r.Status != c.status {
				t.Fatalf("%d %s; want %d", r.Status, r.Body, c.status)
			}
		})
	}
	// A's lists hold nothing of B's.
	for _, path := range []string{"/console/api/task/list", "/console/api/ledger", "/console/api/keys", "/console/api/usage"} {
		body := string(b.send("GET", path, nil, "").Body)
		if strings.Contains(body, made.TaskID) || strings.Contains(body, bPrefix) || strings.Contains(body, ce.AcctB) {
			t.Errorf("%s shows account B's data: %s", path, body)
		}
	}
	// B's key still works: nothing above changed it.
	if r := ce.Query(ce.KeyB, made.TaskID); r.Status != 200 {
		t.Errorf("B's key after A's attempts: %d", r.Status)
	}
}

func TestConsoleCookieIsNoAPICredential(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	b.mustSignIn(emailA)
	r := b.send("POST", "/console/api/task/create", nil, okBody)
	var made struct {
		TaskID string `json:"task_id"`
	}
	consoleData(t, r, &made)
	u, _ := url.Parse(ce.Srv.URL)
	cookies := b.c.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/console/api/session"})
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", cookies)
	}
	if got := b.c.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/v1/files/x.png"}); len(got) != 0 {
		t.Errorf("the session cookie would be sent to result downloads: %v", got)
	}
	// Even sent there by hand, it is no credential.
	for _, path := range []string{"/v1/task/query?task_id=" + made.TaskID, "/v1/files/" + ce.AcctA + "/" + made.TaskID + "/0.png"} {
		req, _ := http.NewRequest("GET", ce.Srv.URL+path, nil)
		req.AddCookie(cookies[0])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 && resp.StatusCode != 403 {
			t.Errorf("%s with the session cookie alone: %d; want 401 or 403", path, resp.StatusCode)
		}
	}
}

func TestConsoleUsageAndLedger(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	for range 3 {
		if r := ce.Create(ce.KeyA, okBody); r.Status != 200 {
			t.Fatal(r.Status)
		}
	}
	b := ce.client()
	b.mustSignIn(emailA)
	var usage struct {
		Days   []account.UsageDay `json:"days"`
		Models []string           `json:"models"`
	}
	consoleData(t, b.send("GET", "/console/api/usage?days=30", nil, ""), &usage)
	if len(usage.Days) != 30 || strings.Join(usage.Models, ",") != std {
		t.Fatalf("usage: %d days, models %v", len(usage.Days), usage.Models)
	}
	today := usage.Days[29]
	if today.Date != time.Now().UTC().Format(time.DateOnly) || today.Models[std] != (account.Usage{Tasks: 3, Credits: 12}) {
		t.Errorf("today %+v; want 3 tasks, 12 credits of %s", today, std)
	}
	prefix := account.VisibleOf(ce.KeyA)
	if got := today.Keys[prefix][std]; got != (account.Usage{Tasks: 3, Credits: 12}) {
		t.Errorf("today's usage of key %s: %+v; want 3 tasks, 12 credits", prefix, today.Keys)
	}
	csv := b.send("GET", "/console/api/usage.csv?days=7", nil, "")
	if !strings.HasPrefix(csv.Header.Get("Content-Type"), "text/csv") || string(csv.Body) != "date,model,key,tasks,credits,refunds,refunded_credits\n"+today.Date+","+std+","+prefix+",3,12,0,0\n" {
		t.Errorf("CSV %s %q", csv.Header.Get("Content-Type"), csv.Body)
	}
	// Filtered by another key: nothing used.
	var other struct {
		Days []account.UsageDay `json:"days"`
		Keys []string           `json:"keys"`
	}
	consoleData(t, b.send("GET", "/console/api/usage?days=1&key=esk_nothing1", nil, ""), &other)
	if len(other.Days) != 1 || len(other.Days[0].Models) != 0 || strings.Join(other.Keys, ",") != prefix {
		t.Errorf("usage of a key that made nothing: %+v", other)
	}
	gatewaytest.AssertEnvelope(t, b.send("GET", "/console/api/usage?days=99", nil, ""), 400, "days must be")

	// The ledger, two at a time: the three debits and the initial credit.
	var seen []account.LedgerEntry
	before := ""
	for range 5 {
		var page struct {
			Entries []account.LedgerEntry `json:"entries"`
			Next    string                `json:"next"`
		}
		consoleData(t, b.send("GET", "/console/api/ledger?limit=2&before="+before, nil, ""), &page)
		seen = append(seen, page.Entries...)
		if before = page.Next; before == "" {
			break
		}
	}
	if len(seen) != 4 || seen[0].Kind != account.Debit || seen[3].Kind != account.Credit || seen[0].Balance != 10_000-12 {
		t.Errorf("ledger pages %+v", seen)
	}
	gatewaytest.AssertEnvelope(t, b.send("GET", "/console/api/ledger?before=x", nil, ""), 400, "before must be")
}

func TestConsoleOperatorView(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	b.mustSignIn(emailAdmin)
	var found struct {
		Accounts []account.Account `json:"accounts"`
	}
	for _, q := range []string{"", "B", ce.AcctB, emailB} {
		consoleData(t, b.send("GET", "/console/api/admin/accounts?q="+url.QueryEscape(q), nil, ""), &found)
		ids := []string{}
		for _, a := range found.Accounts {
			ids = append(ids, a.ID)
		}
		if !strings.Contains(strings.Join(ids, ","), ce.AcctB) {
			t.Errorf("q=%q found %v; want account b (%s)", q, ids, ce.AcctB)
		}
	}
	if r := b.send("POST", "/console/api/admin/accounts/"+ce.AcctB+"/credits", nil, `{"amount":25}`); r.Status != 200 {
		t.Fatalf("credits: %d %s", r.Status, r.Body)
	}
	if r := b.send("POST", "/console/api/admin/accounts/"+ce.AcctB+"/disable", nil, ""); r.Status != 200 {
		t.Fatalf("disable: %d %s", r.Status, r.Body)
	}
	gatewaytest.AssertEnvelope(t, ce.Create(ce.KeyB, okBody), 403, "disabled")
	// The disabled account's own users may look, not change anything.
	owner := ce.client()
	owner.mustSignIn(emailB)
	if r := owner.send("GET", "/console/api/keys", nil, ""); r.Status != 200 {
		t.Errorf("a disabled account's keys: %d", r.Status)
	}
	gatewaytest.AssertEnvelope(t, owner.send("POST", "/console/api/keys", nil, `{"name":"for later"}`), 403, "disabled")
	gatewaytest.AssertEnvelope(t, owner.send("POST", "/console/api/webhook-secret/rotate", nil, ""), 403, "disabled")
	// The workers' upstream pool, as they recorded it.
	pl, err := upstream.Parse([]byte(`{"upstreams":[{"name":"main","provider":"gemini","api_key":"secret-key-1"}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := upstream.Publish(context.Background(), ce.RDB, pl); err != nil {
		t.Fatal(err)
	}
	r := b.send("GET", "/console/api/admin/upstreams", nil, "")
	var ups struct {
		Upstreams []upstream.Status `json:"upstreams"`
	}
	consoleData(t, r, &ups)
	if len(ups.Upstreams) != 1 || ups.Upstreams[0].Name != "main" || ups.Upstreams[0].Breaker != upstream.Closed || strings.Contains(string(r.Body), "secret-key-1") {
		t.Errorf("upstreams %s", r.Body)
	}
	// The file's state: a change the workers refused shows, with why.
	loaded := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	if err := upstream.RecordLoaded(context.Background(), ce.RDB, "/etc/easel/upstreams.json", loaded); err != nil {
		t.Fatal(err)
	}
	if err := upstream.RecordRefused(context.Background(), ce.RDB, "/etc/easel/upstreams.json", loaded.Add(time.Minute), errors.New("upstream \"x\": provider is required")); err != nil {
		t.Fatal(err)
	}
	var withFile struct {
		File *upstream.FileState `json:"file"`
	}
	consoleData(t, b.send("GET", "/console/api/admin/upstreams", nil, ""), &withFile)
	if f := withFile.File; f == nil || f.Path != "/etc/easel/upstreams.json" || !f.LoadedAt.Equal(loaded) || f.RefusedAt == nil ||
		!f.RefusedAt.Equal(loaded.Add(time.Minute)) || f.Refusal != `upstream "x": provider is required` {
		t.Errorf("the upstreams file's state %+v", f)
	}
	var detail struct {
		Account account.Account `json:"account"`
		Users   []account.User  `json:"users"`
	}
	consoleData(t, b.send("GET", "/console/api/admin/accounts/"+ce.AcctB, nil, ""), &detail)
	if detail.Account.Credits != 10_025 || detail.Account.Status != account.Disabled || len(detail.Users) != 1 || detail.Users[0].Email != emailB {
		t.Errorf("account b %+v, users %+v", detail.Account, detail.Users)
	}
}

// An operator sees each key's limits and edits or revokes a key of any
// account, within that account only; a member cannot.
func TestConsoleOperatorEditsAndRevokesKeys(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	op := ce.client()
	op.mustSignIn(emailAdmin)
	prefixB := account.VisibleOf(ce.KeyB)
	keyPath := "/console/api/admin/accounts/" + ce.AcctB + "/keys/" + prefixB
	type keyView struct {
		Prefix     string   `json:"prefix"`
		Name       string   `json:"name"`
		Status     string   `json:"status"`
		Models     []string `json:"models"`
		AllowedIPs []string `json:"allowed_ips"`
		ExpiresAt  string   `json:"expires_at"`
		SpendLimit int64    `json:"spend_limit"`
	}
	var k keyView
	consoleData(t, op.send("PATCH", keyPath, nil,
		`{"name":"b's ci","models":["standard"],"allowed_ips":["203.0.113.0/24"],"expires_at":"2099-01-31T00:00:00Z","spend_limit":500}`), &k)
	if k.Prefix != prefixB || k.Name != "b's ci" || k.Status != "active" || len(k.Models) != 1 || k.Models[0] != "standard" ||
		len(k.AllowedIPs) != 1 || k.AllowedIPs[0] != "203.0.113.0/24" || k.SpendLimit != 500 || !strings.HasPrefix(k.ExpiresAt, "2099-01-31") {
		t.Errorf("the key after an operator's edit: %+v", k)
	}
	// The account's view lists the limits.
	var detail struct {
		Keys []keyView `json:"keys"`
	}
	consoleData(t, op.send("GET", "/console/api/admin/accounts/"+ce.AcctB, nil, ""), &detail)
	if len(detail.Keys) != 1 || detail.Keys[0].SpendLimit != 500 || len(detail.Keys[0].AllowedIPs) != 1 {
		t.Errorf("account b's keys %+v; want the limits just set", detail.Keys)
	}
	// The limit holds at authentication: the key is refused from elsewhere.
	gatewaytest.AssertEnvelope(t, ce.Create(ce.KeyB, okBody), 403, "")
	// Removing limits: empty lists and expiry, no spend limit.
	k = keyView{}
	consoleData(t, op.send("PATCH", keyPath, nil, `{"models":[],"allowed_ips":[],"expires_at":"","spend_limit":0}`), &k)
	if len(k.Models) != 0 || len(k.AllowedIPs) != 0 || k.ExpiresAt != "" || k.SpendLimit != 0 {
		t.Errorf("the key after its limits were removed: %+v", k)
	}
	if r := ce.Create(ce.KeyB, okBody); r.Status != 200 {
		t.Fatalf("create with the key freed: %d %s", r.Status, r.Body)
	}
	// Within the account only: another account's id with this prefix is
	// not found.
	gatewaytest.AssertEnvelope(t, op.send("PATCH", "/console/api/admin/accounts/"+ce.AcctA+"/keys/"+prefixB, nil, `{"name":"x"}`), 404, "")
	gatewaytest.AssertEnvelope(t, op.send("POST", "/console/api/admin/accounts/"+ce.AcctA+"/keys/"+prefixB+"/revoke", nil, ""), 404, "")
	gatewaytest.AssertEnvelope(t, op.send("PATCH", keyPath, nil, `{"models":["no-such-model"]}`), 400, "unknown model")
	// A member may not.
	member := ce.client()
	member.mustSignIn(emailA)
	gatewaytest.AssertEnvelope(t, member.send("PATCH", keyPath, nil, `{"name":"x"}`), 403, "admin users")
	gatewaytest.AssertEnvelope(t, member.send("POST", keyPath+"/revoke", nil, ""), 403, "admin users")
	k = keyView{}
	consoleData(t, op.send("POST", keyPath+"/revoke", nil, ""), &k)
	if k.Status != "revoked" {
		t.Errorf("the key after an operator's revoke: %+v", k)
	}
	if r := ce.Create(ce.KeyB, okBody); r.Status != 401 {
		t.Errorf("create with the revoked key: %d %s; want 401", r.Status, r.Body)
	}
}

// The playground's uploads: the public API's, for the session's account,
// a write like the others (its CSRF token, its origin, an active
// account); the URL it answers is taken by the console's create.
func TestConsoleUploads(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	b.mustSignIn(emailA)
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 6, 4))); err != nil {
		t.Fatal(err)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "small.png")
	fw.Write(img.Bytes())
	mw.Close()
	multi := map[string]string{"Content-Type": mw.FormDataContentType()}
	for _, tt := range []struct {
		name   string
		hdr    map[string]string
		body   string
		status int
		msg    string
	}{
		{"no CSRF token", map[string]string{"Content-Type": mw.FormDataContentType(), console.HeaderCSRF: ""}, form.String(), 403, "X-CSRF-Token"},
		{"another origin", map[string]string{"Content-Type": mw.FormDataContentType(), "Origin": "https://evil.example"}, form.String(), 403, "own origin"},
		{"not an image", map[string]string{"Content-Type": "image/png"}, "plain text", 415, "not a PNG, JPEG, WebP or GIF"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gatewaytest.AssertEnvelope(t, b.send("POST", "/console/api/uploads", tt.hdr, tt.body), tt.status, tt.msg)
		})
	}
	var up struct {
		URL           string `json:"url"`
		ContentType   string `json:"content_type"`
		Width, Height int
	}
	consoleData(t, b.send("POST", "/console/api/uploads", multi, form.String()), &up)
	if up.ContentType != "image/png" || up.Width != 6 || up.Height != 4 || !strings.Contains(up.URL, "/v1/files/uploads/") {
		t.Fatalf("upload answered %+v; want the 6x4 PNG's signed URL", up)
	}
	body := `{"model":"` + std + `","task_type":"image","input":{"prompt":"edit it","image_urls":["` + up.URL + `"]}}`
	if r := b.send("POST", "/console/api/task/create", nil, body); r.Status != 200 {
		t.Errorf("a create with the uploaded URL: %d %s", r.Status, r.Body)
	}
}

func TestConsolePage(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	b := ce.client()
	if r := b.send("GET", "/console", nil, ""); r.Status != 301 || r.Header.Get("Location") != "/console/" {
		t.Errorf("/console: %d %s", r.Status, r.Header.Get("Location"))
	}
	r := b.send("GET", "/console/", nil, "")
	if r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/console/: %d %s", r.Status, r.Header.Get("Content-Type"))
	}
	csp := r.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %s", csp, want)
		}
	}
	for _, tok := range strings.Fields(strings.ReplaceAll(csp, ";", " ")) {
		switch tok {
		case "'unsafe-inline'", "'unsafe-eval'", "http:", "https:", "*", "data:":
			t.Errorf("CSP %q allows %s", csp, tok)
		}
	}
	page := string(r.Body)
	for _, asset := range []string{"app.js", "style.css"} {
		if !strings.Contains(page, asset+"?v=") {
			t.Errorf("the page does not name %s by version", asset)
		}
		if a := b.send("GET", "/console/"+asset, nil, ""); a.Status != 200 {
			t.Errorf("%s: %d", asset, a.Status)
		}
	}
	for _, bad := range []string{"<script>", "style=", `src="http`, `href="http://`, "<link rel=\"stylesheet\" href=\"http"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page has inline script or style, or loads something from elsewhere (%s)", bad)
		}
	}
	for _, p := range []string{"/console/../go.mod", "/console/nope.js", "/console/sub/app.js"} {
		if r := b.send("GET", p, nil, ""); r.Status != 404 {
			t.Errorf("%s: %d; want 404", p, r.Status)
		}
	}
}

// A disabled account's users change nothing of it, its admin users
// included: an admin's exemption covers the operator routes only (to
// enable the account again). Signing out is no change of the account.
func TestConsoleDisabledAccountChangesNothing(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	ctx := context.Background()
	op := ce.client()
	op.mustSignIn(emailAdmin) // an admin user of account A
	owner := ce.client()
	owner.mustSignIn(emailA)
	if err := ce.Accounts.SetStatus(ctx, ce.AcctA, account.Disabled); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name         string
		b            *browserish
		method, path string
		body         string
		want         int
	}{
		{"the owner mints a key", owner, "POST", "/console/api/keys", `{"name":"for later"}`, 403},
		{"an admin mints a key of its own disabled account", op, "POST", "/console/api/keys", `{"name":"for later"}`, 403},
		{"an admin rotates its disabled account's secret", op, "POST", "/console/api/webhook-secret/rotate", "", 403},
		{"an admin creates a task for its disabled account", op, "POST", "/console/api/task/create", okBody, 403},
		{"the owner uploads an image", owner, "POST", "/console/api/uploads", "", 403},
		{"an admin looks at the keys", op, "GET", "/console/api/keys", "", 200},
		{"an admin credits the account in the operator view", op, "POST", "/console/api/admin/accounts/" + ce.AcctA + "/credits", `{"amount":1}`, 200},
		{"an admin enables the account in the operator view", op, "POST", "/console/api/admin/accounts/" + ce.AcctA + "/enable", "", 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == 200 {
				if r := tt.b.send(tt.method, tt.path, nil, tt.body); r.Status != 200 {
					t.Fatalf("%s %s: %d %s", tt.method, tt.path, r.Status, r.Body)
				}
				return
			}
			gatewaytest.AssertEnvelope(t, tt.b.send(tt.method, tt.path, nil, tt.body), tt.want, "disabled")
		})
	}
	// Enabled again by its admin: the owner changes things again.
	if r := owner.send("POST", "/console/api/keys", nil, `{"name":"now"}`); r.Status != 200 {
		t.Errorf("after enable: %d %s", r.Status, r.Body)
	}
}

// A user of a disabled account can still sign out.
func TestConsoleDisabledAccountSignsOut(t *testing.T) {
	ce := newConsoleEnv(t, users.Defaults)
	owner := ce.client()
	owner.mustSignIn(emailA)
	if err := ce.Accounts.SetStatus(context.Background(), ce.AcctA, account.Disabled); err != nil {
		t.Fatal(err)
	}
	if r := owner.send("DELETE", "/console/api/session", nil, ""); r.Status != 200 {
		t.Fatalf("sign out: %d %s", r.Status, r.Body)
	}
	gatewaytest.AssertEnvelope(t, owner.send("GET", "/console/api/account", nil, ""), 401, "sign in")
}
