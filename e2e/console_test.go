package e2e

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/users"
)

// secondGateway starts another gateway on the stack's Redis and returns
// its base URL.
func secondGateway(t *testing.T, s *stack) string {
	t.Helper()
	ln := listen(t)
	env := maps.Clone(s.env)
	env["EASEL_HTTP_ADDR"] = ln.Addr().String()
	cfg, err := gateway.LoadConfig(env)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.Run(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second gateway: %v", err)
		}
	})
	base := "http://" + ln.Addr().String()
	waitHTTP(t, base+"/readyz")
	return base
}

// consoleUser makes a console user of a new account of the stack.
func consoleUser(t *testing.T, s *stack, email, pw string, admin bool) string {
	t.Helper()
	ctx := context.Background()
	acct, _ := s.newAccount(t, account.Spec{Name: "console " + email, Credits: 1000})
	rdb, err := redisconn.Open(ctx, s.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	people, err := users.New(store.NewUsers(store.NewDB(rdb, store.Options{})), users.Defaults)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := people.Create(ctx, acct, email, pw, admin); err != nil {
		t.Fatal(err)
	}
	return acct
}

// consoleSession is a signed-in console client of one gateway.
type consoleSession struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

func signIn(t *testing.T, base, email, pw string) *consoleSession {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	cs := &consoleSession{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	var out struct {
		Data struct {
			CSRFToken string `json:"csrf_token"`
		} `json:"data"`
	}
	if status := cs.call("POST", "/console/api/session", `{"email":"`+email+`","password":"`+pw+`"}`, &out); status != 200 {
		t.Fatalf("sign-in: %d", status)
	}
	cs.csrf = out.Data.CSRFToken
	return cs
}

func (cs *consoleSession) call(method, path, body string, out any) int {
	cs.t.Helper()
	req, _ := http.NewRequest(method, cs.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", cs.base)
	req.Header.Set("X-CSRF-Token", cs.csrf)
	resp, err := cs.c.Do(req)
	if err != nil {
		cs.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, out); err != nil {
			cs.t.Fatalf("%s %s: %v (%s)", method, path, err, raw)
		}
	}
	if resp.StatusCode != 200 {
		cs.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// A key made in one gateway's console is limited on every gateway: its
// models, its spend limit (held by the create script whichever gateway
// runs it) and its revocation (within the auth cache's lifetime). Runs
// on a Redis Cluster too (make test's cluster pass).
func TestConsoleKeysOnEveryGateway(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	other := secondGateway(t, s)
	consoleUser(t, s, "owner@e2e.example", "console password 1", false)
	cs := signIn(t, s.base, "owner@e2e.example", "console password 1")
	var made struct {
		Data struct {
			Key string `json:"key"`
		} `json:"data"`
	}
	// Standard tasks cost 4: two fit in 8.
	if st := cs.call("POST", "/console/api/keys", `{"name":"e2e","models":["standard"],"spend_limit":8}`, &made); st != 200 {
		t.Fatalf("create key: %d", st)
	}
	key := made.Data.Key
	proBody := `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","image_size":"1K"}}`
	stdBody := `{"model":"` + std + `","task_type":"image","input":{"prompt":"p"}}`
	for i, c := range []struct {
		base, body string
		status     int
	}{
		{other, proBody, 403},
		{s.base, proBody, 403},
		{other, stdBody, 200},
		{s.base, stdBody, 200},
		{other, stdBody, 402},
		{s.base, stdBody, 402},
	} {
		if st, body := post(t, c.base+"/v1/task/create", key, c.body); st != c.status {
			t.Errorf("create %d on %s: %d %s; want %d", i, c.base, st, body, c.status)
		}
	}
	prefix := account.VisibleOf(key)
	if st := cs.call("POST", "/console/api/keys/"+prefix+"/revoke", "", nil); st != 200 {
		t.Fatalf("revoke: %d", st)
	}
	// Every gateway refuses it within its auth cache's lifetime (2 s).
	deadline := time.Now().Add(5 * time.Second)
	for _, base := range []string{s.base, other} {
		for {
			st, _ := post(t, base+"/v1/task/query?task_id=x", key, "")
			if st == 401 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still takes the revoked key: %d", base, st)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// post sends an API request with a key (a GET when body is "").
func post(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	method := "POST"
	if body == "" {
		method = "GET"
	}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}
