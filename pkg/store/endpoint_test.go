package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

// An account's default webhook endpoint round-trips whatever its length
// (kept in 64-byte fields), replaces the one before whole, and clearing
// it leaves no field behind.
func TestAccountEndpointKeptAndCleared(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	before, err := rdb.HLen(ctx, accountKey("acct_a")).Result()
	must(t, err)
	long := "https://hooks.example.com/" + strings.Repeat("p", 200)
	for _, cb := range []task.Callback{
		{URL: long, Events: task.Events},
		{URL: "https://hooks.example.com/short", Events: []string{task.EventCompleted}},
	} {
		must(t, s.hooks.SetEndpoint(ctx, "acct_a", cb))
		got, err := s.hooks.Endpoint(ctx, "acct_a")
		if err != nil || got.URL != cb.URL || !slices.Equal(got.Events, cb.Events) {
			t.Fatalf("endpoint %+v, %v; want %+v", got, err, cb)
		}
	}
	if n, _ := rdb.HLen(ctx, accountKey("acct_a")).Result(); n != before+3 {
		t.Errorf("account record has %d fields with a short endpoint; want %d (the long one's pieces gone)", n, before+3)
	}
	must(t, s.hooks.SetEndpoint(ctx, "acct_a", task.Callback{}))
	if got, err := s.hooks.Endpoint(ctx, "acct_a"); err != nil || got.URL != "" {
		t.Errorf("endpoint after clearing %+v, %v; want none", got, err)
	}
	if n, _ := rdb.HLen(ctx, accountKey("acct_a")).Result(); n != before {
		t.Errorf("account record has %d fields after clearing; want %d", n, before)
	}
	var nf *apperr.NotFoundError
	if err := s.hooks.SetEndpoint(ctx, "acct_nope", task.Callback{URL: "https://x.example"}); !errors.As(err, &nf) {
		t.Errorf("setting the endpoint of an unknown account: %v; want not found", err)
	}
	if _, err := s.hooks.Endpoint(ctx, "acct_nope"); !errors.As(err, &nf) {
		t.Errorf("reading the endpoint of an unknown account: %v; want not found", err)
	}
}

// A task without a callback takes its account's default endpoint when it
// starts (its progress events then follow the endpoint's filter), or when
// it ends if it never started; a task with its own callback keeps it, and
// one that started before the endpoint was set has none.
func TestTasksTakeTheAccountEndpoint(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	url := "https://hooks.example.com/" + strings.Repeat("q", 100)
	must(t, s.hooks.SetEndpoint(ctx, "acct_a", task.Callback{URL: url, Events: []string{task.EventProgress, task.EventCompleted}}))

	create(t, s, "acct_a", "started")
	mustOutcome(t, task.Applied)(start(s, "acct_a", "started", "r1"))
	if !progress(t, s, "acct_a", "started", "r1", 10) {
		t.Error("progress of a task under an endpoint that wants it: no hook")
	}
	ch, err := s.tasks.Complete(ctx, "acct_a", "started", "r1", nil)
	if err != nil || !ch.Hooked {
		t.Errorf("complete = %+v, %v; want hooked", ch, err)
	}
	got, err := s.tasks.Get(ctx, "acct_a", "started")
	must(t, err)
	if got.Callback.URL != url || !slices.Equal(got.Callback.Events, []string{task.EventProgress, task.EventCompleted}) {
		t.Errorf("the started task's callback %+v; want the account's endpoint", got.Callback)
	}

	// Never started, canceled: the endpoint does not want task.canceled.
	create(t, s, "acct_a", "canceled")
	cn, err := s.tasks.Cancel(ctx, "acct_a", "canceled")
	if err != nil || cn.Hooked {
		t.Errorf("cancel = %+v, %v; want not hooked (the endpoint wants no cancel)", cn, err)
	}
	must(t, s.hooks.SetEndpoint(ctx, "acct_a", task.Callback{URL: url, Events: task.DefaultEvents}))
	create(t, s, "acct_a", "canceled2")
	if cn, err := s.tasks.Cancel(ctx, "acct_a", "canceled2"); err != nil || !cn.Hooked {
		t.Errorf("cancel = %+v, %v; want hooked", cn, err)
	}

	withCallbackOf(t, s, "acct_a", "own", task.EventCompleted)
	mustOutcome(t, task.Applied)(start(s, "acct_a", "own", "r1"))
	if progress(t, s, "acct_a", "own", "r1", 10) {
		t.Error("a task's own callback for the end only: progress hooked")
	}
	if got, _ := s.tasks.Get(ctx, "acct_a", "own"); got.Callback.URL != "https://hooks.example.com/easel" {
		t.Errorf("a task's own callback became %q", got.Callback.URL)
	}

	// Another account's tasks are untouched.
	create(t, s, "acct_b", "other")
	mustOutcome(t, task.Applied)(start(s, "acct_b", "other", "r1"))
	if ch, _ := s.tasks.Complete(ctx, "acct_b", "other", "r1", nil); ch.Hooked {
		t.Error("a task of an account without an endpoint hooked")
	}

	// A task takes the endpoint when it starts: one set later applies to
	// the tasks that start after, not to one already running.
	seedAccount(t, s.rdb, "acct_c", 1_000_000, "")
	create(t, s, "acct_c", "running")
	mustOutcome(t, task.Applied)(start(s, "acct_c", "running", "r1"))
	must(t, s.hooks.SetEndpoint(ctx, "acct_c", task.Callback{URL: url, Events: task.DefaultEvents}))
	create(t, s, "acct_c", "after")
	mustOutcome(t, task.Applied)(start(s, "acct_c", "after", "r1"))
	for _, c := range []struct {
		id     string
		hooked bool
	}{{"running", false}, {"after", true}} {
		ch, err := s.tasks.Complete(ctx, "acct_c", c.id, "r1", nil)
		if err != nil || ch.Hooked != c.hooked {
			t.Errorf("complete %s = %+v, %v; want hooked %v", c.id, ch, err, c.hooked)
		}
	}
	if got, _ := s.tasks.Get(ctx, "acct_c", "running"); got.Callback.URL != "" {
		t.Errorf("a task started before its account's endpoint was set took it: %q", got.Callback.URL)
	}
}

// The account's recent deliveries list the newest first, with state and
// attempts, at most RecentDeliveries of them.
func TestRecentDeliveries(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	ctx := context.Background()
	for i := range RecentDeliveries + 5 {
		must(t, s.hooks.Queued(ctx, "acct_a", fmt.Sprintf("t%03d", i), task.EventCompleted, 0))
	}
	_, err := s.hooks.RecordAttempt(ctx, "acct_a", fmt.Sprintf("t%03d", RecentDeliveries+4), task.EventCompleted, 0,
		webhook.Attempt{StatusCode: 500, Error: "HTTP 500"}, webhook.StateFailed, webhook.Outgoing{})
	must(t, err)
	if n, _ := srv.Client(t).ZCard(ctx, webhookRecentKey("acct_a")).Result(); n != RecentDeliveries {
		t.Errorf("the recent list holds %d; want %d", n, RecentDeliveries)
	}
	got, err := s.hooks.Recent(ctx, "acct_a", 3)
	must(t, err)
	if len(got) != 3 {
		t.Fatalf("recent %d deliveries; want 3", len(got))
	}
	newest := got[0]
	if newest.TaskID != fmt.Sprintf("t%03d", RecentDeliveries+4) || newest.State != webhook.StateFailed || len(newest.Attempts) != 1 || newest.Attempts[0].StatusCode != 500 {
		t.Errorf("newest %+v; want the last task's failed delivery with its attempt", newest)
	}
	if got[1].TaskID != fmt.Sprintf("t%03d", RecentDeliveries+3) || got[1].State != webhook.StatePending {
		t.Errorf("second %+v; want the one before, pending", got[1])
	}
	if none, err := s.hooks.Recent(ctx, "acct_b", 10); err != nil || len(none) != 0 {
		t.Errorf("recent of an account without deliveries: %v, %v", none, err)
	}
}
