package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

func TestWebhookSecret(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	st, srv := newStoreWith(t, Options{Now: func() time.Time { return now }})
	s := st.hooks
	ctx := context.Background()

	var nf *apperr.NotFoundError
	if _, err := s.Secret(ctx, "acct_nope"); !errors.As(err, &nf) {
		t.Errorf("secret of an unknown account: %v; want not found", err)
	}
	if _, _, err := s.RotateSecret(ctx, "acct_nope"); !errors.As(err, &nf) {
		t.Errorf("rotating the secret of an unknown account: %v; want not found", err)
	}

	first, err := s.Secret(ctx, "acct_a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.Key(first); err != nil {
		t.Fatalf("secret %q: %v", first, err)
	}
	if again, _ := s.Secret(ctx, "acct_a"); again != first {
		t.Errorf("second read %q; want the first %q", again, first)
	}
	if other, _ := s.Secret(ctx, "acct_b"); other == first {
		t.Error("two accounts share a secret")
	}
	if got, _ := s.Secrets(ctx, "acct_a"); len(got) != 1 || got[0] != first {
		t.Errorf("secrets %v; want [%s]", got, first)
	}

	second, until, err := s.RotateSecret(ctx, "acct_a")
	if err != nil || second == first || !strings.HasPrefix(second, webhook.SecretPrefix) || !until.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("rotate = %q, %v, %v; want a new secret, the old one valid until %v", second, until, err, now.Add(24*time.Hour))
	}
	if got, _ := s.Secret(ctx, "acct_a"); got != second {
		t.Errorf("current secret %q after the rotation; want %q", got, second)
	}
	if got, _ := s.Secrets(ctx, "acct_a"); len(got) != 2 || got[0] != second || got[1] != first {
		t.Errorf("signing secrets %v; want the new then the old", got)
	}
	now = now.Add(24*time.Hour - time.Millisecond)
	if got, _ := s.Secrets(ctx, "acct_a"); len(got) != 2 {
		t.Errorf("signing secrets just before the old one's end: %v", got)
	}
	now = now.Add(time.Millisecond)
	if got, _ := s.Secrets(ctx, "acct_a"); len(got) != 1 || got[0] != second {
		t.Errorf("signing secrets 24 h after the rotation %v; want only the new", got)
	}

	// Two rotations in a row: only the last replaced secret overlaps.
	third, _, _ := s.RotateSecret(ctx, "acct_a")
	fourth, _, _ := s.RotateSecret(ctx, "acct_a")
	if got, _ := s.Secrets(ctx, "acct_a"); len(got) != 2 || got[0] != fourth || got[1] != third {
		t.Errorf("signing secrets after two rotations %v; want [%s %s]", got, fourth, third)
	}

	// Rotating before any secret was made: nothing to overlap.
	seedAccount(t, srv.Client(t), "acct_c", 0, "")
	fresh, until, err := s.RotateSecret(ctx, "acct_c")
	if err != nil || !until.Equal(now) {
		t.Fatalf("first rotation = %q, %v, %v; want the previous secret valid until now", fresh, until, err)
	}
	if got, _ := s.Secrets(ctx, "acct_c"); len(got) != 1 || got[0] != fresh {
		t.Errorf("signing secrets %v; want [%s]", got, fresh)
	}
}

// withCallback creates a pending task of acct_a with a callback wanting
// events.
func withCallback(t *testing.T, s *stores, id string, events ...string) {
	t.Helper()
	p := pending("acct_a", id)
	if len(events) > 0 {
		p.Callback = task.Callback{URL: "https://hooks.example.com/easel", Events: events}
	}
	if _, err := s.tasks.Create(context.Background(), p, std, nil); err != nil {
		t.Fatal(err)
	}
}

// The scripts that end a task put its final event on the shard's due work
// (the outbox) when its callback wants it, due HookGrace later, and say so
// (Hooked); Due returns it (DueHook) until Queued takes it off, moving it
// on each time it returns it.
func TestHookOutbox(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	s, _ := newStoreWith(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	all := task.DefaultEvents
	shard := ShardOf("acct_a")
	t0 := now

	withCallback(t, s, "t_done", all...)
	withCallback(t, s, "t_fail", all...)
	withCallback(t, s, "t_cancel", all...)
	withCallback(t, s, "t_none")
	withCallback(t, s, "t_failonly", task.EventFailed)
	mustOutcome(t, task.Applied)(start(s, "acct_a", "t_done", "t_done"))
	if c := mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "acct_a", "t_done", "t_done", nil)); !c.Hooked || !c.At.Equal(now) {
		t.Errorf("complete with a callback: %+v; want hooked at %v", c, now)
	}
	now = now.Add(time.Second)
	if c := mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "acct_a", "t_fail", "", task.Failure{Code: "timeout", Message: "late"})); !c.Hooked || c.Refunded != std.Price {
		t.Errorf("fail with a callback: %+v; want hooked and refunded", c)
	}
	now = now.Add(time.Second)
	if c, err := s.tasks.Cancel(ctx, "acct_a", "t_cancel"); err != nil || !c.Hooked {
		t.Fatal(c, err)
	}
	mustOutcome(t, task.Applied)(start(s, "acct_a", "t_none", "t_none"))
	if c := mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "acct_a", "t_none", "t_none", nil)); c.Hooked {
		t.Error("complete without a callback: hooked")
	}
	mustOutcome(t, task.Applied)(start(s, "acct_a", "t_failonly", "t_failonly"))
	if c := mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "acct_a", "t_failonly", "t_failonly", nil)); c.Hooked {
		t.Error("complete of a callback wanting task.failed only: hooked")
	}

	want := []DueEntry{
		{Kind: DueHook, AccountID: "acct_a", TaskID: "t_done", Event: task.EventCompleted},
		{Kind: DueHook, AccountID: "acct_a", TaskID: "t_fail", Event: task.EventFailed},
		{Kind: DueHook, AccountID: "acct_a", TaskID: "t_cancel", Event: task.EventCanceled},
	}
	// Nothing before HookGrace: the one that queues it is given the time.
	if due, _ := s.tasks.Due(ctx, shard, t0.Add(HookGrace-time.Millisecond), 100); len(due.Entries) != 0 || !due.Next.Equal(t0.Add(HookGrace)) {
		t.Errorf("Due before HookGrace = %+v; want none, the next at %v", due, t0.Add(HookGrace))
	}
	// Listed pending while in the outbox, since the task ended.
	ds, err := s.hooks.Deliveries(ctx, "acct_a", "t_done")
	if err != nil || len(ds) != 1 || ds[0].Event != task.EventCompleted || ds[0].State != webhook.StatePending || len(ds[0].Attempts) != 0 ||
		!ds[0].Created.Equal(t0) {
		t.Fatalf("deliveries of t_done = %+v, %v", ds, err)
	}
	if ds, _ := s.hooks.Deliveries(ctx, "acct_a", "t_none"); len(ds) != 0 {
		t.Errorf("deliveries of a task without a callback: %+v", ds)
	}
	// Only what is due by the given time, oldest first; at most limit.
	if due, _ := s.tasks.Due(ctx, shard, t0.Add(HookGrace+time.Second-time.Millisecond), 100); !slices.Equal(due.Entries, want[:1]) {
		t.Errorf("Due(before the failure's) = %+v", due.Entries)
	}
	at := t0.Add(time.Hour)
	if due, _ := s.tasks.Due(ctx, shard, at, 1); !slices.Equal(due.Entries, want[1:2]) || !due.Next.Equal(t0.Add(HookGrace+2*time.Second)) {
		t.Errorf("Due(limit 1) = %+v; want the failure's, the cancel's next", due)
	}
	// Each entry returned is due again dueRetry later, until it is queued.
	due, err := s.tasks.Due(ctx, shard, at, 100)
	if err != nil || !sameEntries(due.Entries, []DueEntry{want[0], want[2]}) || !due.Next.Equal(at.Add(dueRetry)) {
		t.Fatalf("Due = %+v, %v; want the two left, the next at %v", due, err, at.Add(dueRetry))
	}
	if due, _ := s.tasks.Due(ctx, shard, at.Add(dueRetry), 100); !sameEntries(due.Entries, want) {
		t.Errorf("Due after dueRetry = %+v; want %+v again", due.Entries, want)
	}

	for _, d := range want {
		if err := s.hooks.Queued(ctx, d.AccountID, d.TaskID, d.Event, 0); err != nil {
			t.Fatal(err)
		}
	}
	if due, _ := s.tasks.Due(ctx, shard, at.Add(time.Hour), 100); len(due.Entries) != 0 || !due.Next.IsZero() {
		t.Errorf("Due after queueing = %+v", due)
	}
	ds, err = s.hooks.Deliveries(ctx, "acct_a", "t_cancel")
	if err != nil || len(ds) != 1 || ds[0].Event != task.EventCanceled || ds[0].State != webhook.StatePending {
		t.Errorf("deliveries of t_cancel once queued = %+v, %v", ds, err)
	}
	// A progress event never was in the outbox; queueing it leaves the
	// due work as it is.
	if err := s.hooks.Queued(ctx, "acct_a", "t_done", task.EventProgress, 50); err != nil {
		t.Fatal(err)
	}
}

// A delivery's attempts are recorded in order; its message is kept while
// it is retried and dropped once it ends; an ended delivery records
// nothing more.
func TestHookAttempts(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	s, srv := newStoreWith(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	const id = "t_hooks"
	withCallback(t, s, id, task.Events...)

	if err := s.hooks.Queued(ctx, "acct_a", id, task.EventProgress, 40); err != nil {
		t.Fatal(err)
	}
	st, msg, err := s.hooks.Outgoing(ctx, "acct_a", id, task.EventProgress, 40)
	if err != nil || st != webhook.StatePending || msg.URL != "" {
		t.Fatalf("a pending delivery: %q %+v %v", st, msg, err)
	}
	if st, _, _ := s.hooks.Outgoing(ctx, "acct_a", id, task.EventCompleted, 0); st != "" {
		t.Errorf("a delivery never listed has state %q", st)
	}

	m := webhook.Outgoing{URL: "https://hooks.example.com/easel?x=1", Body: []byte(`{"type":"task.progress","data":{"a":"b\nc"}}`)}
	steps := []struct {
		a     webhook.Attempt
		state webhook.State
		msg   webhook.Outgoing
		ok    bool
	}{
		{webhook.Attempt{Time: now, StatusCode: 503, Latency: 12 * time.Millisecond, Error: "the receiver answered HTTP 503"}, webhook.StateRetrying, m, true},
		{webhook.Attempt{Time: now.Add(5 * time.Second), Latency: 10 * time.Second, Error: "no response within 10s"}, webhook.StateRetrying, webhook.Outgoing{}, true},
		{webhook.Attempt{Time: now.Add(15 * time.Second), StatusCode: 200, Latency: 3 * time.Millisecond}, webhook.StateDelivered, webhook.Outgoing{}, true},
		{webhook.Attempt{Time: now.Add(20 * time.Second), StatusCode: 200}, webhook.StateDelivered, webhook.Outgoing{}, false},
		{webhook.Attempt{Time: now.Add(20 * time.Second), StatusCode: 500}, webhook.StateRetrying, m, false},
	}
	for i, step := range steps {
		ok, err := s.hooks.RecordAttempt(ctx, "acct_a", id, task.EventProgress, 40, step.a, step.state, step.msg)
		if err != nil || ok != step.ok {
			t.Fatalf("attempt %d: %v, %v; want %v", i, ok, err, step.ok)
		}
		st, got, _ := s.hooks.Outgoing(ctx, "acct_a", id, task.EventProgress, 40)
		switch {
		case i < 2 && (st != webhook.StateRetrying || got.URL != m.URL || string(got.Body) != string(m.Body)):
			t.Errorf("after attempt %d: %q %+v; want retrying with the message kept", i, st, got)
		case i >= 2 && (st != webhook.StateDelivered || got.URL != ""):
			t.Errorf("after attempt %d: %q %+v; want delivered, the message dropped", i, st, got)
		}
	}

	// A final event given up on at once.
	if ok, err := s.hooks.RecordAttempt(ctx, "acct_a", id, task.EventCompleted, 0, webhook.Attempt{Time: now.Add(time.Minute), StatusCode: 404, Latency: time.Millisecond, Error: "the receiver answered HTTP 404"}, webhook.StateFailed, m); !ok || err != nil {
		t.Fatal(ok, err)
	}

	ds, err := s.hooks.Deliveries(ctx, "acct_a", id)
	if err != nil || len(ds) != 2 {
		t.Fatalf("deliveries = %+v, %v", ds, err)
	}
	p, c := ds[0], ds[1]
	if p.Event != task.EventProgress || p.Seq != 40 || p.State != webhook.StateDelivered || !p.Created.Equal(now) || len(p.Attempts) != 3 {
		t.Fatalf("progress delivery %+v", p)
	}
	for i, want := range steps[:3] {
		if got := p.Attempts[i]; !got.Time.Equal(want.a.Time) || got.StatusCode != want.a.StatusCode || got.Latency != want.a.Latency || got.Error != want.a.Error {
			t.Errorf("attempt %d = %+v; want %+v", i, got, want.a)
		}
	}
	if c.Event != task.EventCompleted || c.State != webhook.StateFailed || len(c.Attempts) != 1 || c.Attempts[0].StatusCode != 404 {
		t.Errorf("completion delivery %+v", c)
	}
	ttl := srv.Client(t).PTTL(ctx, webhookLogKey("acct_a", id)).Val()
	if ttl <= 47*time.Hour || ttl > 48*time.Hour {
		t.Errorf("log TTL %v; want 48h", ttl)
	}
}
