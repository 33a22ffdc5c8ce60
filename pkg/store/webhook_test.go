package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

func TestWebhookSecret(t *testing.T) {
	s, srv := newStore(t)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	s.now = func() time.Time { return now }

	var nf *apperr.NotFoundError
	if _, err := s.WebhookSecret(ctx, "acct_nope"); !errors.As(err, &nf) {
		t.Errorf("secret of an unknown account: %v; want not found", err)
	}
	if _, _, err := s.RotateWebhookSecret(ctx, "acct_nope"); !errors.As(err, &nf) {
		t.Errorf("rotating the secret of an unknown account: %v; want not found", err)
	}

	first, err := s.WebhookSecret(ctx, "acct_a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.Key(first); err != nil {
		t.Fatalf("secret %q: %v", first, err)
	}
	if again, _ := s.WebhookSecret(ctx, "acct_a"); again != first {
		t.Errorf("second read %q; want the first %q", again, first)
	}
	if other, _ := s.WebhookSecret(ctx, "acct_b"); other == first {
		t.Error("two accounts share a secret")
	}
	if got, _ := s.WebhookSecrets(ctx, "acct_a"); len(got) != 1 || got[0] != first {
		t.Errorf("secrets %v; want [%s]", got, first)
	}

	second, until, err := s.RotateWebhookSecret(ctx, "acct_a")
	if err != nil || second == first || !strings.HasPrefix(second, webhook.SecretPrefix) || !until.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("rotate = %q, %v, %v; want a new secret, the old one valid until %v", second, until, err, now.Add(24*time.Hour))
	}
	if got, _ := s.WebhookSecret(ctx, "acct_a"); got != second {
		t.Errorf("current secret %q after the rotation; want %q", got, second)
	}
	if got, _ := s.WebhookSecrets(ctx, "acct_a"); len(got) != 2 || got[0] != second || got[1] != first {
		t.Errorf("signing secrets %v; want the new then the old", got)
	}
	now = now.Add(24*time.Hour - time.Millisecond)
	if got, _ := s.WebhookSecrets(ctx, "acct_a"); len(got) != 2 {
		t.Errorf("signing secrets just before the old one's end: %v", got)
	}
	now = now.Add(time.Millisecond)
	if got, _ := s.WebhookSecrets(ctx, "acct_a"); len(got) != 1 || got[0] != second {
		t.Errorf("signing secrets 24 h after the rotation %v; want only the new", got)
	}

	// Two rotations in a row: only the last replaced secret overlaps.
	third, _, _ := s.RotateWebhookSecret(ctx, "acct_a")
	fourth, _, _ := s.RotateWebhookSecret(ctx, "acct_a")
	if got, _ := s.WebhookSecrets(ctx, "acct_a"); len(got) != 2 || got[0] != fourth || got[1] != third {
		t.Errorf("signing secrets after two rotations %v; want [%s %s]", got, fourth, third)
	}

	// Rotating before any secret was made: nothing to overlap.
	seedAccount(t, srv.Client(t), "acct_c", 0, "")
	fresh, until, err := s.RotateWebhookSecret(ctx, "acct_c")
	if err != nil || !until.Equal(now) {
		t.Fatalf("first rotation = %q, %v, %v; want the previous secret valid until now", fresh, until, err)
	}
	if got, _ := s.WebhookSecrets(ctx, "acct_c"); len(got) != 1 || got[0] != fresh {
		t.Errorf("signing secrets %v; want [%s]", got, fresh)
	}
}

// withCallback creates a pending task of acct_a with a callback wanting
// events.
func withCallback(t *testing.T, s *Store, id string, events ...string) {
	t.Helper()
	p := pending("acct_a", id)
	if len(events) > 0 {
		p.Callback = task.Callback{URL: "https://hooks.example.com/easel", Events: events}
	}
	if _, err := s.CreateTask(context.Background(), p, std, nil); err != nil {
		t.Fatal(err)
	}
}

// The scripts that end a task put its final event in the account's outbox
// when its callback wants it; HooksDue finds it there until HookQueued
// takes it off.
func TestHookOutbox(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	s.now = func() time.Time { return now }
	all := task.DefaultEvents

	withCallback(t, s, "t_done", all...)
	withCallback(t, s, "t_fail", all...)
	withCallback(t, s, "t_cancel", all...)
	withCallback(t, s, "t_none")
	withCallback(t, s, "t_failonly", task.EventFailed)
	mustOutcome(t, Applied)(s.StartTask(ctx, "acct_a", "t_done", "t_done"))
	if o, _, err := s.CompleteTask(ctx, "acct_a", "t_done", "t_done", nil); o != Applied || err != nil {
		t.Fatal(o, err)
	}
	now = now.Add(time.Second)
	mustOutcome(t, Applied)(s.FailTask(ctx, "acct_a", "t_fail", "", task.Failure{Code: "timeout", Message: "late"}))
	now = now.Add(time.Second)
	if _, err := s.CancelTask(ctx, "acct_a", "t_cancel"); err != nil {
		t.Fatal(err)
	}
	mustOutcome(t, Applied)(s.StartTask(ctx, "acct_a", "t_none", "t_none"))
	if o, _, err := s.CompleteTask(ctx, "acct_a", "t_none", "t_none", nil); o != Applied || err != nil {
		t.Fatal(o, err)
	}
	mustOutcome(t, Applied)(s.StartTask(ctx, "acct_a", "t_failonly", "t_failonly"))
	if o, _, err := s.CompleteTask(ctx, "acct_a", "t_failonly", "t_failonly", nil); o != Applied || err != nil {
		t.Fatal(o, err)
	}

	due, err := s.HooksDue(ctx, now.Add(time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []HookDue{
		{"acct_a", "t_done", task.EventCompleted, now.Add(-2 * time.Second)},
		{"acct_a", "t_fail", task.EventFailed, now.Add(-time.Second)},
		{"acct_a", "t_cancel", task.EventCanceled, now},
	}
	if !sameDue(due, want) {
		t.Fatalf("HooksDue = %+v; want %+v", due, want)
	}
	// Only what became due before the given time; at most limit.
	if due, _ := s.HooksDue(ctx, now.Add(-time.Second), 100); !sameDue(due, want[:1]) {
		t.Errorf("HooksDue(before the failure) = %+v", due)
	}
	if due, _ := s.HooksDue(ctx, now.Add(time.Hour), 2); len(due) != 2 {
		t.Errorf("HooksDue(limit 2) = %+v", due)
	}

	// Listed pending while in the outbox.
	ds, err := s.HookDeliveries(ctx, "acct_a", "t_done")
	if err != nil || len(ds) != 1 || ds[0].Event != task.EventCompleted || ds[0].State != HookPending || len(ds[0].Attempts) != 0 {
		t.Fatalf("deliveries of t_done = %+v, %v", ds, err)
	}
	if ds, _ := s.HookDeliveries(ctx, "acct_a", "t_none"); len(ds) != 0 {
		t.Errorf("deliveries of a task without a callback: %+v", ds)
	}

	for _, d := range want {
		if err := s.HookQueued(ctx, d.AccountID, d.TaskID, d.Event); err != nil {
			t.Fatal(err)
		}
	}
	if due, _ := s.HooksDue(ctx, now.Add(time.Hour), 100); len(due) != 0 {
		t.Errorf("HooksDue after queueing = %+v", due)
	}
	ds, err = s.HookDeliveries(ctx, "acct_a", "t_cancel")
	if err != nil || len(ds) != 1 || ds[0].Event != task.EventCanceled || ds[0].State != HookPending {
		t.Errorf("deliveries of t_cancel once queued = %+v, %v", ds, err)
	}
}

func sameDue(got, want []HookDue) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].AccountID != want[i].AccountID || got[i].TaskID != want[i].TaskID || got[i].Event != want[i].Event || !got[i].Due.Equal(want[i].Due) {
			return false
		}
	}
	return true
}

// A delivery's attempts are recorded in order; its message is kept while
// it is retried and dropped once it ends; an ended delivery records
// nothing more.
func TestHookAttempts(t *testing.T) {
	s, srv := newStore(t)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	s.now = func() time.Time { return now }
	const id = "t_hooks"
	withCallback(t, s, id, task.Events...)

	if err := s.HookPending(ctx, "acct_a", id, task.EventProgress, 40); err != nil {
		t.Fatal(err)
	}
	st, msg, err := s.HookMessageOf(ctx, "acct_a", id, task.EventProgress, 40)
	if err != nil || st != HookPending || msg.URL != "" {
		t.Fatalf("a pending delivery: %q %+v %v", st, msg, err)
	}
	if st, _, _ := s.HookMessageOf(ctx, "acct_a", id, task.EventCompleted, 0); st != "" {
		t.Errorf("a delivery never listed has state %q", st)
	}

	m := HookMessage{URL: "https://hooks.example.com/easel?x=1", Body: []byte(`{"type":"task.progress","data":{"a":"b\nc"}}`)}
	steps := []struct {
		a     HookAttempt
		state HookState
		msg   HookMessage
		ok    bool
	}{
		{HookAttempt{Time: now, StatusCode: 503, Latency: 12 * time.Millisecond, Error: "the receiver answered HTTP 503"}, HookRetrying, m, true},
		{HookAttempt{Time: now.Add(5 * time.Second), Latency: 10 * time.Second, Error: "no response within 10s"}, HookRetrying, HookMessage{}, true},
		{HookAttempt{Time: now.Add(15 * time.Second), StatusCode: 200, Latency: 3 * time.Millisecond}, HookDelivered, HookMessage{}, true},
		{HookAttempt{Time: now.Add(20 * time.Second), StatusCode: 200}, HookDelivered, HookMessage{}, false},
		{HookAttempt{Time: now.Add(20 * time.Second), StatusCode: 500}, HookRetrying, m, false},
	}
	for i, step := range steps {
		ok, err := s.RecordHookAttempt(ctx, "acct_a", id, task.EventProgress, 40, step.a, step.state, step.msg)
		if err != nil || ok != step.ok {
			t.Fatalf("attempt %d: %v, %v; want %v", i, ok, err, step.ok)
		}
		st, got, _ := s.HookMessageOf(ctx, "acct_a", id, task.EventProgress, 40)
		switch {
		case i < 2 && (st != HookRetrying || got.URL != m.URL || string(got.Body) != string(m.Body)):
			t.Errorf("after attempt %d: %q %+v; want retrying with the message kept", i, st, got)
		case i >= 2 && (st != HookDelivered || got.URL != ""):
			t.Errorf("after attempt %d: %q %+v; want delivered, the message dropped", i, st, got)
		}
	}

	// A final event given up on at once.
	if ok, err := s.RecordHookAttempt(ctx, "acct_a", id, task.EventCompleted, 0, HookAttempt{Time: now.Add(time.Minute), StatusCode: 404, Latency: time.Millisecond, Error: "the receiver answered HTTP 404"}, HookFailed, m); !ok || err != nil {
		t.Fatal(ok, err)
	}

	ds, err := s.HookDeliveries(ctx, "acct_a", id)
	if err != nil || len(ds) != 2 {
		t.Fatalf("deliveries = %+v, %v", ds, err)
	}
	p, c := ds[0], ds[1]
	if p.Event != task.EventProgress || p.Seq != 40 || p.State != HookDelivered || !p.Created.Equal(now) || len(p.Attempts) != 3 {
		t.Fatalf("progress delivery %+v", p)
	}
	for i, want := range steps[:3] {
		if got := p.Attempts[i]; !got.Time.Equal(want.a.Time) || got.StatusCode != want.a.StatusCode || got.Latency != want.a.Latency || got.Error != want.a.Error {
			t.Errorf("attempt %d = %+v; want %+v", i, got, want.a)
		}
	}
	if c.Event != task.EventCompleted || c.State != HookFailed || len(c.Attempts) != 1 || c.Attempts[0].StatusCode != 404 {
		t.Errorf("completion delivery %+v", c)
	}
	ttl := srv.Client(t).PTTL(ctx, webhookLogKey("acct_a", id)).Val()
	if ttl <= 47*time.Hour || ttl > 48*time.Hour {
		t.Errorf("log TTL %v; want 48h", ttl)
	}
}
