package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// Listing pages through an account's tasks newest first, ties (the same
// millisecond) included, filters by status and model, skips what expired,
// and never shows another account's tasks.
func TestListTasks(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, srv := newStoreWith(t, Options{Now: func() time.Time { return now }})
	rdb := srv.Client(t)
	ctx := context.Background()
	var ids []string
	for i := range 25 {
		if i%4 == 0 {
			now = now.Add(time.Millisecond) // some share a millisecond
		}
		id := fmt.Sprintf("task_lumen_%03d", i)
		ids = append(ids, id)
		create(t, s, "acct_a", id)
	}
	create(t, s, "acct_b", "task_lumen_999")
	// Three processing, one of them failed; one record expired.
	for _, id := range ids[:3] {
		mustOutcome(t, task.Applied)(start(s, "acct_a", id, id))
	}
	mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "acct_a", ids[0], ids[0], task.Failure{Code: "timeout", Message: "x"}))
	must(t, rdb.Del(ctx, taskKey("acct_a", ids[5])).Err())

	all := func(f task.Filter) []string {
		t.Helper()
		var got []string
		for pages := 0; pages < 50; pages++ {
			ts, next, err := s.tasks.List(ctx, "acct_a", f)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range ts {
				got = append(got, x.ID)
			}
			if next == "" {
				return got
			}
			f.Cursor = next
		}
		t.Fatal("the cursor never ended")
		return nil
	}
	newestFirst := func(skip ...string) []string {
		var out []string
	next:
		for i := len(ids) - 1; i >= 0; i-- {
			for _, s := range skip {
				if ids[i] == s {
					continue next
				}
			}
			out = append(out, ids[i])
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    task.Filter
		want []string
	}{
		{"pages of 10", task.Filter{Limit: 10}, newestFirst(ids[5])},
		{"pages of 1", task.Filter{Limit: 1}, newestFirst(ids[5])},
		{"one page", task.Filter{Limit: 100}, newestFirst(ids[5])},
		{"processing", task.Filter{Limit: 10, Status: task.Processing}, []string{ids[2], ids[1]}},
		{"failed", task.Filter{Limit: 10, Status: task.Failed}, []string{ids[0]}},
		{"other model", task.Filter{Limit: 10, Model: "lumen-3-pro-image-preview"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := all(tc.f)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("listed\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
	if n, _ := rdb.ZScore(ctx, tasksIndexKey("acct_a"), ids[5]).Result(); n != 0 {
		t.Error("an expired task stayed in the index")
	}
	if _, _, err := s.tasks.List(ctx, "acct_a", task.Filter{Limit: 10, Cursor: "not-a-cursor"}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("a bad cursor: %v, want invalid", err)
	}
}

// Queue positions come from two counters; the ETA from the rate tasks
// leave at.
func TestQueuePosition(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, _ := newStoreWith(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	var seqs []int64
	for range 10 {
		n, err := s.db.nextQueueSeq(ctx, "standard")
		must(t, err)
		seqs = append(seqs, n)
	}
	pos := func(seq int64) task.QueuePosition {
		t.Helper()
		st, err := s.queues.Stats(ctx, "standard")
		must(t, err)
		return st.PositionOf(seq, now)
	}
	if p := pos(seqs[9]); p.Position != 10 || p.Known {
		t.Fatalf("before anything left: %+v, want 10 and no ETA", p)
	}
	// The first task joined an empty queue: its busy spell, and the rate's
	// first sample, start then.
	must(t, s.db.dequeued(ctx, "standard", 1))
	now = now.Add(queueSampleEvery)
	must(t, s.db.dequeued(ctx, "standard", 3)) // 4 in 10 s
	now = now.Add(10 * time.Second)            // and nothing since: 4 in 20 s
	p := pos(seqs[9])
	if p.Position != 6 || !p.Known {
		t.Fatalf("after 4 left: %+v, want 6 with an ETA", p)
	}
	if want := 30 * time.Second; p.ETA < want-time.Second || p.ETA > want+time.Second {
		t.Errorf("ETA %v, want about %v (6 at 4 per 20 s)", p.ETA, want)
	}
	if p := pos(seqs[0]); p.Position != 1 {
		t.Errorf("a task the counters put behind nobody: %+v, want 1", p)
	}
	if st, err := s.queues.Stats(ctx, "pro"); err != nil || st.PositionOf(3, now).Position != 3 {
		t.Errorf("an unused queue: %+v, %v", st, err)
	}
}

// Every change of status or progress reaches a watcher; resync is called
// once the subscription is made.
func TestWatchTasks(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan TaskEvent, 100)
	ready := make(chan struct{}, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.tasks.Watch(ctx, func(e TaskEvent) { events <- e }, func() { ready <- struct{}{} })
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("never subscribed")
	}
	create(t, s, "acct_a", "task_lumen_1")
	create(t, s, "acct_a", "task_lumen_2")
	bg := context.Background()
	mustOutcome(t, task.Applied)(start(s, "acct_a", "task_lumen_1", "task_lumen_1"))
	progress(t, s, "acct_a", "task_lumen_1", "task_lumen_1", 40)
	progress(t, s, "acct_a", "task_lumen_1", "task_lumen_1", 30) // no change: no event
	_, err := s.tasks.Complete(bg, "acct_a", "task_lumen_1", "task_lumen_1", nil)
	must(t, err)
	_, err = s.tasks.Cancel(bg, "acct_a", "task_lumen_2")
	must(t, err)
	want := []string{"task_lumen_1", "task_lumen_1", "task_lumen_1", "task_lumen_2"}
	for i, w := range want {
		select {
		case e := <-events:
			if e.AccountID != "acct_a" || e.TaskID != w {
				t.Fatalf("event %d: %+v, want acct_a/%s", i, e, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d (%s) never came", i, w)
		}
	}
	select {
	case e := <-events:
		t.Fatalf("an extra event: %+v", e)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Canceling: a pending task is refunded in full, a processing one not, a
// final one is a conflict, a missing one not found; a canceled task never
// starts, and its webhook event waits in the outbox.
func TestCancelTask(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	balance := func() int64 {
		n, _ := rdb.HGet(ctx, accountKey("acct_a"), "credits").Int64()
		return n
	}
	withHook := pending("acct_a", "task_lumen_1")
	withHook.Callback = task.Callback{URL: "https://example.com/h", Events: task.DefaultEvents}
	_, err := s.tasks.Create(ctx, withHook, std, nil)
	must(t, err)
	create(t, s, "acct_a", "task_lumen_2")
	create(t, s, "acct_a", "task_lumen_3")
	mustOutcome(t, task.Applied)(start(s, "acct_a", "task_lumen_2", "run-2"))
	mustOutcome(t, task.Applied)(start(s, "acct_a", "task_lumen_3", "task_lumen_3"))
	_, err = s.tasks.Complete(ctx, "acct_a", "task_lumen_3", "task_lumen_3", nil)
	must(t, err)
	before := balance()

	for _, tc := range []struct {
		name     string
		id       string
		want     task.Cancellation
		code     apperr.Code
		notFound bool
	}{
		{name: "pending", id: "task_lumen_1", want: task.Cancellation{Was: task.Pending, Refunded: std.Price, Hooked: true}},
		{name: "processing", id: "task_lumen_2", want: task.Cancellation{Was: task.Processing, Run: "run-2"}},
		{name: "completed", id: "task_lumen_3", code: apperr.Conflict},
		{name: "canceled", id: "task_lumen_1", code: apperr.Conflict},
		{name: "missing", id: "task_lumen_9", notFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.tasks.Cancel(ctx, "acct_a", tc.id)
			var nf *apperr.NotFoundError
			switch {
			case tc.notFound:
				if !errors.As(err, &nf) {
					t.Fatalf("err %v, want not found", err)
				}
			case tc.code != "":
				if apperr.CodeOf(err) != tc.code {
					t.Fatalf("err %v, want %s", err, tc.code)
				}
			case err != nil || got.Cancellation != tc.want || len(got.Admitted) != 0:
				t.Fatalf("cancel = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if got := balance(); got != before+std.Price {
		t.Errorf("balance %d, want %d (the pending task's price back, the processing one's not)", got, before+std.Price)
	}
	for _, id := range []string{"task_lumen_1", "task_lumen_2"} {
		tk, err := s.tasks.Get(ctx, "acct_a", id)
		must(t, err)
		if tk.Status != task.Canceled || tk.CompleteTime.IsZero() {
			t.Errorf("%s: %s at %v, want canceled with an end time", id, tk.Status, tk.CompleteTime)
		}
	}
	mustOutcome(t, task.AlreadyFinal)(start(s, "acct_a", "task_lumen_1", "task_lumen_1"))
	if c, err := s.tasks.Complete(ctx, "acct_a", "task_lumen_2", "run-2", nil); err != nil || c.Outcome != task.AlreadyFinal {
		t.Errorf("completing a canceled task: %v, %v; want already final", c.Outcome, err)
	}
	hooks, err := rdb.ZRange(ctx, dueOf("acct_a"), 0, -1).Result()
	must(t, err)
	if fmt.Sprint(hooks) != "[h|acct_a|task_lumen_1|task.canceled]" {
		t.Errorf("due work %v, want the one task with a callback's cancel, and nothing of the ended tasks", hooks)
	}
	if n, _ := s.tasks.Inflight(ctx, "acct_a"); n != 0 {
		t.Errorf("%d tasks still count as in flight", n)
	}
	if n, _ := s.tasks.Running(ctx, "acct_a"); n != 0 {
		t.Errorf("%d tasks still hold a place", n)
	}
	checkBooks(t, s, "acct_a")
}

// A create takes its number in its queue in its own step, and a refused
// create takes none; the record holds its queue and number.
func TestCreateTakesQueueSeq(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	seedAccount(t, srv.Client(t), "poor", 0, "")
	ctx := context.Background()
	c := std
	c.Queue = "standard"
	var got []int64
	for i, acct := range []string{"acct_a", "poor", "acct_b", "poor", "acct_a"} {
		tk := pending(acct, fmt.Sprintf("task_lumen_%d", i))
		_, err := s.tasks.Create(ctx, tk, c, nil)
		if acct == "poor" {
			if apperr.CodeOf(err) != apperr.InsufficientCredits || tk.QueueSeq != 0 || tk.Queue != "" {
				t.Fatalf("refused create: %v, queue %q seq %d", err, tk.Queue, tk.QueueSeq)
			}
			continue
		}
		must(t, err)
		stored, err := s.tasks.Get(ctx, acct, tk.ID)
		must(t, err)
		if stored.QueueSeq != tk.QueueSeq || stored.Queue != "standard" || tk.Queue != "standard" {
			t.Fatalf("record's queue %q seq %d, create's %q %d; want standard", stored.Queue, stored.QueueSeq, tk.Queue, tk.QueueSeq)
		}
		got = append(got, tk.QueueSeq)
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("sequence numbers %v, want [1 2 3]", got)
	}
	// A refused create counts nobody out either.
	if st, err := s.queues.Stats(ctx, "standard"); err != nil || st.Dequeued != 0 {
		t.Errorf("queue stats %+v, %v; want none dequeued", st, err)
	}
}

// nextQueueSeq takes the next number of a queue, as a task joining it
// would.
func (db *DB) nextQueueSeq(ctx context.Context, queue string) (int64, error) {
	r, err := joinQueueLua.run(ctx, db, queueKeys{Queue: queueKey(queue)}, joinQueueArgs{Now: db.now().UnixMilli(), N: 1})
	if err != nil {
		return 0, fmt.Errorf("store: queue %s: %w", queue, err)
	}
	return r.Seq, nil
}
