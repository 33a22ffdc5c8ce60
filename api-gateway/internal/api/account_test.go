package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

// receiver is a webhook endpoint that records what it is sent and answers
// status.
type receiver struct {
	mu     sync.Mutex
	status int
	got    []received
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) (*receiver, *httptest.Server) {
	r := &receiver{status: http.StatusNoContent}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Clone(), b})
		st := r.status
		r.mu.Unlock()
		w.WriteHeader(st)
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

func (e *env) keyed(method, path, key, body string) reply {
	e.T.Helper()
	h := map[string]string{"Authorization": "Bearer " + key}
	if body != "" {
		h["Content-Type"] = "application/json"
	}
	return e.Do(method, path, h, body)
}

type endpointReply struct {
	Code int `json:"code"`
	Data struct {
		CallbackURL    string   `json:"callback_url"`
		CallbackEvents []string `json:"callback_events"`
	} `json:"data"`
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return v
}

// The account's default endpoint is refused by the address rules of
// callback_url (no private address under the default egress policy), and
// by its other rules.
func TestAccountWebhookRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name, body, msg string
		status          int
	}{
		{"a loopback address", `{"callback_url":"http://127.0.0.1:8080/hook"}`, "callback_url", 400},
		{"no URL", `{"callback_events":["task.completed"]}`, "callback_url is required", 400},
		{"not http", `{"callback_url":"ftp://hooks.example.com/x"}`, "absolute http or https", 400},
		{"an unknown event", `{"callback_url":"https://hooks.example.com/x","callback_events":["task.done"]}`, "is not an event", 400},
		{"no events", `{"callback_url":"https://hooks.example.com/x","callback_events":[]}`, "at least one event", 400},
		{"not an object", `[1]`, "JSON object", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertEnvelope(t, e.keyed("PUT", "/v1/account/webhook", e.KeyA, tc.body), tc.status, tc.msg)
		})
	}
	assertEnvelope(t, e.keyed("POST", "/v1/account/webhook/test", e.KeyA, ""), http.StatusConflict, "no webhook endpoint")
	assertEnvelope(t, e.Do("GET", "/v1/account/webhook", nil, ""), http.StatusUnauthorized, "")
	assertEnvelope(t, e.keyed("GET", "/v1/account/webhook/deliveries?limit=0", e.KeyA, ""), 400, "limit must be 1 to 100")
}

// An account sets, reads and clears its default endpoint; a test event
// reaches it signed with the account's secret; a task created without a
// callback_url sends its events there, listed on the account's delivery
// log, newest first, and redelivered on request.
func TestAccountWebhookEndToEnd(t *testing.T) {
	t.Parallel()
	rec, hookSrv := newReceiver(t)
	cat, _ := catalog.New("lumen")
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) {
		d.Decoder = &createreq.Decoder{Catalog: cat, Egress: egress.Policy{AllowPrivate: true}}
	})
	ctx := context.Background()
	url := hookSrv.URL + "/easel"

	if r := decode[endpointReply](t, e.keyed("GET", "/v1/account/webhook", e.KeyA, "")); r.Data.CallbackURL != "" || len(r.Data.CallbackEvents) != 0 {
		t.Errorf("endpoint before any set: %+v", r)
	}
	r := e.keyed("PUT", "/v1/account/webhook", e.KeyA, `{"callback_url":"`+url+`"}`)
	if got := decode[endpointReply](t, r); r.Status != 200 || got.Data.CallbackURL != url || strings.Join(got.Data.CallbackEvents, ",") != strings.Join(task.DefaultEvents, ",") {
		t.Fatalf("set: %d %s; want the URL with the default events", r.Status, r.Body)
	}
	if got := decode[endpointReply](t, e.keyed("GET", "/v1/account/webhook", e.KeyB, "")); got.Data.CallbackURL != "" {
		t.Errorf("another account sees an endpoint: %+v", got)
	}

	// The test event, signed as deliveries are.
	r = e.keyed("POST", "/v1/account/webhook/test", e.KeyA, "")
	var test struct {
		Data struct {
			WebhookID  string `json:"webhook_id"`
			Delivered  bool   `json:"delivered"`
			StatusCode int    `json:"status_code"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &test); err != nil || r.Status != 200 || !test.Data.Delivered || test.Data.StatusCode != 204 {
		t.Fatalf("test: %d %s", r.Status, r.Body)
	}
	secret, err := e.Hooks.Secret(ctx, e.AcctA)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	if len(rec.got) != 1 {
		t.Fatalf("receiver got %d requests; want 1", len(rec.got))
	}
	first := rec.got[0]
	rec.mu.Unlock()
	if err := webhook.Verify(secret, first.header, first.body, e.Now); err != nil {
		t.Errorf("test event's signature: %v", err)
	}
	if first.header.Get("webhook-id") != test.Data.WebhookID || !strings.Contains(string(first.body), `"type":"webhook.test"`) {
		t.Errorf("test event %v %s", first.header, first.body)
	}

	// A task without a callback takes the endpoint: canceled before it
	// starts, its cancel event is due to it.
	id := e.createID(e.KeyA, okBody)
	own := e.createID(e.KeyA, `{"model":"`+std+`","task_type":"image","input":{"prompt":"p"},"callback_url":"https://hooks.example.com/own"}`)
	for _, tid := range []string{id, own} {
		if r := e.keyed("POST", "/v1/task/cancel", e.KeyA, `{"task_id":"`+tid+`"}`); r.Status != 200 {
			t.Fatalf("cancel: %d %s", r.Status, r.Body)
		}
	}
	wh := decode[struct {
		CallbackURL string `json:"callback_url"`
	}](t, e.webhooks(e.KeyA, id))
	if wh.CallbackURL != url {
		t.Errorf("the task's webhooks name %q; want the account's endpoint", wh.CallbackURL)
	}
	if wh := decode[struct {
		CallbackURL string `json:"callback_url"`
	}](t, e.webhooks(e.KeyA, own)); wh.CallbackURL != "https://hooks.example.com/own" {
		t.Errorf("a task's own callback became %q", wh.CallbackURL)
	}

	// The gateway's queue records the cancel's delivery as queued: it is on
	// the account's log, newest first.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.Hooks.Queued(ctx, e.AcctA, id, task.EventCanceled, 0))
	must(e.Hooks.Queued(ctx, e.AcctA, own, task.EventCanceled, 0))
	_, err = e.Hooks.RecordAttempt(ctx, e.AcctA, id, task.EventCanceled, 0, webhook.Attempt{Time: e.Now, StatusCode: 500, Error: "HTTP 500"}, webhook.StateFailed, webhook.Outgoing{})
	must(err)
	type logReply struct {
		Data struct {
			Deliveries []struct {
				TaskID    string `json:"task_id"`
				Seq       int    `json:"seq"`
				WebhookID string `json:"webhook_id"`
				Type      string `json:"type"`
				State     string `json:"state"`
				Attempts  []struct {
					StatusCode int `json:"status_code"`
				} `json:"attempts"`
			} `json:"deliveries"`
		} `json:"data"`
	}
	lr := e.keyed("GET", "/v1/account/webhook/deliveries", e.KeyA, "")
	lg := decode[logReply](t, lr)
	if lr.Status != 200 || len(lg.Data.Deliveries) != 2 {
		t.Fatalf("deliveries: %d %s", lr.Status, lr.Body)
	}
	var mine = lg.Data.Deliveries[0]
	if mine.TaskID != id {
		mine = lg.Data.Deliveries[1]
	}
	if mine.State != "failed" || len(mine.Attempts) != 1 || mine.Type != task.EventCanceled || mine.WebhookID != webhook.MessageID(id, task.EventCanceled, 0) {
		t.Errorf("the failed delivery on the log: %+v", mine)
	}
	if got := decode[logReply](t, e.keyed("GET", "/v1/account/webhook/deliveries", e.KeyB, "")); len(got.Data.Deliveries) != 0 {
		t.Errorf("another account's log: %+v", got)
	}

	// Redelivered now: delivered, the attempt added to the log.
	r = e.keyed("POST", "/v1/account/webhook/redeliver", e.KeyA, `{"task_id":"`+id+`","type":"task.canceled","seq":0}`)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"delivered":true`) {
		t.Fatalf("redeliver: %d %s", r.Status, r.Body)
	}
	rec.mu.Lock()
	last := rec.got[len(rec.got)-1]
	rec.mu.Unlock()
	if last.header.Get("webhook-id") != webhook.MessageID(id, task.EventCanceled, 0) || !strings.Contains(string(last.body), `"status":"canceled"`) {
		t.Errorf("redelivery %v %s", last.header, last.body)
	}
	if err := webhook.Verify(secret, last.header, last.body, e.Now); err != nil {
		t.Errorf("redelivery's signature: %v", err)
	}
	lg = decode[logReply](t, e.keyed("GET", "/v1/account/webhook/deliveries", e.KeyA, ""))
	for _, d := range lg.Data.Deliveries {
		if d.TaskID == id && (d.State != "delivered" || len(d.Attempts) != 2) {
			t.Errorf("after the redelivery: %+v; want delivered, two attempts", d)
		}
	}
	assertEnvelope(t, e.keyed("POST", "/v1/account/webhook/redeliver", e.KeyB, `{"task_id":"`+id+`","type":"task.canceled"}`), 404, "not found")
	assertEnvelope(t, e.keyed("POST", "/v1/account/webhook/redeliver", e.KeyA, `{"task_id":"`+id+`","type":"task.done"}`), 400, "not an event")

	// Cleared: the next task sends nothing.
	if r := e.keyed("DELETE", "/v1/account/webhook", e.KeyA, ""); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	later := e.createID(e.KeyA, okBody)
	if r := e.keyed("POST", "/v1/task/cancel", e.KeyA, `{"task_id":"`+later+`"}`); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	if wh := decode[struct {
		CallbackURL string `json:"callback_url"`
	}](t, e.webhooks(e.KeyA, later)); wh.CallbackURL != "" {
		t.Errorf("a task after the endpoint was cleared went to %q", wh.CallbackURL)
	}
}
