package e2e

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/webhook"
)

// An account's default webhook endpoint on the real stack: a task without
// a callback_url delivers there, signed with the account's secret, with
// the record the query answers; a task with its own callback_url delivers
// only there; the endpoint's event filter holds; the account-wide delivery
// log lists what was sent, newest first; a cleared endpoint gets nothing.
func TestAccountWebhookEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 300 * time.Millisecond})
	acct, key := s.newAccount(t, account.Spec{Name: "account hooks", Credits: 10_000})
	secret := adminSecret(t, s.base, acct)
	sink := newHookSink(t, nil)
	src := sourceServer(t)
	c := newClient(t, s.base, key)

	setHook := func(t *testing.T, events string) {
		t.Helper()
		body := `{"callback_url":"` + sink.srv.URL + `/account","callback_events":` + events + `}`
		if st, _, b := c.do("PUT", "/v1/account/webhook", body, nil); st != 200 {
			t.Fatalf("PUT /v1/account/webhook: %d %s", st, b)
		}
	}
	type delivery struct {
		TaskID string `json:"task_id"`
		Type   string `json:"type"`
		State  string `json:"state"`
	}
	deliveries := func(t *testing.T) []delivery {
		t.Helper()
		st, _, b := c.do("GET", "/v1/account/webhook/deliveries?limit=100", "", nil)
		var env struct {
			Data struct {
				Deliveries []delivery `json:"deliveries"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &env); st != 200 || err != nil {
			t.Fatalf("deliveries: %d %s", st, b)
		}
		return env.Data.Deliveries
	}
	ofTask := func(id string) func(hookCall) bool {
		return func(h hookCall) bool {
			var b struct {
				Data struct {
					TaskID string `json:"task_id"`
				} `json:"data"`
			}
			return json.Unmarshal(h.body, &b) == nil && b.Data.TaskID == id
		}
	}
	finish := func(t *testing.T, body, want string) string {
		t.Helper()
		id := c.create(body)
		if rec, _, _ := c.poll(id, 30*time.Second); rec.Status != want {
			t.Fatalf("task %s ended %s; want %s", id, rec.Status, want)
		}
		return id
	}
	plain := createBody(std, `{"prompt":"a lighthouse"}`)
	failing := createBody(std, `{"prompt":"x","image_urls":["`+src.URL+`/0x0.png"]}`)

	setHook(t, `["task.completed","task.failed"]`)

	// A task without a callback_url: the account's endpoint.
	done := finish(t, plain, "completed")
	got := sink.waitCalls(t, "/account", 1, ofTask(done))
	if err := webhook.Verify(secret, got[0].header, got[0].body, time.Now()); err != nil {
		t.Errorf("the delivery does not verify with the account's secret: %v", err)
	}
	b := parseHook(t, got[0])
	if _, _, record := c.query(done); b.Type != "task.completed" || !sameJSON(t, b.Data, record) {
		t.Errorf("delivered %s %s; the query answers %s", b.Type, b.Data, record)
	}

	// A task's own callback_url wins.
	own := c.create(`{"model":"` + std + `","task_type":"image","input":{"prompt":"p"},"callback_url":"` + sink.srv.URL + `/own"}`)
	sink.waitCalls(t, "/own", 1, ofTask(own))

	// The filter: failures only. A completed task then a failed one: the
	// failure is delivered, the completion never.
	setHook(t, `["task.failed"]`)
	skipped := finish(t, plain, "completed")
	failed := finish(t, failing, "failed")
	sink.waitCalls(t, "/account", 1, ofTask(failed))
	if n := len(sink.waitCalls(t, "/account", 0, ofTask(skipped))); n != 0 {
		t.Errorf("a completion reached an endpoint that asked for failures only (%d deliveries)", n)
	}
	if n := len(sink.waitCalls(t, "/account", 0, ofTask(own))); n != 0 {
		t.Errorf("a task with its own callback_url also delivered to the account's endpoint")
	}

	// The account's log: every task's deliveries, newest first. A
	// delivery is recorded delivered once its receiver's answer is back,
	// a moment after the receiver has it: the log is read until it says so
	// (for at most 10 s).
	wants := []string{failed + " task.failed delivered", own + " task.completed delivered", done + " task.completed delivered"}
	var (
		log []delivery
		ids []string
	)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		log, ids = deliveries(t), nil
		for _, d := range log {
			ids = append(ids, d.TaskID+" "+d.Type+" "+d.State)
		}
		if !slices.ContainsFunc(wants, func(w string) bool { return !slices.Contains(ids, w) }) || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		if !slices.Contains(ids, want) {
			t.Errorf("the account's deliveries %v lack %q", ids, want)
		}
	}
	if slices.IndexFunc(log, func(d delivery) bool { return d.TaskID == skipped }) >= 0 {
		t.Errorf("the account's deliveries list a filtered-out event: %v", ids)
	}
	if i, j := slices.Index(ids, failed+" task.failed delivered"), slices.Index(ids, done+" task.completed delivered"); i > j {
		t.Errorf("the deliveries are not newest first: %v", ids)
	}

	// Cleared: a failure no longer goes anywhere.
	if st, _, b := c.do("DELETE", "/v1/account/webhook", "", nil); st != 200 && st != 204 {
		t.Fatalf("DELETE /v1/account/webhook: %d %s", st, b)
	}
	after := finish(t, failing, "failed")
	if l := c.webhookLog(after); len(l.Deliveries) != 0 || l.CallbackURL != "" {
		t.Errorf("a task after the endpoint was cleared has a webhook log %+v", l)
	}
}
