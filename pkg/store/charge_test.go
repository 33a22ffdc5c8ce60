package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

func TestConcurrentCreatesNeverOverdraw(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	rdb := srv.Client(t)
	seedAccount(t, rdb, "poor", 50*4, "")
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused := 0, 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.tasks.Create(context.Background(), pending("poor", fmt.Sprintf("task_lumen_%d", i)), std, nil)
			mu.Lock()
			defer mu.Unlock()
			switch apperr.CodeOf(err) {
			case "":
				accepted++
			case apperr.InsufficientCredits:
				refused++
			default:
				t.Errorf("create %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if accepted != 50 || refused != 150 {
		t.Errorf("accepted %d, refused %d; want 50 and 150", accepted, refused)
	}
	if bal := rdb.HGet(ctx, accountKey("poor"), "credits").Val(); bal != "0" {
		t.Errorf("balance %s; want 0", bal)
	}
	entries := ledgerOf(t, rdb, "poor")
	tasks := map[string]bool{}
	for _, e := range entries {
		if e.Values["kind"] != "debit" || e.Values["amount"] != "-4" {
			t.Errorf("ledger entry %v", e.Values)
		}
		tasks[e.Values["task"].(string)] = true
	}
	if len(entries) != 50 || len(tasks) != 50 {
		t.Errorf("%d ledger entries for %d tasks; want 50 debits of 50 tasks", len(entries), len(tasks))
	}
	if n := len(rdb.Keys(ctx, taskKey("poor", "*")).Val()); n != 50 {
		t.Errorf("%d task records; want 50", n)
	}
	if b := checkBooks(t, s, "poor"); b.unfinished != 50 {
		t.Errorf("%d unfinished tasks; want 50", b.unfinished)
	}
}

func TestPaymentRequiredWritesNothing(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	rdb := srv.Client(t)
	seedAccount(t, rdb, "poor", 17, "")
	_, err := s.tasks.Create(ctx, pending("poor", "t1"), task.Charge{Price: 18, Tier: "pro", MaxInflight: 10, CountUntil: time.Now().Add(time.Hour)}, []byte("job"))
	var e *apperr.InsufficientCreditsError
	if !errors.As(err, &e) || e.Price != 18 || e.Balance != 17 {
		t.Fatalf("Create = %v; want insufficient credits with price 18 and balance 17", err)
	}
	if rdb.Exists(ctx, taskKey("poor", "t1"), separateJobKey("poor", "t1"), ledgerKey("poor"), parkedKey("poor"), dueOf("poor"), tasksIndexKey("poor")).Val() != 0 {
		t.Error("a refused create wrote something")
	}
	if bal := rdb.HGet(ctx, accountKey("poor"), "credits").Val(); bal != "17" {
		t.Errorf("balance %s", bal)
	}
	if v := rdb.HMGet(ctx, accountKey("poor"), fAcctUnfinished, fAcctAdmitted).Val(); v[0] != nil || v[1] != nil {
		t.Errorf("a refused create moved the counters: %v", v)
	}
}

func TestCreateRefusals(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, srv := newStoreWith(t, Options{Now: func() time.Time { return now }})
	rdb := srv.Client(t)
	seedAccount(t, rdb, "stdonly", 100, "standard")
	seedAccount(t, rdb, "off", 100, "")
	rdb.HSet(ctx, accountKey("off"), "status", "disabled")
	seedAccount(t, rdb, "small", 100, "")
	rdb.HSet(ctx, accountKey("small"), "inflight_max", 2)

	pro := task.Charge{Price: 18, Tier: "pro", MaxInflight: 10, CountUntil: time.Now().Add(time.Hour)}
	tests := []struct {
		name, acct string
		c          task.Charge
		want       error
	}{
		{"model not allowed", "stdonly", pro, &apperr.ModelNotAllowedError{Model: "lumen-2.5-flash-image"}},
		{"allowed model", "stdonly", std, nil},
		{"disabled", "off", std, apperr.ErrAccountDisabled},
		{"no account", "ghost", std, apperr.ErrUnknownKey},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.tasks.Create(ctx, pending(tt.acct, "t"+strconv.Itoa(i)), tt.c, nil)
			if !sameError(err, tt.want) {
				t.Errorf("Create = %v; want %v", err, tt.want)
			}
		})
	}

	t.Run("in-flight limit", func(t *testing.T) {
		create(t, s, "small", "f1")
		create(t, s, "small", "f2")
		_, err := s.tasks.Create(ctx, pending("small", "f3"), std, nil)
		var le *apperr.InflightLimitError
		if !errors.As(err, &le) || le.Limit != 2 {
			t.Fatalf("third create = %v; want the in-flight limit, naming 2", err)
		}
		// Finishing a task frees its slot, whichever way it ends.
		mustOutcome(t, task.Applied)(start(s, "small", "f1", "f1"))
		mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "small", "f1", "f1", nil))
		create(t, s, "small", "f3")
		mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "small", "f2", "f2", task.Failure{Code: "x", Message: "y"}))
		create(t, s, "small", "f4")
		if _, err := s.tasks.Create(ctx, pending("small", "f5"), std, nil); apperr.CodeOf(err) != apperr.LimitExceeded {
			t.Errorf("over the limit again: %v", err)
		}
		_, err = s.tasks.Cancel(ctx, "small", "f3")
		must(t, err)
		create(t, s, "small", "f5")
		if ok, _, err := s.tasks.Abort(ctx, "small", "f5", ""); err != nil || !ok {
			t.Fatalf("Abort = %v, %v", ok, err)
		}
		create(t, s, "small", "f6")
		if _, err := s.tasks.Create(ctx, pending("small", "f7"), std, nil); apperr.CodeOf(err) != apperr.LimitExceeded {
			t.Errorf("over the limit after a cancel and an abort: %v", err)
		}
		checkBooks(t, s, "small")
	})

	// A task past its deadline counts until the recovery expires it (the
	// account's count is a counter the end of each task takes it off, not
	// a set of deadlines pruned as they pass), then no longer.
	t.Run("default limit and overdue tasks", func(t *testing.T) {
		seedAccount(t, rdb, "dflt", 100, "")
		c := std
		c.MaxInflight = 1
		c.CountUntil = now.Add(time.Second) // a task no worker will ever finish
		if _, err := s.tasks.Create(ctx, pending("dflt", "g1"), c, nil); err != nil {
			t.Fatal(err)
		}
		// Its deadline passes; its first check (FirstQueueCheck after it
		// was admitted) finds it past it.
		now = now.Add(FirstQueueCheck + time.Second)
		later := task.Charge{Price: 4, Tier: "standard", MaxInflight: 1, CountUntil: now.Add(time.Hour)}
		if _, err := s.tasks.Create(ctx, pending("dflt", "g2"), later, nil); apperr.CodeOf(err) != apperr.LimitExceeded {
			t.Fatalf("an overdue task not expired yet: %v; want it to count", err)
		}
		expireDue(t, s, "dflt", now)
		if got, _ := s.tasks.Get(ctx, "dflt", "g1"); got.Status != task.Failed || got.Failure.Code != string(task.Timeout) {
			t.Fatalf("the overdue task %+v; want failed, timeout", got)
		}
		if _, err := s.tasks.Create(ctx, pending("dflt", "g2"), later, nil); err != nil {
			t.Fatalf("the expired task still counted: %v", err)
		}
		if _, err := s.tasks.Create(ctx, pending("dflt", "g3"), later, nil); apperr.CodeOf(err) != apperr.LimitExceeded {
			t.Errorf("default limit of 1 not applied: %v", err)
		}
	})
}

// expireDue reads the due work of acct's shard at now and expires the
// tasks it says are past their deadline, as the recovery does; it returns
// their changes.
func expireDue(t *testing.T, s *stores, acct string, now time.Time) []Change {
	t.Helper()
	w, err := s.tasks.Due(context.Background(), ShardOf(acct), now, 10_000)
	must(t, err)
	var refs []TaskRef
	for _, e := range w.Entries {
		if e.Kind == DueExpire {
			refs = append(refs, TaskRef{e.AccountID, e.TaskID})
		}
	}
	changes, errs := s.tasks.ExpireAll(context.Background(), refs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("expire %s: %v", refs[i].TaskID, err)
		}
	}
	return changes
}

func TestRefundExactlyOnce(t *testing.T) {
	t.Parallel()
	fail := func(s *stores, code string) (Change, error) {
		return s.tasks.Fail(ctx, "r", "t", "t", task.Failure{Code: code, Message: "x"})
	}
	tests := []struct {
		name       string
		run        func(s *stores) int64 // returns the credits the changes reported refunded
		wantCredit int64                 // balance after, from 100 with one task of 18
		refunds    int
		reported   int64 // the credits the changes report refunded
	}{
		{"completed: never", func(s *stores) int64 {
			start(s, "r", "t", "t")
			s.tasks.Complete(ctx, "r", "t", "t", nil)
			c, _ := fail(s, "x")
			return c.Refunded
		}, 82, 0, 0},
		{"failed: once, even failed again", func(s *stores) int64 {
			start(s, "r", "t", "t")
			c1, _ := fail(s, "upstream_unavailable")
			c2, _ := fail(s, "timeout")
			c3, _ := start(s, "r", "t", "t") // a redelivered job
			s.tasks.Complete(ctx, "r", "t", "t", nil)
			return c1.Refunded + c2.Refunded + c3.Refunded
		}, 100, 1, 18},
		{"failed while pending", func(s *stores) int64 {
			c, _ := fail(s, "timeout")
			return c.Refunded
		}, 100, 1, 18},
		{"expired, then expired again", func(s *stores) int64 {
			c1, _ := s.tasks.Expire(ctx, "r", "t")
			c2, _ := s.tasks.Expire(ctx, "r", "t")
			return c1.Refunded + c2.Refunded
		}, 100, 1, 18},
		{"canceled, then failed", func(s *stores) int64 {
			c1, _ := s.tasks.Cancel(ctx, "r", "t")
			c2, _ := fail(s, "timeout")
			return c1.Refunded + c2.Refunded
		}, 100, 1, 18},
		{"aborted after an enqueue failure", func(s *stores) int64 {
			s.tasks.Abort(ctx, "r", "t", "")
			s.tasks.Abort(ctx, "r", "t", "")
			c, _ := fail(s, "timeout")
			return c.Refunded // the record is gone: Missing, nothing
		}, 100, 1, 0},
		{"concurrent failures", func(s *stores) int64 {
			var wg sync.WaitGroup
			var mu sync.Mutex
			var sum int64
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, _ := s.tasks.Fail(ctx, "r", "t", "t", task.Failure{Code: "x", Message: "y"})
					mu.Lock()
					sum += c.Refunded
					mu.Unlock()
				}()
			}
			wg.Wait()
			return sum
		}, 100, 1, 18},
		{"concurrent expiries in one batch", func(s *stores) int64 {
			refs := make([]TaskRef, 20)
			for i := range refs {
				refs[i] = TaskRef{"r", "t"}
			}
			changes, _ := s.tasks.ExpireAll(ctx, refs)
			var sum int64
			for _, c := range changes {
				sum += c.Refunded
			}
			return sum
		}, 100, 1, 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, srv := newStore(t)
			rdb := srv.Client(t)
			seedAccount(t, rdb, "r", 100, "")
			if _, err := s.tasks.Create(ctx, pending("r", "t"), task.Charge{Price: 18, Tier: "pro", MaxInflight: 10, CountUntil: time.Now().Add(time.Hour)}, nil); err != nil {
				t.Fatal(err)
			}
			reported := tt.run(s)
			if bal, _ := rdb.HGet(ctx, accountKey("r"), "credits").Int64(); bal != tt.wantCredit {
				t.Errorf("balance %d; want %d", bal, tt.wantCredit)
			}
			refunds := 0
			for _, e := range ledgerOf(t, rdb, "r") {
				if e.Values["kind"] == "refund" {
					refunds++
					if e.Values["task"] != "t" || e.Values["amount"] != "18" {
						t.Errorf("refund entry %v", e.Values)
					}
				}
			}
			if refunds != tt.refunds {
				t.Errorf("%d refunds; want %d", refunds, tt.refunds)
			}
			if reported != tt.reported {
				t.Errorf("the changes reported %d credits refunded; want %d", reported, tt.reported)
			}
			if got, err := s.tasks.Get(ctx, "r", "t"); err == nil && got.Refunded != (tt.refunds == 1) {
				t.Errorf("refunded flag %v", got.Refunded)
			}
			checkBooks(t, s, "r")
		})
	}
}

// The recovery finds the tasks past their deadline on their shard's due
// work and expires them (failed, timeout, refunded), whichever state they
// are in; a task whose record is gone leaves the due work and stops
// counting; tasks within their deadline are not touched.
func TestSweepOverdue(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Millisecond)
	s, srv := newStoreWith(t, Options{Now: func() time.Time { return now }})
	rdb := srv.Client(t)
	seedAccount(t, rdb, "late", 100, "")
	seedAccount(t, rdb, "ontime", 100, "")
	past := task.Charge{Price: 18, Tier: "pro", MaxInflight: 10, CountUntil: now.Add(time.Minute)}
	future := task.Charge{Price: 18, Tier: "pro", MaxInflight: 10, CountUntil: now.Add(time.Hour)}
	for _, c := range []struct {
		acct, id string
		c        task.Charge
	}{{"late", "stuck-processing", past}, {"late", "stuck-pending", past}, {"late", "gone", past}, {"ontime", "running", future}} {
		if _, err := s.tasks.Create(ctx, pending(c.acct, c.id), c.c, nil); err != nil {
			t.Fatal(err)
		}
	}
	mustOutcome(t, task.Applied)(start(s, "late", "stuck-processing", "stuck-processing"))
	rdb.Del(ctx, taskKey("late", "gone")) // the record expired
	now = now.Add(2 * time.Minute)

	var overdue []TaskRef
	for _, acct := range []string{"late", "ontime"} {
		w, err := s.tasks.Due(ctx, ShardOf(acct), now, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range w.Entries {
			if e.Kind == DueExpire {
				overdue = append(overdue, TaskRef{e.AccountID, e.TaskID})
			}
		}
	}
	if !sameRefs(overdue, []TaskRef{{"late", "stuck-processing"}, {"late", "stuck-pending"}}) {
		t.Fatalf("overdue %v; want the two late tasks whose records are there", overdue)
	}
	for _, o := range append(overdue, TaskRef{"late", "gone"}) {
		c, err := s.tasks.Expire(ctx, o.AccountID, o.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		// Expire says what it did: the two records there failed and
		// refunded, the one gone missing, nothing refunded.
		want := Change{Outcome: task.Applied, Refunded: 18, Model: "lumen-2.5-flash-image"}
		if o.TaskID == "gone" {
			want = Change{Outcome: task.Missing}
		}
		if c.Outcome != want.Outcome || c.Refunded != want.Refunded || c.Model != want.Model || c.Hooked || !c.At.Equal(now) {
			t.Errorf("Expire(%s) = %+v; want %+v, no hook", o.TaskID, c, want)
		}
	}
	for _, id := range []string{"stuck-processing", "stuck-pending"} {
		got, err := s.tasks.Get(ctx, "late", id)
		if err != nil || got.Status != task.Failed || got.Failure.Code != "timeout" || !got.Refunded {
			t.Errorf("%s: %+v %v", id, got, err)
		}
	}
	if bal, _ := rdb.HGet(ctx, accountKey("late"), "credits").Int64(); bal != 100-18 {
		t.Errorf("balance %d; want 82 (two refunds of three debits; the expired record cannot be refunded)", bal)
	}
	if n, _ := s.tasks.Inflight(ctx, "late"); n != 0 {
		t.Errorf("%d tasks still in flight", n)
	}
	if n, _ := s.tasks.Running(ctx, "late"); n != 0 {
		t.Errorf("%d tasks still hold a place", n)
	}
	checkBooks(t, s, "late")
	if again, _ := s.tasks.Due(ctx, ShardOf("late"), now.Add(time.Minute), 100); len(again.Entries) != 0 {
		t.Errorf("due after the sweep: %+v", again)
	}
	if got, _ := s.tasks.Get(ctx, "ontime", "running"); got.Status != task.Pending {
		t.Errorf("a task within its deadline was touched: %s", got.Status)
	}
}

func sameRefs(got, want []TaskRef) bool {
	a, b := make([]string, len(got)), make([]string, len(want))
	for i, r := range got {
		a[i] = r.AccountID + "/" + r.TaskID
	}
	for i, r := range want {
		b[i] = r.AccountID + "/" + r.TaskID
	}
	return sameSet(a, b)
}

// sameError reports whether err is want: both nil, the same sentinel, or a
// typed error of the same type and value.
func sameError(err, want error) bool {
	if err == nil || want == nil {
		return err == want
	}
	if errors.Is(err, want) {
		return true
	}
	return fmt.Sprintf("%T %+v", err, err) == fmt.Sprintf("%T %+v", want, want)
}
