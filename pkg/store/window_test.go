package store

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// windowStore returns the stores on a private Redis with share places an
// account of weight 1, the store's clock at now (moved by the caller), and
// accounts "a" (weight 1), "acct_a" and "acct_b".
func windowStore(t *testing.T, share int, now *time.Time) *stores {
	t.Helper()
	s, _ := newStoreWith(t, Options{Share: share, Now: func() time.Time { return *now }})
	return s
}

// createAll creates tasks of acct, in order (the first is the oldest),
// each with the job "job of <id>" and the queue "standard"; it returns
// whether each was admitted.
func createAll(t *testing.T, s *stores, acct string, c task.Charge, ids ...string) []bool {
	t.Helper()
	c.Queue = "standard"
	var out []bool
	for i, id := range ids {
		cr, err := s.tasks.Create(context.Background(), pendingAt(acct, id, i), c, []byte("job of "+id))
		must(t, err)
		if len(cr.Others) != 0 {
			t.Errorf("create %s admitted others: %+v", id, cr.Others)
		}
		out = append(out, cr.Admitted)
	}
	return out
}

// admittedOf are tasks of "a" that createAll made with std, admitted:
// with their queue and deadline.
func admittedOf(ids ...string) []task.Admitted {
	out := make([]task.Admitted, len(ids))
	for i, id := range ids {
		out[i] = task.Admitted{AccountID: "a", TaskID: id, Queue: "standard", Deadline: std.CountUntil}
	}
	return out
}

// Every way a task gives back its place admits the account's oldest
// parked task, in the same step, and returns it with its queue and
// deadline (its input is in its record, for its run), queue numbered; a second admits the next (FIFO by creation, not by id). A run
// that lets go (Release) or is taken over keeps the place.
func TestWindowFreesAPlace(t *testing.T) {
	t.Parallel()
	fail := task.Failure{Code: "generation_failed", Message: "no"}
	ways := []struct {
		name    string
		started bool // the tasks holding the places were started
		free    func(t *testing.T, s *stores, id string) []task.Admitted
		frees   bool
		status  task.Status // what the freed task becomes ("" removed)
		refund  bool
	}{
		{"complete", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			return mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", id, id, nil)).Admitted
		}, true, task.Completed, false},
		{"fail", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			return mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", id, id, fail)).Admitted
		}, true, task.Failed, true},
		{"fail while pending", false, func(t *testing.T, s *stores, id string) []task.Admitted {
			return mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", id, "", fail)).Admitted
		}, true, task.Failed, true},
		{"cancel while processing", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			c, err := s.tasks.Cancel(ctx, "a", id)
			must(t, err)
			return c.Admitted
		}, true, task.Canceled, false},
		{"cancel while pending", false, func(t *testing.T, s *stores, id string) []task.Admitted {
			c, err := s.tasks.Cancel(ctx, "a", id)
			must(t, err)
			return c.Admitted
		}, true, task.Canceled, true},
		{"abort", false, func(t *testing.T, s *stores, id string) []task.Admitted {
			ok, admitted, err := s.tasks.Abort(ctx, "a", id, "")
			if err != nil || !ok {
				t.Fatalf("Abort = %v, %v", ok, err)
			}
			return admitted
		}, true, "", true},
		{"expire while processing", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			return mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "a", id)).Admitted
		}, true, task.Failed, true},
		{"expire while pending", false, func(t *testing.T, s *stores, id string) []task.Admitted {
			return mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "a", id)).Admitted
		}, true, task.Failed, true},
		{"expire in a batch", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			cs, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"a", id}})
			must(t, errs[0])
			return mustOutcome(t, task.Applied)(cs[0], nil).Admitted
		}, true, task.Failed, true},
		{"poisoned start", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			mustOutcome(t, task.Applied)(start(s, "a", id, id)) // its worker died: crash 1
			return mustOutcome(t, task.Poisoned)(start(s, "a", id, id)).Admitted
		}, true, task.Failed, true},
		{"poisoned takeover", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			next := func(n int) string { return fmt.Sprintf("%s.r%d", id, n) }
			c, _, err := s.tasks.Takeover(ctx, "a", id, id, next)
			if len(mustOutcome(t, task.Applied)(c, err).Admitted) != 0 {
				t.Errorf("a takeover admitted %+v", c.Admitted)
			}
			mustOutcome(t, task.Applied)(start(s, "a", id, id+".r1"))
			c, _, err = s.tasks.Takeover(ctx, "a", id, id+".r1", next)
			return mustOutcome(t, task.Poisoned)(c, err).Admitted
		}, true, task.Failed, true},
		{"release keeps the place", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			must(t, s.tasks.Release(ctx, "a", id, id))
			return nil
		}, false, task.Processing, false},
		{"progress keeps the place", true, func(t *testing.T, s *stores, id string) []task.Admitted {
			progress(t, s, "a", id, id, 50)
			return nil
		}, false, task.Processing, false},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			now := time.Now().Truncate(time.Millisecond)
			s := windowStore(t, 2, &now)
			// e1 and d2 take the two places; c3, b4 and a5 wait, oldest
			// first (their ids sort the other way).
			got := createAll(t, s, "a", std, "e1", "d2", "c3", "b4", "a5")
			if fmt.Sprint(got) != "[true true false false false]" {
				t.Fatalf("admitted %v; want the first two", got)
			}
			if w.started {
				mustOutcome(t, task.Applied)(start(s, "a", "e1", "e1"))
				mustOutcome(t, task.Applied)(start(s, "a", "d2", "d2"))
			}
			checkWindow(t, s, "a")
			before, _ := balance(t, s, "a")
			now = now.Add(time.Second)

			for i, step := range []struct{ free, admits string }{{"e1", "c3"}, {"d2", "b4"}} {
				admitted := w.free(t, s, step.free)
				if !w.frees {
					if len(admitted) != 0 {
						t.Fatalf("admitted %+v; want none (the place is kept)", admitted)
					}
					mustOutcome(t, task.Busy)(start(s, "a", step.admits, step.admits))
					continue
				}
				if !sameAdmitted(admitted, admittedOf(step.admits)) {
					t.Fatalf("freeing %s admitted %+v; want %s with its queue and deadline", step.free, admitted, step.admits)
				}
				// The task admitted holds a place now, is due for its
				// queue check, has its number in its queue, and starts.
				rec := s.rdb.HGetAll(ctx, taskKey("a", step.admits)).Val()
				if rec[fTaskAdmitted] != "1" || rec[fTaskStatus] != "pending" {
					t.Errorf("%s after its admission: %v", step.admits, rec)
				}
				if sc := s.rdb.ZScore(ctx, dueOf("a"), taskDue("a", step.admits)).Val(); int64(sc) != now.Add(FirstQueueCheck).UnixMilli() {
					t.Errorf("%s due at %v; want FirstQueueCheck after its admission", step.admits, int64(sc))
				}
				if tk, _ := s.tasks.Get(ctx, "a", step.admits); tk.Queue != "standard" || tk.QueueSeq != int64(3+i) {
					t.Errorf("%s in %q with number %d; want standard, %d", step.admits, tk.Queue, tk.QueueSeq, 3+i)
				}
				if in, ok := inputOf(t, s, "a", step.admits); !ok || in != "job of "+step.admits {
					t.Errorf("%s after its admission: input %q (kept %v)", step.admits, in, ok)
				}
				if w.started {
					st, err := s.tasks.Start(ctx, "a", step.admits, step.admits)
					mustOutcome(t, task.Applied)(st.Change, err)
					if string(st.Input) != "job of "+step.admits {
						t.Errorf("%s started with the input %q", step.admits, st.Input)
					}
				}
				checkWindow(t, s, "a")
			}
			if n, _ := s.tasks.Parked(ctx, "a"); w.frees && n != 1 {
				t.Errorf("Parked = %d; want a5 alone", n)
			}
			mustOutcome(t, task.Busy)(start(s, "a", "a5", "a5"))
			// What became of the tasks that gave back their places.
			for _, id := range []string{"e1", "d2"} {
				tk, err := s.tasks.Get(ctx, "a", id)
				switch {
				case w.status == "":
					if apperr.CodeOf(err) != apperr.NotFound {
						t.Errorf("%s: %v; want it removed", id, err)
					}
				case err != nil || tk.Status != w.status || tk.Refunded != w.refund:
					t.Errorf("%s: %+v, %v; want %s, refunded %v", id, tk, err, w.status, w.refund)
				}
			}
			after, _ := balance(t, s, "a")
			if want := before + map[bool]int64{true: 2 * std.Price}[w.refund]; after != want {
				t.Errorf("balance %d → %d; want %d", before, after, want)
			}
			checkWindow(t, s, "a")
		})
	}
}

// The window is Options.Share × the account's weight (its field, set by
// Accounts.Create or SetLimits; 0 or none reads as 1): that many tasks
// are admitted at once, the rest parked. Share 0 never parks.
func TestWindowSizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		share     int
		weight    int // the account's (Spec.Weight)
		creates   int
		admitted  int
		setWeight int  // then SetLimits to this weight, and one create more:
		more      int  // the parked tasks it admits first,
		next      bool // and whether it is admitted itself
	}{
		{"share 2: the third parks", 2, 0, 5, 2, 0, 0, false},
		{"share 1", 1, 0, 3, 1, 0, 0, false},
		{"share 2, weight 1", 2, 1, 5, 2, 0, 0, false},
		{"share 2, weight 2 doubles it", 2, 2, 6, 4, 0, 0, false},
		{"share 3, weight 100", 3, account.MaxWeight, 30, 30, 0, 0, false},
		{"share 0 never parks", 0, 0, 50, 50, 0, 0, false},
		{"share 0, weight 5", 0, 5, 20, 20, 0, 0, false},
		{"weight raised to 2 by SetLimits", 2, 1, 3, 2, 2, 1, true},
		{"weight raised to 3 by SetLimits", 2, 1, 8, 2, 3, 4, false},
		{"weight lowered to 1 by SetLimits", 2, 3, 8, 6, 1, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now()
			s, _ := blankStore(t, Options{Share: tt.share, Now: func() time.Time { return now }})
			a, err := s.accounts.Create(ctx, account.Spec{Name: "w", Credits: 10_000, Weight: tt.weight})
			must(t, err)
			run := func(from, n int) int {
				got := 0
				for i := from; i < from+n; i++ {
					cr, err := s.tasks.Create(ctx, pendingAt(a.ID, fmt.Sprint("t", i), i), std, []byte("job"))
					must(t, err)
					if cr.Admitted {
						got++
						if i-from >= tt.admitted {
							t.Errorf("task %d admitted past the window", i)
						}
					}
					for _, o := range cr.Others {
						t.Errorf("create %d admitted %s", i, o.TaskID)
					}
				}
				return got
			}
			if got := run(0, tt.creates); got != tt.admitted {
				t.Errorf("%d of %d admitted; want %d", got, tt.creates, tt.admitted)
			}
			if n, _ := s.tasks.Running(ctx, a.ID); n != int64(tt.admitted) {
				t.Errorf("Running = %d; want %d", n, tt.admitted)
			}
			if n, _ := s.tasks.Parked(ctx, a.ID); n != int64(tt.creates-tt.admitted) {
				t.Errorf("Parked = %d; want %d", n, tt.creates-tt.admitted)
			}
			for i := tt.admitted; i < tt.creates; i++ {
				mustOutcome(t, task.Busy)(start(s, a.ID, fmt.Sprint("t", i), fmt.Sprint("t", i)))
			}
			checkWindow(t, s, a.ID)
			if tt.setWeight == 0 {
				return
			}
			if _, err := s.accounts.SetLimits(ctx, a.ID, account.LimitsUpdate{Weight: &tt.setWeight}); err != nil {
				t.Fatal(err)
			}
			// Raised: the next create admits the oldest parked tasks first
			// (Others), then itself if there is room. Lowered: nothing
			// more is admitted until the places fall below the window.
			cr, err := s.tasks.Create(ctx, pendingAt(a.ID, "next", 1000), std, []byte("job"))
			must(t, err)
			var others []string
			for _, o := range cr.Others {
				others = append(others, o.TaskID)
			}
			want := []string{}
			for i := tt.admitted; i < tt.admitted+tt.more && i < tt.creates; i++ {
				want = append(want, fmt.Sprint("t", i))
			}
			if fmt.Sprint(others) != fmt.Sprint(want) {
				t.Errorf("the create after the new weight admitted %v first; want %v", others, want)
			}
			if cr.Admitted != tt.next {
				t.Errorf("the new task admitted %v; want %v (older parked tasks first)", cr.Admitted, tt.next)
			}
			if tt.setWeight > tt.weight {
				checkWindow(t, s, a.ID)
			} else {
				checkBooks(t, s, a.ID)
			}
		})
	}
}

// Two accounts share nothing: one's full window parks none of the other's
// tasks, and one of weight 2 holds twice the places of one of weight 1.
func TestWindowIsPerAccount(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, _ := blankStore(t, Options{Share: 2, Now: func() time.Time { return now }})
	one, err := s.accounts.Create(ctx, account.Spec{Name: "one", Credits: 1000})
	must(t, err)
	two, err := s.accounts.Create(ctx, account.Spec{Name: "two", Credits: 1000, Weight: 2})
	must(t, err)
	admitted := map[string]int{}
	for i := 0; i < 10; i++ {
		for _, a := range []string{one.ID, two.ID} {
			cr, err := s.tasks.Create(ctx, pendingAt(a, fmt.Sprint("t", i), i), std, nil)
			must(t, err)
			if cr.Admitted {
				admitted[a]++
			}
		}
	}
	if want := map[string]int{one.ID: 2, two.ID: 4}; !maps.Equal(admitted, want) {
		t.Errorf("admitted %v; want %v", admitted, want)
	}
	checkWindow(t, s, one.ID)
	checkWindow(t, s, two.ID)
	// An end in one account admits only its own.
	mustOutcome(t, task.Applied)(start(s, one.ID, "t0", "t0"))
	c := mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, one.ID, "t0", "t0", nil))
	if len(c.Admitted) != 1 || c.Admitted[0].AccountID != one.ID || c.Admitted[0].TaskID != "t2" {
		t.Errorf("admitted %+v; want %s/t2", c.Admitted, one.ID)
	}
	checkWindow(t, s, one.ID)
	checkWindow(t, s, two.ID)
}

// A parked task waits, costing nothing: it keeps its input, is due only at
// its deadline, a start of it is Busy and changes nothing; it can be
// canceled (refunded in full), and expires at its deadline (refunded).
func TestParkedTask(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Millisecond)
	s := windowStore(t, 1, &now)
	c := std
	c.CountUntil = now.Add(time.Minute)
	if got := createAll(t, s, "a", c, "holder", "p", "q"); fmt.Sprint(got) != "[true false false]" {
		t.Fatalf("admitted %v", got)
	}
	if in, ok := inputOf(t, s, "a", "p"); !ok || in != "job of p" {
		t.Errorf("the input of p = %q (kept %v); a parked task keeps its input", in, ok)
	}
	if tk, _ := s.tasks.Get(ctx, "a", "p"); tk.Status != task.Pending || tk.Queue != "standard" || tk.QueueSeq != 0 {
		t.Errorf("a parked task %+v; want pending, to join its queue, with no number yet", tk)
	}

	// A start (its job queued by mistake), a release, progress: nothing.
	rec := s.rdb.HGetAll(ctx, taskKey("a", "p")).Val()
	credits, _ := balance(t, s, "a")
	for i := 0; i < 3; i++ {
		c := mustOutcome(t, task.Busy)(start(s, "a", "p", "p"))
		if c.Refunded != 0 || c.Hooked || len(c.Admitted) != 0 {
			t.Errorf("a busy start did something: %+v", c)
		}
	}
	must(t, s.tasks.Release(ctx, "a", "p", "p"))
	progress(t, s, "a", "p", "p", 50)
	if after := s.rdb.HGetAll(ctx, taskKey("a", "p")).Val(); !maps.Equal(after, rec) {
		t.Errorf("the parked task's record changed: %v → %v", rec, after)
	}
	if after, _ := balance(t, s, "a"); after != credits {
		t.Errorf("balance %d → %d", credits, after)
	}
	checkWindow(t, s, "a")

	// Due: the holder's check; the parked tasks not before their deadline.
	w, err := s.tasks.Due(ctx, ShardOf("a"), now.Add(FirstQueueCheck), 100)
	must(t, err)
	if want := []DueEntry{{Kind: DueCheck, AccountID: "a", TaskID: "holder", Queue: "standard", Deadline: c.CountUntil}}; !sameEntries(w.Entries, want) {
		t.Errorf("Due = %+v; want %+v", w.Entries, want)
	}

	// Canceled: refunded in full, nothing admitted (the window is full).
	cn, err := s.tasks.Cancel(ctx, "a", "p")
	must(t, err)
	if cn.Was != task.Pending || cn.Refunded != std.Price || cn.Run != "" || len(cn.Admitted) != 0 {
		t.Errorf("cancel of a parked task = %+v", cn)
	}
	if after, _ := balance(t, s, "a"); after != credits+std.Price {
		t.Errorf("balance %d → %d; want the price back", credits, after)
	}
	if in, ok := inputOf(t, s, "a", "p"); !ok || in != "job of p" {
		t.Errorf("a canceled task's input = %q (kept %v); want it kept for its record", in, ok)
	}
	if n := s.rdb.Exists(ctx, separateJobKey("a", "p")).Val(); n != 0 {
		t.Error("a canceled task keeps a job key")
	}
	checkWindow(t, s, "a")

	// q expires at its deadline, not before, refunded.
	mustOutcome(t, task.Applied)(start(s, "a", "holder", "holder"))
	// Before it, only the processing holder's checks of its job.
	if w, _ := s.tasks.Due(ctx, ShardOf("a"), c.CountUntil.Add(-time.Millisecond), 100); len(w.Entries) != 1 || w.Entries[0].Kind != DueCheck || w.Entries[0].TaskID != "holder" || !w.Next.Equal(c.CountUntil) {
		t.Errorf("due before the deadline: %+v; want the holder's check only, the next at the deadline", w)
	}
	now = c.CountUntil
	w, err = s.tasks.Due(ctx, ShardOf("a"), now, 100)
	must(t, err)
	want := []DueEntry{{Kind: DueExpire, AccountID: "a", TaskID: "holder"}, {Kind: DueExpire, AccountID: "a", TaskID: "q"}}
	if !sameEntries(w.Entries, want) {
		t.Fatalf("due at the deadline: %+v; want %+v", w.Entries, want)
	}
	changes, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"a", "q"}})
	must(t, errs[0])
	if c := changes[0]; c.Outcome != task.Applied || c.Refunded != std.Price || len(c.Admitted) != 0 || c.Model != testModel {
		t.Errorf("expire of a parked task = %+v", c)
	}
	if tk, _ := s.tasks.Get(ctx, "a", "q"); tk.Status != task.Failed || tk.Failure.Code != string(task.Timeout) || !tk.Refunded {
		t.Errorf("the parked task past its deadline: %+v", tk)
	}
	if n, _ := s.tasks.Parked(ctx, "a"); n != 0 {
		t.Errorf("Parked = %d", n)
	}
	checkWindow(t, s, "a")
}

// A task admitted less than FirstQueueCheck before its deadline is due at
// its deadline, not at the check: it expires on time.
func TestAdmittedNearItsDeadline(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Millisecond)
	s := windowStore(t, 1, &now)
	c := std
	c.CountUntil = now.Add(FirstQueueCheck / 2)
	if got := createAll(t, s, "a", c, "first", "near"); fmt.Sprint(got) != "[true false]" {
		t.Fatalf("admitted %v", got)
	}
	now = now.Add(time.Second)
	mustOutcome(t, task.Applied)(start(s, "a", "first", "first"))
	done, err := s.tasks.Complete(ctx, "a", "first", "first", nil)
	must(t, err)
	if len(done.Admitted) != 1 || done.Admitted[0].TaskID != "near" {
		t.Fatalf("the end admitted %+v; want near", done.Admitted)
	}
	score, err := s.rdb.ZScore(ctx, dueOf("a"), taskDue("a", "near")).Result()
	must(t, err)
	if due := time.UnixMilli(int64(score)); !due.Equal(c.CountUntil) {
		t.Errorf("the task admitted near its deadline is due at %v; want its deadline %v (its check at %v)", due, c.CountUntil, now.Add(FirstQueueCheck))
	}
	now = c.CountUntil
	w, err := s.tasks.Due(ctx, ShardOf("a"), now, 100)
	must(t, err)
	if want := []DueEntry{{Kind: DueExpire, AccountID: "a", TaskID: "near"}}; !sameEntries(w.Entries, want) {
		t.Errorf("due at its deadline: %+v; want %+v", w.Entries, want)
	}
}
