package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

// hookLog is the handler's WebhookLog, bound to the env's store once it
// exists; err, when set, is what it fails with.
type hookLog struct {
	st  *store.Hooks
	err error
}

func (l *hookLog) Deliveries(ctx context.Context, accountID, taskID string) ([]webhook.Delivery, error) {
	if l.err != nil {
		return nil, l.err
	}
	return l.st.Deliveries(ctx, accountID, taskID)
}

func newHookEnv(t *testing.T) (*env, *hookLog) {
	t.Helper()
	log := &hookLog{}
	e := newEnvWith(t, nil, zap.NewNop(), func(d *api.Deps) { d.Webhooks = log })
	log.st = e.hooks
	return e, log
}

func (e *env) webhooks(key, id string) reply {
	return e.do("GET", "/v1/task/webhooks?task_id="+url.QueryEscape(id), map[string]string{"Authorization": "Bearer " + key}, "")
}

func (e *env) createID(key, body string) string {
	e.t.Helper()
	r := e.create(key, body)
	var created struct {
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &created); r.status != 200 || err != nil {
		e.t.Fatalf("create: %d %s", r.status, r.body)
	}
	return created.Data.TaskID
}

func TestWebhooksRoute(t *testing.T) {
	e, log := newHookEnv(t)
	ctx := context.Background()
	const hook = "https://hooks.example.com/easel?t=1"
	id := e.createID(e.keyA, `{"model":"`+std+`","task_type":"image","input":{"prompt":"p"},"callBackUrl":"`+hook+`","callback_events":["task.progress","task.completed"]}`)
	plain := e.createID(e.keyA, okBody)

	// Before anything happened: the callback, no deliveries.
	r := e.webhooks(e.keyA, id)
	if r.status != 200 || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("webhooks: %d %v %s", r.status, r.header, r.body)
	}
	if got, want := strings.TrimSpace(string(r.body)), `{"task_id":"`+id+`","callback_url":"https://hooks.example.com/easel?t=1","events":["task.progress","task.completed"],"deliveries":[]}`; got != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	if got, want := strings.TrimSpace(string(e.webhooks(e.keyA, plain).body)), `{"task_id":"`+plain+`","events":[],"deliveries":[]}`; got != want {
		t.Errorf("a task without a callback:\n%s\nwant\n%s", got, want)
	}

	// The worker runs it: a progress event, then the completion, which
	// waits in the outbox (pending) until it is queued and attempted.
	acct := e.acctA
	if c, err := e.store.Start(ctx, acct, id, id); c.Outcome != task.Applied || err != nil {
		t.Fatal(c.Outcome, err)
	}
	if err := e.hooks.Queued(ctx, acct, id, task.EventProgress, 40); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if c, err := e.store.Complete(ctx, acct, id, id, nil); c.Outcome != task.Applied || err != nil {
		t.Fatal(c.Outcome, err)
	}
	var got struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	if err := json.Unmarshal(e.webhooks(e.keyA, id).body, &got); err != nil || len(got.Deliveries) != 2 {
		t.Fatalf("deliveries %+v %v", got, err)
	}
	for i, want := range []map[string]any{
		{"webhook_id": "msg_" + id + "_progress_40", "type": "task.progress", "state": "pending", "attempts": []any{}},
		{"webhook_id": "msg_" + id + "_completed", "type": "task.completed", "state": "pending", "attempts": []any{}},
	} {
		if g, w := hookJSON(t, got.Deliveries[i]), hookJSON(t, want); g != w {
			t.Errorf("delivery %d = %s; want %s", i, g, w)
		}
	}

	// Attempts: the completion failed once, then went through.
	attempts := []webhook.Attempt{
		{Time: t0.Add(time.Second), StatusCode: 503, Latency: 12 * time.Millisecond, Error: "the receiver answered HTTP 503"},
		{Time: t0.Add(6 * time.Second), StatusCode: 200, Latency: 3 * time.Millisecond},
	}
	for i, st := range []webhook.State{webhook.StateRetrying, webhook.StateDelivered} {
		if _, err := e.hooks.RecordAttempt(ctx, acct, id, task.EventCompleted, 0, attempts[i], st, webhook.Outgoing{URL: hook, Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	var full struct {
		TaskID      string `json:"task_id"`
		CallbackURL string `json:"callback_url"`
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
	r = e.webhooks(e.keyA, id)
	if err := json.Unmarshal(r.body, &full); err != nil || len(full.Deliveries) != 2 {
		t.Fatalf("%s %v", r.body, err)
	}
	c := full.Deliveries[1]
	if c.Type != "task.completed" || c.State != "delivered" || c.WebhookID != webhook.MessageID(id, task.EventCompleted, 0) || len(c.Attempts) != 2 {
		t.Fatalf("completion delivery %+v", c)
	}
	for i, a := range c.Attempts {
		w := attempts[i]
		if a.Time != w.Time.UnixMilli() || a.StatusCode != w.StatusCode || a.LatencyMs != w.Latency.Milliseconds() || a.Error != w.Error {
			t.Errorf("attempt %d = %+v; want %+v", i, a, w)
		}
	}
	if !strings.Contains(string(r.body), `"error":""`) {
		t.Errorf("a delivered attempt's error is not \"\": %s", r.body)
	}

	// As the query: another account's task, an unknown or malformed id are
	// 404; no task_id 400; no key 401.
	assertEnvelope(t, e.webhooks(e.keyB, id), 404, "not found")
	assertEnvelope(t, e.webhooks(e.keyA, "task_lumen_1"), 404, "not found")
	assertEnvelope(t, e.webhooks(e.keyA, "../../etc/passwd"), 404, "not found")
	assertEnvelope(t, e.do("GET", "/v1/task/webhooks", map[string]string{"Authorization": "Bearer " + e.keyA}, ""), 400, "task_id is required")
	assertEnvelope(t, e.do("GET", "/v1/task/webhooks?task_id="+id, nil, ""), 401, "missing Authorization")
	assertEnvelope(t, e.do("POST", "/v1/task/webhooks?task_id="+id, map[string]string{"Authorization": "Bearer " + e.keyA}, ""), 405, "method not allowed")

	// The log unreachable: 503, nothing internal said.
	log.err = errors.New("redis: connection refused")
	assertEnvelope(t, e.webhooks(e.keyA, id), 503, "unavailable")
}

// A cancel through the API queues the task.canceled delivery its callback
// wants at once, and takes it off the account's outbox, where the
// recovery would otherwise find it.
func TestCancelQueuesItsWebhook(t *testing.T) {
	e, _ := newHookEnv(t)
	ctx := context.Background()
	id := e.createID(e.keyA, `{"model":"`+std+`","task_type":"image","input":{"prompt":"p"},"callBackUrl":"https://hooks.example.com/easel","callback_events":["task.canceled"]}`)
	if r := e.do("POST", "/v1/task/cancel", e.auth(e.keyA), `{"task_id":"`+id+`"}`); r.status != 200 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	info, err := asynq.NewInspectorFromRedisClient(e.rdb).GetTaskInfo(jobs.WebhookQueue, jobs.WebhookID(id, task.EventCanceled, 0))
	if err != nil {
		t.Fatalf("the task.canceled delivery was not queued: %v", err)
	}
	d, err := jobs.ParseDeliverWebhook(asynq.NewTask(info.Type, info.Payload))
	if want := (jobs.DeliverWebhook{AccountID: e.acctA, TaskID: id, Event: task.EventCanceled}); err != nil || d != want {
		t.Errorf("delivery job %+v, %v; want %+v", d, err, want)
	}
	due, err := e.store.Due(ctx, store.ShardOf(e.acctA), time.Now().Add(time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range due.Entries {
		if h.Kind == store.DueHook && h.TaskID == id {
			t.Errorf("the queued delivery is still in the outbox: %+v", h)
		}
	}
	var got struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	if err := json.Unmarshal(e.webhooks(e.keyA, id).body, &got); err != nil || len(got.Deliveries) != 1 {
		t.Fatalf("deliveries %+v %v", got, err)
	}
	want := map[string]any{"webhook_id": webhook.MessageID(id, task.EventCanceled, 0), "type": "task.canceled", "state": "pending", "attempts": []any{}}
	if g, w := hookJSON(t, got.Deliveries[0]), hookJSON(t, want); g != w {
		t.Errorf("delivery = %s; want %s", g, w)
	}
}

func hookJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAdminWebhookSecret(t *testing.T) {
	e, _ := newHookEnv(t)
	path := "/accounts/" + e.acctA + "/webhook-secret"
	assertEnvelope(t, admin(e, "GET", path, "", ""), 401, "admin token")
	assertEnvelope(t, admin(e, "POST", path+"/rotate", e.keyA, ""), 401, "admin token")

	type reply struct {
		AccountID          string `json:"account_id"`
		Secret             string `json:"secret"`
		PreviousValidUntil *int64 `json:"previous_valid_until"`
	}
	var first reply
	r := admin(e, "GET", path, adminToken, "")
	if err := json.Unmarshal(data(t, r), &first); err != nil || first.AccountID != e.acctA || !strings.HasPrefix(first.Secret, "whsec_") || first.PreviousValidUntil != nil {
		t.Fatalf("secret %+v %v", first, err)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", r.header.Get("Cache-Control"))
	}
	if _, err := webhook.Key(first.Secret); err != nil {
		t.Errorf("secret %q: %v", first.Secret, err)
	}
	if cur, _ := e.hooks.Secret(context.Background(), e.acctA); cur != first.Secret {
		t.Errorf("the store's secret %q; the API showed %q", cur, first.Secret)
	}
	var again reply
	_ = json.Unmarshal(data(t, admin(e, "GET", path, adminToken, "")), &again)
	if again.Secret != first.Secret {
		t.Errorf("second read %q; want %q", again.Secret, first.Secret)
	}

	var rotated reply
	before := time.Now()
	if err := json.Unmarshal(data(t, admin(e, "POST", path+"/rotate", adminToken, "")), &rotated); err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == first.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.PreviousValidUntil == nil ||
		*rotated.PreviousValidUntil < before.Add(24*time.Hour).UnixMilli() || *rotated.PreviousValidUntil > time.Now().Add(24*time.Hour).UnixMilli() {
		t.Fatalf("rotated %+v; want a new secret, the old one valid 24 h", rotated)
	}
	var after reply
	_ = json.Unmarshal(data(t, admin(e, "GET", path, adminToken, "")), &after)
	if after.Secret != rotated.Secret {
		t.Errorf("after the rotation the secret is %q; want %q", after.Secret, rotated.Secret)
	}
	if secrets, _ := e.hooks.Secrets(context.Background(), e.acctA); len(secrets) != 2 || secrets[1] != first.Secret {
		t.Errorf("signing secrets %v; want the new and the old", secrets)
	}

	assertEnvelope(t, admin(e, "GET", "/accounts/acct_nope/webhook-secret", adminToken, ""), 404, "not found")
	assertEnvelope(t, admin(e, "POST", "/accounts/acct_nope/webhook-secret/rotate", adminToken, ""), 404, "not found")
}
