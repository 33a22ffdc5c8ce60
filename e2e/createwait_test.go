package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
)

// TestWaitAndQuoteEndToEnd runs a create that waits for its image
// (Prefer: wait=N) and price quotes (dry_run=true) through the real
// gateway and worker: the waiting create answers with the completed
// record, whose result downloads; a quote prices as a create would and
// makes nothing; refusals are the create's.
func TestWaitAndQuoteEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 200 * time.Millisecond})
	id, key := s.newAccount(t, account.Spec{Name: "waits", Credits: 90, RateLimit: 1000, MaxInflight: 100})
	ctx := context.Background()
	stdOnly, _, err := s.accounts.NewKey(ctx, id, account.KeySpec{KeyLimits: account.KeyLimits{Models: []catalog.Tier{catalog.Standard}}})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s.base, key)
	c.http.Timeout = 90 * time.Second
	balance := func() int64 {
		t.Helper()
		a, err := s.accounts.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Credits
	}

	// A quote: priced, nothing made.
	status, _, b := c.do("POST", "/v1/task/create?dry_run=true", createBody(pro, `{"prompt":"a quote","image_size":"2K","num_images":2}`), nil)
	var quote struct {
		Data struct {
			Price, Balance int64
			Allowed        bool
		}
	}
	if err := json.Unmarshal(b, &quote); err != nil || status != 200 || quote.Data.Price != 36 || quote.Data.Balance != 90 || !quote.Data.Allowed {
		t.Fatalf("quote: %d %s", status, b)
	}
	if got := balance(); got != 90 {
		t.Errorf("balance %d after a quote; want 90", got)
	}
	for _, tt := range []struct {
		name, key, query, body string
		hdr                    map[string]string
		status                 int
		msg                    string
	}{
		{"a quote past the balance", key, "?dry_run=true", createBody(pro, `{"prompt":"p","num_images":4,"image_size":"4K"}`), nil, 402, "this task costs 96 credits and the balance is 90"},
		{"a quote for a model the key may not use", stdOnly, "?dry_run=true", createBody(pro, `{"prompt":"p"}`), nil, 403, ""},
		{"a wait too long", key, "", createBody(std, `{"prompt":"p"}`), map[string]string{"Prefer": "wait=600"}, 400, "Prefer: wait must be"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cc := newClient(t, s.base, tt.key)
			status, _, b := cc.do("POST", "/v1/task/create"+tt.query, tt.body, tt.hdr)
			var env envelope
			if err := json.Unmarshal(b, &env); err != nil || status != tt.status || env.Code != tt.status || !strings.Contains(env.Msg, tt.msg) {
				t.Errorf("%d %s; want %d with %q", status, b, tt.status, tt.msg)
			}
		})
	}
	if got := balance(); got != 90 {
		t.Errorf("balance %d after refusals; want 90", got)
	}

	// A create that waits gets its image in one request.
	status, hdr, b := c.do("POST", "/v1/task/create", createBody(std, `{"prompt":"a lighthouse, at once"}`), map[string]string{"Prefer": "wait=60"})
	var waited struct {
		Data struct {
			TaskID string     `json:"task_id"`
			Task   taskRecord `json:"task"`
		}
	}
	if err := json.Unmarshal(b, &waited); err != nil || status != 200 || waited.Data.Task.Status != "completed" || waited.Data.Task.TaskID != waited.Data.TaskID || len(waited.Data.Task.Results) != 1 {
		t.Fatalf("a waiting create: %d %s", status, b)
	}
	if hdr.Get("Preference-Applied") != "wait=60" {
		t.Errorf("Preference-Applied %q", hdr.Get("Preference-Applied"))
	}
	if cfg, format, _ := c.download(waited.Data.Task.Results[0]); format != "png" || cfg.Width == 0 {
		t.Errorf("the result: %s %dx%d", format, cfg.Width, cfg.Height)
	}
	if got := balance(); got != 86 {
		t.Errorf("balance %d after one standard task; want 86", got)
	}
}
