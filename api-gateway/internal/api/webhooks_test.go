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
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) { d.Deliveries = log })
	log.st = e.Hooks
	return e, log
}

func (e *env) webhooks(key, id string) reply {
	return e.Do("GET", "/v1/task/webhooks?task_id="+url.QueryEscape(id), map[string]string{"Authorization": "Bearer " + key}, "")
}

func (e *env) createID(key, body string) string {
	e.T.Helper()
	r := e.Create(key, body)
	var created struct {
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &created); r.Status != 200 || err != nil {
		e.T.Fatalf("create: %d %s", r.Status, r.Body)
	}
	return created.Data.TaskID
}

func TestWebhooksRoute(t *testing.T) {
	t.Parallel()
	e, log := newHookEnv(t)
	ctx := context.Background()
	const hook = "https://hooks.example.com/easel?t=1"
	id := e.createID(e.KeyA, `{"model":"`+std+`","task_type":"image","input":{"prompt":"p"},"callBackUrl":"`+hook+`","callback_events":["task.progress","task.completed"]}`)
	plain := e.createID(e.KeyA, okBody)

	// Before anything happened: the callback, no deliveries.
	r := e.webhooks(e.KeyA, id)
	if r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("webhooks: %d %v %s", r.Status, r.Header, r.Body)
	}
	if got, want := strings.TrimSpace(string(r.Body)), `{"task_id":"`+id+`","callback_url":"https://hooks.example.com/easel?t=1","events":["task.progress","task.completed"],"deliveries":[]}`; got != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	if got, want := strings.TrimSpace(string(e.webhooks(e.KeyA, plain).Body)), `{"task_id":"`+plain+`","events":[],"deliveries":[]}`; got != want {
		t.Errorf("a task without a callback:\n%s\nwant\n%s", got, want)
	}

	// The worker runs it: a progress event, then the completion, which
	// waits in the outbox (pending) until it is queued and attempted.
	acct := e.AcctA
	if c, err := e.Store.Start(ctx, acct, id, id); c.Outcome != task.Applied || err != nil {
		t.Fatal(c.Outcome, err)
	}
	if err := e.Hooks.Queued(ctx, acct, id, task.EventProgress, 40); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if c, err := e.Store.Complete(ctx, acct, id, id, nil); c.Outcome != task.Applied || err != nil {
		t.Fatal(c.Outcome, err)
	}
	var got struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	if err := json.Unmarshal(e.webhooks(e.KeyA, id).Body, &got); err != nil || len(got.Deliveries) != 2 {
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
		if _, err := e.Hooks.RecordAttempt(ctx, acct, id, task.EventCompleted, 0, attempts[i], st, webhook.Outgoing{URL: hook, Body: []byte("{}")}); err != nil {
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
	r = e.webhooks(e.KeyA, id)
	if err := json.Unmarshal(r.Body, &full); err != nil || len(full.Deliveries) != 2 {
		t.Fatalf("%s %v", r.Body, err)
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
	if !strings.Contains(string(r.Body), `"error":""`) {
		t.Errorf("a delivered attempt's error is not \"\": %s", r.Body)
	}

	// As the query: another account's task, an unknown or malformed id are
	// 404; no task_id 400; no key 401.
	assertEnvelope(t, e.webhooks(e.KeyB, id), 404, "not found")
	assertEnvelope(t, e.webhooks(e.KeyA, "task_lumen_1"), 404, "not found")
	assertEnvelope(t, e.webhooks(e.KeyA, "../../etc/passwd"), 404, "not found")
	assertEnvelope(t, e.Do("GET", "/v1/task/webhooks", map[string]string{"Authorization": "Bearer " + e.KeyA}, ""), 400, "task_id is required")
	assertEnvelope(t, e.Do("GET", "/v1/task/webhooks?task_id="+id, nil, ""), 401, "missing Authorization")
	assertEnvelope(t, e.Do("POST", "/v1/task/webhooks?task_id="+id, map[string]string{"Authorization": "Bearer " + e.KeyA}, ""), 405, "method not allowed")

	// The log unreachable: 503, nothing internal said.
	log.err = errors.New("redis: connection refused")
	assertEnvelope(t, e.webhooks(e.KeyA, id), 503, "unavailable")
}

// A cancel through the API queues the task.canceled delivery its callback
// wants at once, and takes it off the account's outbox, where the
// recovery would otherwise find it.
func TestCancelQueuesItsWebhook(t *testing.T) {
	t.Parallel()
	e, _ := newHookEnv(t)
	ctx := context.Background()
	id := e.createID(e.KeyA, `{"model":"`+std+`","task_type":"image","input":{"prompt":"p"},"callBackUrl":"https://hooks.example.com/easel","callback_events":["task.canceled"]}`)
	if r := e.Do("POST", "/v1/task/cancel", e.auth(e.KeyA), `{"task_id":"`+id+`"}`); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	info, err := asynq.NewInspectorFromRedisClient(e.RDB).GetTaskInfo(jobs.WebhookQueue, jobs.WebhookID(id, task.EventCanceled, 0))
	if err != nil {
		t.Fatalf("the task.canceled delivery was not queued: %v", err)
	}
	d, err := jobs.ParseDeliverWebhook(asynq.NewTask(info.Type, info.Payload))
	if want := (jobs.DeliverWebhook{AccountID: e.AcctA, TaskID: id, Event: task.EventCanceled}); err != nil || d != want {
		t.Errorf("delivery job %+v, %v; want %+v", d, err, want)
	}
	due, err := e.Store.Due(ctx, store.ShardOf(e.AcctA), time.Now().Add(time.Hour), 100)
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
	if err := json.Unmarshal(e.webhooks(e.KeyA, id).Body, &got); err != nil || len(got.Deliveries) != 1 {
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
