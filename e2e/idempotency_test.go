package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
)

// Idempotent creates over HTTP: many concurrent requests with one key make
// one task and one charge, every 200 names it, the rest are 409 while it is
// being made; a later repeat replays it with Idempotent-Replayed; another
// body under the key is 422; a bad key 400; another account's key of the
// same name is its own.
func TestIdempotentCreates(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	const credits = 1000
	acct, key := s.newAccount(t, account.Spec{Name: "idem", Credits: credits, RateLimit: 10000})
	c := newClient(t, s.base, key)
	body := createBody(std, `{"prompt":"once"}`)
	idem := map[string]string{"Idempotency-Key": "order-42/attempt"}

	type answer struct {
		status   int
		id       string
		replayed bool
	}
	answers := make([]answer, 20)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			st, h, b := c.do("POST", "/v1/task/create", body, idem)
			var env struct {
				Data struct {
					TaskID string `json:"task_id"`
				} `json:"data"`
			}
			_ = json.Unmarshal(b, &env)
			answers[i] = answer{st, env.Data.TaskID, h.Get("Idempotent-Replayed") == "true"}
		})
	}
	wg.Wait()
	var id string
	for _, a := range answers {
		switch a.status {
		case 200:
			if id == "" {
				id = a.id
			}
			if a.id != id || a.id == "" {
				t.Errorf("200s name different tasks: %q and %q", id, a.id)
			}
		case 409:
		default:
			t.Errorf("concurrent create: %d", a.status)
		}
	}
	if id == "" {
		t.Fatal("no create answered 200")
	}
	// A repeat once it stands: the same task, replayed, nothing charged.
	st, h, b := c.do("POST", "/v1/task/create", body, idem)
	if st != 200 || h.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(b), id) {
		t.Errorf("repeat: %d %s, Idempotent-Replayed %q; want 200 with %s replayed", st, b, h.Get("Idempotent-Replayed"), id)
	}
	a, err := s.accounts.Get(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	if a.Credits != credits-4 {
		t.Errorf("balance %d; want %d, one charge", a.Credits, credits-4)
	}
	if tasks, err := accountTasks(context.Background(), s.tasks, acct); err != nil || len(tasks) != 1 {
		t.Errorf("%d tasks (%v); want 1", len(tasks), err)
	}
	if rec, _, _ := c.poll(id, 30*time.Second); rec.Status != "completed" {
		t.Errorf("the task: %s", rec.Status)
	}

	for _, tt := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
	}{
		{"another body", createBody(std, `{"prompt":"twice"}`), idem, 422},
		{"empty key", body, map[string]string{"Idempotency-Key": ""}, 400},
		{"key too long", body, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, 400},
		{"key not printable", body, map[string]string{"Idempotency-Key": "tab\there"}, 400},
		{"longest key", body, map[string]string{"Idempotency-Key": strings.Repeat("k", 255)}, 200},
	} {
		if st, _, b := c.do("POST", "/v1/task/create", tt.body, tt.hdr); st != tt.status || !strings.Contains(string(b), `"code":`) {
			t.Errorf("%s: %d %s; want %d", tt.name, st, b, tt.status)
		}
	}
	// Another account's key of the same name makes its own task.
	st, h, b = newClient(t, s.base, s.keyOther).do("POST", "/v1/task/create", body, idem)
	if st != 200 || h.Get("Idempotent-Replayed") != "" || strings.Contains(string(b), id) {
		t.Errorf("another account's key: %d %s replayed=%q; want a task of its own", st, b, h.Get("Idempotent-Replayed"))
	}
}
