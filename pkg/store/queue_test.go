package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// dequeuedOf returns how many tasks the store counted out of a queue,
// the counts it holds to batch them (a cluster's) written first.
func dequeuedOf(t *testing.T, s *stores, queue string) int64 {
	t.Helper()
	if err := s.db.FlushQueueCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := s.queues.Stats(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return st.Dequeued
}

// The queue-position bookkeeping is the store's: a create records the
// task's queue and, if the task is admitted, its number, and every change
// that takes an admitted task out of pending counts it out of its queue
// exactly once and drops both fields from the record; a task that leaves
// processing (failed, canceled, completed, expired, poisoned) is not
// counted again, and a change that leaves the task pending (busy,
// superseded, not applied) counts nothing. A parked task never joined its
// queue: it takes no number, and leaving pending counts nothing.
func TestQueueBookkeeping(t *testing.T) {
	t.Parallel()
	const queue = "standard"
	fail := task.Failure{Code: "x", Message: "y"}
	tests := []struct {
		name  string
		steps func(t *testing.T, s *stores, id string)
		// left: the task left pending (counted out once, unless parked);
		// gone: its record was removed (an abort); parked: the account's
		// window (share 1) is full, and the task waits parked.
		left, gone, parked bool
	}{
		{"start", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			mustOutcome(t, task.Applied)(start(s, "a", id, id)) // a retry: no second count
		}, true, false, false},
		{"start, then complete", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", id, id, nil))
		}, true, false, false},
		{"start, then fail", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", id, id, fail))
		}, true, false, false},
		{"start, then cancel", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			c, err := s.tasks.Cancel(ctx, "a", id)
			must(t, err)
			if c.Was != task.Processing {
				t.Fatalf("canceled a %s task", c.Was)
			}
		}, true, false, false},
		{"start, then expire", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "a", id))
		}, true, false, false},
		{"start, then poisoned", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			mustOutcome(t, task.Applied)(start(s, "a", id, id)) // crash 1
			mustOutcome(t, task.Poisoned)(start(s, "a", id, id))
		}, true, false, false},
		{"start, then a poisoned takeover", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			c, _, err := s.tasks.Takeover(ctx, "a", id, id, runName)
			mustOutcome(t, task.Applied)(c, err)
			mustOutcome(t, task.Applied)(start(s, "a", id, "t.r1"))
			c, _, err = s.tasks.Takeover(ctx, "a", id, "t.r1", runName)
			mustOutcome(t, task.Poisoned)(c, err)
		}, true, false, false},
		{"cancel while pending", func(t *testing.T, s *stores, id string) {
			c, err := s.tasks.Cancel(ctx, "a", id)
			must(t, err)
			if c.Was != task.Pending {
				t.Fatalf("canceled a %s task", c.Was)
			}
			if _, err := s.tasks.Cancel(ctx, "a", id); err == nil {
				t.Fatal("canceled twice")
			}
		}, true, false, false},
		{"fail while pending", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", id, "", fail))
			mustOutcome(t, task.AlreadyFinal)(s.tasks.Fail(ctx, "a", id, "", fail))
		}, true, false, false},
		{"fail while pending, by its run", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", id, id, fail))
		}, true, false, false},
		{"complete while pending", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", id, id, nil))
		}, true, false, false},
		{"expire while pending", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "a", id))
			mustOutcome(t, task.AlreadyFinal)(s.tasks.Expire(ctx, "a", id))
		}, true, false, false},
		{"takeovers while pending, then a start", func(t *testing.T, s *stores, id string) {
			// The worker dies before it starts the task, twice: no crash,
			// for it never ran the task.
			run := id
			for range 2 {
				c, next, err := s.tasks.Takeover(ctx, "a", id, run, runName)
				mustOutcome(t, task.Applied)(c, err)
				if tk, _ := s.tasks.Get(ctx, "a", id); tk.Status != task.Pending || tk.Queue != queue {
					t.Fatalf("after a takeover: %+v; want it still pending in %s", tk, queue)
				}
				if next == run {
					t.Fatalf("the takeover gave the task to its orphan %s again", run)
				}
				run = next
			}
			mustOutcome(t, task.Applied)(start(s, "a", id, run))
		}, true, false, false},
		{"abort", func(t *testing.T, s *stores, id string) {
			if ok, _, err := s.tasks.Abort(ctx, "a", id, ""); err != nil || !ok {
				t.Fatalf("Abort = %v, %v", ok, err)
			}
			if ok, _, err := s.tasks.Abort(ctx, "a", id, ""); err != nil || ok {
				t.Fatalf("second Abort = %v, %v", ok, err)
			}
		}, true, true, false},
		{"start, then abort", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(start(s, "a", id, id))
			if ok, _, err := s.tasks.Abort(ctx, "a", id, ""); err != nil || ok {
				t.Fatalf("Abort of a started task = %v, %v", ok, err)
			}
		}, true, false, false},
		{"busy start of a parked task", func(t *testing.T, s *stores, id string) {
			c := mustOutcome(t, task.Busy)(start(s, "a", id, id))
			if c.Refunded != 0 || c.Hooked || len(c.Admitted) != 0 {
				t.Errorf("a busy start did something: %+v", c)
			}
			mustOutcome(t, task.Busy)(start(s, "a", id, id))
		}, false, false, true},
		{"a parked task canceled", func(t *testing.T, s *stores, id string) {
			c, err := s.tasks.Cancel(ctx, "a", id)
			must(t, err)
			if c.Was != task.Pending || c.Refunded != std.Price {
				t.Fatalf("cancel = %+v", c)
			}
		}, true, false, true},
		{"a parked task expired", func(t *testing.T, s *stores, id string) {
			mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "a", id))
		}, true, false, true},
		{"a parked task aborted", func(t *testing.T, s *stores, id string) {
			if ok, _, err := s.tasks.Abort(ctx, "a", id, ""); err != nil || !ok {
				t.Fatalf("Abort = %v, %v", ok, err)
			}
		}, true, true, true},
		{"superseded start", func(t *testing.T, s *stores, id string) {
			c, _, err := s.tasks.Takeover(ctx, "a", id, id, func(int) string { return id + ".r1" })
			mustOutcome(t, task.Applied)(c, err)
			mustOutcome(t, task.Superseded)(start(s, "a", id, id))
		}, false, false, false},
		{"release, progress, a superseded fail and complete", func(t *testing.T, s *stores, id string) {
			c, _, err := s.tasks.Takeover(ctx, "a", id, id, func(int) string { return id + ".r1" })
			mustOutcome(t, task.Applied)(c, err)
			must(t, s.tasks.Release(ctx, "a", id, id+".r1"))
			progress(t, s, "a", id, id+".r1", 50)
			mustOutcome(t, task.Superseded)(s.tasks.Fail(ctx, "a", id, id, fail))
			mustOutcome(t, task.Superseded)(s.tasks.Complete(ctx, "a", id, id, nil))
		}, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o Options
			if tt.parked {
				o.Share = 1
			}
			s, _ := newStoreWith(t, o)
			c := std
			c.Queue = queue
			// Another task joins first, and stays: its number is 1.
			_, err := s.tasks.Create(ctx, pending("a", "first"), c, nil)
			must(t, err)
			const id = "t"
			tk := pending("a", id)
			created, err := s.tasks.Create(ctx, tk, c, nil)
			must(t, err)
			// An admitted task is number 2; a parked one has no number yet,
			// and the record keeps only the queue it is to join.
			seq, wantQueue, wantFields := int64(2), queue, fmt.Sprint([]any{queue, "2"})
			if tt.parked {
				seq, wantQueue, wantFields = 0, "", fmt.Sprint([]any{queue, nil})
			}
			if created.Admitted == tt.parked || tk.Queue != wantQueue || tk.QueueSeq != seq {
				t.Fatalf("created (admitted %v) in %q with number %d; want %q, %d", created.Admitted, tk.Queue, tk.QueueSeq, wantQueue, seq)
			}
			if v := s.rdb.HMGet(ctx, taskKey("a", id), fTaskQueue, fTaskQueueSeq).Val(); fmt.Sprint(v) != wantFields {
				t.Fatalf("the record holds queue fields %v; want %s", v, wantFields)
			}

			tt.steps(t, s, id)

			var want int64
			if tt.left && !tt.parked {
				want = 1
			}
			if got := dequeuedOf(t, s, queue); got != want {
				t.Errorf("counted %d out of the queue; want %d", got, want)
			}
			n := s.rdb.Exists(ctx, taskKey("a", id)).Val()
			switch {
			case tt.gone:
				// Gone, or an undo's tombstone (abort.lua): no task.
				if keys := s.rdb.HKeys(ctx, taskKey("a", id)).Val(); n != 0 && fmt.Sprint(keys) != "["+fTaskVoid+"]" {
					t.Errorf("the record is still there: %v", keys)
				}
				if _, err := s.tasks.Get(ctx, "a", id); apperr.CodeOf(err) != apperr.NotFound {
					t.Errorf("Get of an aborted task: %v; want not found", err)
				}
			case n == 0:
				t.Error("the record is gone")
			case tt.left:
				// A task processing keeps its job's queue (for the checks
				// of its run's job), not its number; an ended one neither.
				got, _ := s.tasks.Get(ctx, "a", id)
				wantFields, wantQueue := "[<nil> <nil>]", ""
				if got != nil && got.Status == task.Processing {
					wantFields, wantQueue = fmt.Sprint([]any{queue, nil}), queue
				}
				if v := s.rdb.HMGet(ctx, taskKey("a", id), fTaskQueue, fTaskQueueSeq).Val(); fmt.Sprint(v) != wantFields {
					t.Errorf("a task out of pending keeps its queue fields %v; want %s", v, wantFields)
				}
				if got == nil || got.Status == task.Pending || got.Queue != wantQueue || got.QueueSeq != 0 {
					t.Errorf("task %+v; want it out of pending, in queue %q with no number", got, wantQueue)
				}
			default:
				if got, _ := s.tasks.Get(ctx, "a", id); got.Status != task.Pending || got.Queue != queue || got.QueueSeq != seq {
					t.Errorf("task %+v; want it pending, number %d in %s", got, seq, queue)
				}
			}
			checkWindow(t, s, "a")
			// The task that stays waiting is untouched, and is now first
			// in line only if the other left.
			first, err := s.tasks.Get(ctx, "a", "first")
			must(t, err)
			if first.Status != task.Pending || first.Queue != queue || first.QueueSeq != 1 {
				t.Errorf("the other task %+v", first)
			}
			st, err := s.queues.Stats(ctx, queue)
			must(t, err)
			if !tt.left && !tt.gone && !tt.parked {
				if p := st.PositionOf(2, time.Now()); p.Position != 2 {
					t.Errorf("the task's position %+v; want 2", p)
				}
			}
		})
	}
}

// What a change reports is what it did: the credits it gave back
// (matching the balance and the ledger) and whether it put the task's
// final event in the account's outbox (matching the outbox), at the
// store's time.
func TestChangesReportWhatTheyDid(t *testing.T) {
	t.Parallel()
	fail := task.Failure{Code: "x", Message: "y"}
	all := task.DefaultEvents
	next := runName
	tests := []struct {
		name   string
		events []string // the callback's; nil: no callback
		before func(t *testing.T, s *stores)
		change func(s *stores) (Change, error)
		want   Change // At is checked apart
		event  string // the event hooked, if any
	}{
		{"complete", all, started, func(s *stores) (Change, error) {
			return s.tasks.Complete(ctx, "a", "t", "t", nil)
		}, Change{Outcome: task.Applied, Hooked: true}, task.EventCompleted},
		{"complete, no callback", nil, started, func(s *stores) (Change, error) {
			return s.tasks.Complete(ctx, "a", "t", "t", nil)
		}, Change{Outcome: task.Applied}, ""},
		{"complete, a callback for failures only", []string{task.EventFailed}, started, func(s *stores) (Change, error) {
			return s.tasks.Complete(ctx, "a", "t", "t", nil)
		}, Change{Outcome: task.Applied}, ""},
		{"complete, superseded", all, started, func(s *stores) (Change, error) {
			return s.tasks.Complete(ctx, "a", "t", "t.r9", nil)
		}, Change{Outcome: task.Superseded}, ""},
		{"fail", all, started, func(s *stores) (Change, error) {
			return s.tasks.Fail(ctx, "a", "t", "t", fail)
		}, Change{Model: testModel, Outcome: task.Applied, Hooked: true, Refunded: std.Price}, task.EventFailed},
		{"fail while pending, no callback", nil, nil, func(s *stores) (Change, error) {
			return s.tasks.Fail(ctx, "a", "t", "", fail)
		}, Change{Model: testModel, Outcome: task.Applied, Refunded: std.Price}, ""},
		{"fail, a callback for completions only", []string{task.EventCompleted}, started, func(s *stores) (Change, error) {
			return s.tasks.Fail(ctx, "a", "t", "t", fail)
		}, Change{Model: testModel, Outcome: task.Applied, Refunded: std.Price}, ""},
		{"fail, a callback for progress only", []string{task.EventProgress}, started, func(s *stores) (Change, error) {
			return s.tasks.Fail(ctx, "a", "t", "t", fail)
		}, Change{Model: testModel, Outcome: task.Applied, Refunded: std.Price}, ""},
		{"fail, already failed", all, func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "t", "", fail))
			must(t, s.hooks.Queued(ctx, "a", "t", task.EventFailed, 0))
		}, func(s *stores) (Change, error) {
			return s.tasks.Fail(ctx, "a", "t", "", fail)
		}, Change{Model: testModel, Outcome: task.AlreadyFinal}, ""},
		{"fail, superseded", all, started, func(s *stores) (Change, error) {
			return s.tasks.Fail(ctx, "a", "t", "t.r9", fail)
		}, Change{Model: testModel, Outcome: task.Superseded}, ""},
		{"fail, missing", all, func(t *testing.T, s *stores) {
			must(t, s.rdb.Del(ctx, taskKey("a", "t")).Err())
		}, func(s *stores) (Change, error) {
			return s.tasks.Fail(ctx, "a", "t", "", fail)
		}, Change{Outcome: task.Missing}, ""},
		{"expire", all, started, func(s *stores) (Change, error) {
			return s.tasks.Expire(ctx, "a", "t")
		}, Change{Model: testModel, Outcome: task.Applied, Hooked: true, Refunded: std.Price}, task.EventFailed},
		{"expire while pending, no callback", nil, nil, func(s *stores) (Change, error) {
			return s.tasks.Expire(ctx, "a", "t")
		}, Change{Model: testModel, Outcome: task.Applied, Refunded: std.Price}, ""},
		{"expire, already completed", all, func(t *testing.T, s *stores) {
			started(t, s)
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "t", "t", nil))
			must(t, s.hooks.Queued(ctx, "a", "t", task.EventCompleted, 0))
		}, func(s *stores) (Change, error) {
			return s.tasks.Expire(ctx, "a", "t")
		}, Change{Model: testModel, Outcome: task.AlreadyFinal}, ""},
		{"expire in a batch", all, started, func(s *stores) (Change, error) {
			cs, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"a", "t"}})
			return cs[0], errs[0]
		}, Change{Model: testModel, Outcome: task.Applied, Hooked: true, Refunded: std.Price}, task.EventFailed},
		{"expire in a batch while pending, no callback", nil, nil, func(s *stores) (Change, error) {
			cs, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"a", "t"}})
			return cs[0], errs[0]
		}, Change{Model: testModel, Outcome: task.Applied, Refunded: std.Price}, ""},
		{"start", all, nil, func(s *stores) (Change, error) {
			return start(s, "a", "t", "t")
		}, Change{Model: testModel, Outcome: task.Applied}, ""},
		{"start, poisoned", all, crashedOnce, func(s *stores) (Change, error) {
			return start(s, "a", "t", "t")
		}, Change{Model: testModel, Outcome: task.Poisoned, Hooked: true, Refunded: std.Price}, task.EventFailed},
		{"start, poisoned, a callback for completions only", []string{task.EventCompleted}, crashedOnce, func(s *stores) (Change, error) {
			return start(s, "a", "t", "t")
		}, Change{Model: testModel, Outcome: task.Poisoned, Refunded: std.Price}, ""},
		{"start, poisoned, no callback", nil, crashedOnce, func(s *stores) (Change, error) {
			return start(s, "a", "t", "t")
		}, Change{Model: testModel, Outcome: task.Poisoned, Refunded: std.Price}, ""},
		{"takeover", all, started, func(s *stores) (Change, error) {
			c, _, err := s.tasks.Takeover(ctx, "a", "t", "t", next)
			return c, err
		}, Change{Model: testModel, Outcome: task.Applied}, ""},
		{"takeover, poisoned", all, func(t *testing.T, s *stores) {
			started(t, s)
			c, _, err := s.tasks.Takeover(ctx, "a", "t", "t", next)
			mustOutcome(t, task.Applied)(c, err)
			mustOutcome(t, task.Applied)(start(s, "a", "t", "t.r1"))
		}, func(s *stores) (Change, error) {
			c, _, err := s.tasks.Takeover(ctx, "a", "t", "t.r1", next)
			return c, err
		}, Change{Model: testModel, Outcome: task.Poisoned, Hooked: true, Refunded: std.Price}, task.EventFailed},
		{"takeover, poisoned, no callback", nil, func(t *testing.T, s *stores) {
			started(t, s)
			c, _, err := s.tasks.Takeover(ctx, "a", "t", "t", next)
			mustOutcome(t, task.Applied)(c, err)
			mustOutcome(t, task.Applied)(start(s, "a", "t", "t.r1"))
		}, func(s *stores) (Change, error) {
			c, _, err := s.tasks.Takeover(ctx, "a", "t", "t.r1", next)
			return c, err
		}, Change{Model: testModel, Outcome: task.Poisoned, Refunded: std.Price}, ""},
		{"cancel while pending", all, nil, func(s *stores) (Change, error) {
			return cancelChange(s)
		}, Change{Outcome: task.Applied, Hooked: true, Refunded: std.Price}, task.EventCanceled},
		{"cancel while processing", all, started, func(s *stores) (Change, error) {
			return cancelChange(s)
		}, Change{Outcome: task.Applied, Hooked: true}, task.EventCanceled},
		{"cancel, a callback for completions only", []string{task.EventCompleted}, nil, func(s *stores) (Change, error) {
			return cancelChange(s)
		}, Change{Outcome: task.Applied, Refunded: std.Price}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now().Truncate(time.Millisecond)
			s, _ := newStoreWith(t, Options{Now: func() time.Time { return now }})
			tk := pending("a", "t")
			if tt.events != nil {
				tk.Callback = task.Callback{URL: "https://hooks.example.com/easel", Events: tt.events}
			}
			_, err := s.tasks.Create(ctx, tk, std, nil)
			must(t, err)
			if tt.before != nil {
				tt.before(t, s)
			}
			credits, refunds := balance(t, s, "a")
			outbox := hooksDue(t, s, "a")
			now = now.Add(time.Second)

			got, err := tt.change(s)
			must(t, err)
			if got.Outcome != tt.want.Outcome || got.Hooked != tt.want.Hooked || got.Refunded != tt.want.Refunded || got.Model != tt.want.Model {
				t.Errorf("change %+v; want %+v", got, tt.want)
			}
			if !got.At.IsZero() && !got.At.Equal(now) {
				t.Errorf("change made at %v; want the store's time %v", got.At, now)
			}
			// The credits it says it gave back are back, with one ledger
			// entry.
			after, refundsAfter := balance(t, s, "a")
			if after-credits != got.Refunded {
				t.Errorf("balance %d → %d; the change says it refunded %d", credits, after, got.Refunded)
			}
			wantRefunds := refunds
			if got.Refunded > 0 {
				wantRefunds++
			}
			if refundsAfter != wantRefunds {
				t.Errorf("%d refunds in the ledger; want %d", refundsAfter, wantRefunds)
			}
			// Hooked: its event, and only it, went to the outbox (the
			// shard's due work), due HookGrace after the task ended.
			grown := hooksDue(t, s, "a") - outbox
			switch {
			case got.Hooked && grown != 1:
				t.Errorf("hooked, and the outbox grew by %d", grown)
			case !got.Hooked && grown != 0:
				t.Errorf("not hooked, and the outbox grew by %d", grown)
			case tt.event != "":
				score, err := s.rdb.ZScore(ctx, dueOf("a"), hookDue("a", "t", tt.event)).Result()
				if err != nil || int64(score) != now.Add(HookGrace).UnixMilli() {
					t.Errorf("the outbox holds %s at %v (%v); want it at %v", hookDue("a", "t", tt.event), score, err, now.Add(HookGrace).UnixMilli())
				}
			}
			checkBooks(t, s, "a")
		})
	}
}

// started starts task t of account a, by run t.
func started(t *testing.T, s *stores) {
	t.Helper()
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
}

// crashedOnce starts task t, then starts it again as if its worker died:
// its next start without a release is its second crash.
func crashedOnce(t *testing.T, s *stores) {
	t.Helper()
	started(t, s)
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
}

// cancelChange cancels task t of account a, reporting the cancellation as
// a change.
func cancelChange(s *stores) (Change, error) {
	c, err := s.tasks.Cancel(ctx, "a", "t")
	if err != nil {
		return Change{}, err
	}
	return Change{Outcome: task.Applied, Hooked: c.Hooked, Refunded: c.Refunded}, nil
}

// Progress wants a webhook only when the progress rose on a task the run
// owns and its callback asks for task.progress.
func TestProgressWantsAWebhook(t *testing.T) {
	t.Parallel()
	type step struct {
		run  string
		pct  int
		want bool
	}
	tests := []struct {
		name    string
		events  []string
		started bool
		steps   []step
	}{
		{"progress events wanted", task.Events, true, []step{
			{"t", 10, true}, {"t", 10, false}, {"t", 5, false}, {"t", 40, true}, {"t.r9", 60, false},
			{"t", 150, true}, {"t", 99, false}, {"t", 150, false},
		}},
		{"only progress events", []string{task.EventProgress}, true, []step{{"t", 10, true}, {"t", 20, true}}},
		{"final events only", task.DefaultEvents, true, []step{{"t", 10, false}, {"t", 20, false}}},
		{"no callback", nil, true, []step{{"t", 10, false}, {"t", 20, false}}},
		{"not started", task.Events, false, []step{{"t", 10, false}, {"", 20, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			tk := pending("a", "t")
			if tt.events != nil {
				tk.Callback = task.Callback{URL: "https://hooks.example.com/easel", Events: tt.events}
			}
			_, err := s.tasks.Create(ctx, tk, std, nil)
			must(t, err)
			if tt.started {
				started(t, s)
			}
			for i, st := range tt.steps {
				if got := progress(t, s, "a", "t", st.run, st.pct); got != st.want {
					t.Errorf("step %d: Progress(%s, %d) = %v; want %v", i, st.run, st.pct, got, st.want)
				}
			}
		})
	}
	t.Run("ended", func(t *testing.T) {
		s, _ := newStore(t)
		withCallbackOf(t, s, "a", "t", task.Events...)
		started(t, s)
		mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "t", "t", nil))
		if progress(t, s, "a", "t", "t", 50) {
			t.Error("progress of a completed task wants a webhook")
		}
		if got, _ := s.tasks.Get(ctx, "a", "t"); got.Progress != 100 {
			t.Errorf("progress %d after completion; want 100", got.Progress)
		}
	})
}

// hooksDue counts the final webhook events of acct's tasks on its shard's
// due work (the outbox).
func hooksDue(t *testing.T, s *stores, acct string) int {
	t.Helper()
	n := 0
	for _, m := range s.rdb.ZRange(context.Background(), dueOf(acct), 0, -1).Val() {
		if strings.HasPrefix(m, "h|"+acct+"|") {
			n++
		}
	}
	return n
}

// withCallbackOf creates a pending task of acct with a callback wanting
// events.
func withCallbackOf(t *testing.T, s *stores, acct, id string, events ...string) {
	t.Helper()
	tk := pending(acct, id)
	tk.Callback = task.Callback{URL: "https://hooks.example.com/easel", Events: events}
	if _, err := s.tasks.Create(ctx, tk, std, nil); err != nil {
		t.Fatal(err)
	}
}
