package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/webhook"
)

// hookSink is a webhook receiver on loopback (the stack's egress policy
// lets workers reach it: EASEL_FETCH_ALLOW_PRIVATE). Each path answers its
// scripted statuses in turn, the last one again once they run out, and
// keeps what it received.
type hookSink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	answers map[string][]int
	got     map[string][]hookCall
}

type hookCall struct {
	header http.Header
	body   []byte
}

func newHookSink(t *testing.T, answers map[string][]int) *hookSink {
	t.Helper()
	s := &hookSink{answers: answers, got: map[string][]hookCall{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.got[r.URL.Path])
		s.got[r.URL.Path] = append(s.got[r.URL.Path], hookCall{header: r.Header.Clone(), body: b})
		a := s.answers[r.URL.Path]
		s.mu.Unlock()
		code := http.StatusOK
		if len(a) > 0 {
			code = a[min(n, len(a)-1)]
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *hookSink) calls(path string) []hookCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hookCall(nil), s.got[path]...)
}

// waitCalls waits until path has received at least n deliveries matching
// keep (nil: all), and returns them.
func (s *hookSink) waitCalls(t *testing.T, path string, n int, keep func(hookCall) bool) []hookCall {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out []hookCall
		for _, c := range s.calls(path) {
			if keep == nil || keep(c) {
				out = append(out, c)
			}
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s received %d deliveries; want %d", path, len(out), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type hookBody struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

func parseHook(t *testing.T, c hookCall) hookBody {
	t.Helper()
	var b hookBody
	if err := json.Unmarshal(c.body, &b); err != nil {
		t.Fatalf("delivery body %s: %v", c.body, err)
	}
	return b
}

func ofType(ev string) func(hookCall) bool {
	return func(c hookCall) bool {
		var b hookBody
		return json.Unmarshal(c.body, &b) == nil && b.Type == ev
	}
}

type webhookLog struct {
	TaskID      string   `json:"task_id"`
	CallbackURL string   `json:"callback_url"`
	Events      []string `json:"events"`
	Deliveries  []struct {
		WebhookID string `json:"webhook_id"`
		Type      string `json:"type"`
		State     string `json:"state"`
		Attempts  []struct {
			Time       int64  `json:"time"`
			StatusCode int    `json:"status_code"`
			LatencyMs  int64  `json:"latency_ms"`
			Error      string `json:"error"`
		} `json:"attempts"`
	} `json:"deliveries"`
}

func (c *client) webhookLog(id string) webhookLog {
	c.t.Helper()
	status, _, b := c.do("GET", "/v1/task/webhooks?task_id="+url.QueryEscape(id), "", nil)
	var l webhookLog
	if err := json.Unmarshal(b, &l); status != 200 || err != nil {
		c.t.Fatalf("webhooks of %s: %d %s", id, status, b)
	}
	return l
}

// adminSecret reads an account's webhook secret from the admin API.
func adminSecret(t *testing.T, base, acct string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/admin/v1/accounts/"+acct+"/webhook-secret", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Data struct {
			AccountID string `json:"account_id"`
			Secret    string `json:"secret"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil || resp.StatusCode != 200 || env.Data.AccountID != acct || !strings.HasPrefix(env.Data.Secret, "whsec_") {
		t.Fatalf("admin webhook secret: %d %+v %v", resp.StatusCode, env, err)
	}
	return env.Data.Secret
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// TestWebhooks runs tasks with a callback_url on the real stack: each
// event is delivered, signed with the account's secret, with the record
// the query answers; a 500 is retried, a 400 is not; progress is
// delivered when asked for; every attempt is listed at /v1/task/webhooks.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 1500 * time.Millisecond, env: map[string]string{
		"EASEL_WEBHOOK_RETRY_INITIAL": "300ms", // retries within the test's time
	}})
	acct, key := s.newAccount(t, account.Spec{Name: "hooks", Credits: 10_000})
	secret := adminSecret(t, s.base, acct)
	sink := newHookSink(t, map[string][]int{"/flaky": {500, 200}, "/bad": {400}})
	withHook := func(path, extra string) string {
		return `{"model":"` + std + `","task_type":"image","input":{"prompt":"a lighthouse"},"callback_url":"` + sink.srv.URL + path + `"` + extra + `}`
	}
	verify := func(t *testing.T, c hookCall, id string) {
		t.Helper()
		checkWebhook(t, s.base, c.header, c.body) // as the OpenAPI document's webhooks say
		if err := webhook.Verify(secret, c.header, c.body, time.Now()); err != nil {
			t.Errorf("delivery %s does not verify with the admin API's secret: %v", c.header.Get("webhook-id"), err)
		}
		if c.header.Get("Content-Type") != "application/json" || c.header.Get("User-Agent") != "Easel-Webhooks/1.0" || !strings.HasPrefix(c.header.Get("webhook-id"), "msg_"+id+"_") {
			t.Errorf("delivery headers %v", c.header)
		}
	}

	t.Run("completed", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, s.base, key)
		id := c.create(withHook("/ok", ""))
		if rec, _, _ := c.poll(id, 30*time.Second); rec.Status != "completed" {
			t.Fatalf("task %s", rec.Status)
		}
		got := sink.waitCalls(t, "/ok", 1, nil)
		verify(t, got[0], id)
		b := parseHook(t, got[0])
		if got[0].header.Get("webhook-id") != "msg_"+id+"_completed" || b.Type != "task.completed" {
			t.Errorf("delivery %s of type %s", got[0].header.Get("webhook-id"), b.Type)
		}
		_, _, record := c.query(id)
		if !sameJSON(t, b.Data, record) {
			t.Errorf("delivered data\n%s\nthe query answers\n%s", b.Data, record)
		}
		if ts, err := time.Parse(time.RFC3339Nano, b.Timestamp); err != nil || time.Since(ts) > time.Minute {
			t.Errorf("timestamp %q", b.Timestamp)
		}
		time.Sleep(time.Second) // time for a duplicate to show
		if n := len(sink.calls("/ok")); n != 1 {
			t.Errorf("%d deliveries; want exactly 1", n)
		}
		l := c.webhookLog(id)
		if l.CallbackURL != sink.srv.URL+"/ok" || !reflect.DeepEqual(l.Events, []string{"task.completed", "task.failed", "task.canceled"}) ||
			len(l.Deliveries) != 1 || l.Deliveries[0].State != "delivered" || len(l.Deliveries[0].Attempts) != 1 || l.Deliveries[0].Attempts[0].StatusCode != 200 {
			t.Errorf("webhook log %+v", l)
		}
	})

	t.Run("500 then 200 is retried", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, s.base, key)
		id := c.create(withHook("/flaky", ""))
		got := sink.waitCalls(t, "/flaky", 2, nil)
		for _, g := range got {
			verify(t, g, id)
		}
		if got[0].header.Get("webhook-id") != got[1].header.Get("webhook-id") || string(got[0].body) != string(got[1].body) {
			t.Errorf("the retry is not the same message: %s %s / %s %s", got[0].header.Get("webhook-id"), got[0].body, got[1].header.Get("webhook-id"), got[1].body)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			l := c.webhookLog(id)
			if len(l.Deliveries) == 1 && l.Deliveries[0].State == "delivered" {
				a := l.Deliveries[0].Attempts
				if len(a) != 2 || a[0].StatusCode != 500 || a[0].Error == "" || a[1].StatusCode != 200 || a[1].Error != "" || a[1].Time < a[0].Time {
					t.Errorf("attempts %+v", a)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("webhook log %+v; want one delivered delivery", l)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("400 is not retried", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, s.base, key)
		id := c.create(withHook("/bad", ""))
		sink.waitCalls(t, "/bad", 1, nil)
		time.Sleep(2 * time.Second) // several retry delays
		if n := len(sink.calls("/bad")); n != 1 {
			t.Errorf("%d deliveries after a 400; want 1", n)
		}
		l := c.webhookLog(id)
		if len(l.Deliveries) != 1 || l.Deliveries[0].State != "failed" || len(l.Deliveries[0].Attempts) != 1 || l.Deliveries[0].Attempts[0].StatusCode != 400 {
			t.Errorf("webhook log %+v", l)
		}
	})

	t.Run("progress when asked", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, s.base, key)
		id := c.create(withHook("/progress", `,"callback_events":["task.progress","task.completed"]`))
		done := sink.waitCalls(t, "/progress", 1, ofType("task.completed"))
		verify(t, done[0], id)
		progress := sink.waitCalls(t, "/progress", 1, ofType("task.progress"))
		seen := map[string]bool{}
		for _, p := range progress {
			verify(t, p, id)
			var d struct {
				Status   string `json:"status"`
				Progress int    `json:"progress"`
			}
			_ = json.Unmarshal(parseHook(t, p).Data, &d)
			hid := p.header.Get("webhook-id")
			if !strings.HasPrefix(hid, "msg_"+id+"_progress_") || seen[hid] || d.Progress < 1 {
				t.Errorf("progress delivery %s with %+v (seen %v)", hid, d, seen)
			}
			seen[hid] = true
		}
		l := c.webhookLog(id)
		types := map[string]int{}
		for _, d := range l.Deliveries {
			types[d.Type]++
		}
		if types["task.completed"] != 1 || types["task.progress"] < 1 || !reflect.DeepEqual(l.Events, []string{"task.progress", "task.completed"}) {
			t.Errorf("webhook log %+v", l)
		}
	})

	t.Run("canceled", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, s.base, key)
		id := c.create(withHook("/canceled", ""))
		if st, _, b := c.do("POST", "/v1/task/cancel", `{"task_id":"`+id+`"}`, nil); st != 200 {
			t.Fatalf("cancel: %d %s", st, b)
		}
		got := sink.waitCalls(t, "/canceled", 1, nil)
		verify(t, got[0], id)
		b := parseHook(t, got[0])
		var d struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(b.Data, &d)
		if b.Type != "task.canceled" || d.Status != "canceled" || got[0].header.Get("webhook-id") != "msg_"+id+"_canceled" {
			t.Errorf("delivery %s: %s", got[0].header.Get("webhook-id"), got[0].body)
		}
	})

	t.Run("a task without a callback", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, s.base, key)
		id := c.create(createBody(std, `{"prompt":"p"}`))
		if l := c.webhookLog(id); l.CallbackURL != "" || len(l.Events) != 0 || len(l.Deliveries) != 0 {
			t.Errorf("webhook log %+v", l)
		}
		if st, _, _ := newClient(t, s.base, s.keyOther).do("GET", "/v1/task/webhooks?task_id="+id, "", nil); st != 404 {
			t.Errorf("another account's task: %d; want 404", st)
		}
	})
}
