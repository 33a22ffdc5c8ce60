package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// An account's counters (infl: its unfinished tasks, adm: those holding a
// place), its parked tasks and its due entries are what its task records
// imply after every change, along every path a task can take; its window
// is never overrun, and never left unused while a task waits.
func TestCountersNeverDrift(t *testing.T) {
	t.Parallel()
	fail := task.Failure{Code: "x", Message: "y"}
	type op struct {
		name string
		do   func(t *testing.T, s *stores)
	}
	create := func(id string) op {
		return op{"create " + id, func(t *testing.T, s *stores) {
			_, err := s.tasks.Create(ctx, pending("a", id), std, []byte("job of "+id))
			must(t, err)
		}}
	}
	startOp := func(id, run string, want task.Outcome) op {
		return op{"start " + id, func(t *testing.T, s *stores) { mustOutcome(t, want)(start(s, "a", id, run)) }}
	}
	complete := func(id string) op {
		return op{"complete " + id, func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", id, id, nil))
		}}
	}
	failOp := func(id, run string) op {
		return op{"fail " + id, func(t *testing.T, s *stores) { mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", id, run, fail)) }}
	}
	cancel := func(id string, was task.Status) op {
		return op{"cancel " + id, func(t *testing.T, s *stores) {
			c, err := s.tasks.Cancel(ctx, "a", id)
			if err != nil || c.Was != was {
				t.Fatalf("Cancel = %+v, %v; want it was %s", c, err, was)
			}
		}}
	}
	abort := func(id string, ok bool) op {
		return op{"abort " + id, func(t *testing.T, s *stores) {
			if got, _, err := s.tasks.Abort(ctx, "a", id, ""); err != nil || got != ok {
				t.Fatalf("Abort = %v, %v; want %v", got, err, ok)
			}
		}}
	}
	expire := func(id string) op {
		return op{"expire " + id, func(t *testing.T, s *stores) { mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "a", id)) }}
	}
	expireAll := func(ids ...string) op {
		return op{fmt.Sprint("expire ", ids), func(t *testing.T, s *stores) {
			refs := make([]TaskRef, len(ids))
			for i, id := range ids {
				refs[i] = TaskRef{"a", id}
			}
			for i, err := range errsOf(s.tasks.ExpireAll(ctx, refs)) {
				if err != nil {
					t.Fatalf("expire %s: %v", ids[i], err)
				}
			}
		}}
	}
	takeover := func(id, orphan string, want task.Outcome) op {
		return op{"takeover " + id, func(t *testing.T, s *stores) {
			c, _, err := s.tasks.Takeover(ctx, "a", id, orphan, func(n int) string { return id + ".r" + strconv.Itoa(n) })
			mustOutcome(t, want)(c, err)
		}}
	}
	release := func(id, run string) op {
		return op{"release " + id, func(t *testing.T, s *stores) { must(t, s.tasks.Release(ctx, "a", id, run)) }}
	}
	// Every path starts from four tasks: p1 and p2 hold the two places,
	// k1 and k2 wait parked.
	setup := []op{create("p1"), create("p2"), create("k1"), create("k2")}
	paths := []struct {
		name string
		ops  []op
	}{
		{"create only", nil},
		{"start", []op{startOp("p1", "p1", task.Applied), startOp("p1", "p1", task.Applied)}},
		{"start, complete", []op{startOp("p1", "p1", task.Applied), complete("p1"), startOp("k1", "k1", task.Applied), complete("k1")}},
		{"start, fail", []op{startOp("p1", "p1", task.Applied), failOp("p1", "p1"), failOp("k1", "")}},
		{"complete while pending", []op{complete("p2"), complete("k1"), complete("k2")}},
		{"cancel pending", []op{cancel("p1", task.Pending), cancel("k1", task.Pending)}},
		{"cancel processing", []op{startOp("p1", "p1", task.Applied), cancel("p1", task.Processing)}},
		{"cancel parked", []op{cancel("k1", task.Pending), cancel("k2", task.Pending), cancel("p1", task.Pending)}},
		{"abort pending", []op{abort("p1", true), abort("p1", false), abort("k1", true)}},
		{"abort parked", []op{abort("k2", true), abort("k1", true)}},
		{"abort processing", []op{startOp("p1", "p1", task.Applied), abort("p1", false)}},
		{"expire pending", []op{expire("p2")}},
		{"expire processing", []op{startOp("p1", "p1", task.Applied), expire("p1")}},
		{"expire parked", []op{expire("k2"), expire("k1")}},
		{"expire all in a batch", []op{startOp("p1", "p1", task.Applied), expireAll("p1", "p2", "k1", "k2", "p1")}},
		{"busy start of a parked task", []op{startOp("k1", "k1", task.Busy), startOp("k2", "k2", task.Busy)}},
		{"poisoned start", []op{startOp("p1", "p1", task.Applied), startOp("p1", "p1", task.Applied), startOp("p1", "p1", task.Poisoned)}},
		{"poisoned takeover", []op{startOp("p1", "p1", task.Applied), takeover("p1", "p1", task.Applied),
			startOp("p1", "p1.r1", task.Applied), takeover("p1", "p1.r1", task.Poisoned)}},
		// A run that never started took no worker down with it.
		{"takeovers while pending count no crash", []op{takeover("p2", "p2", task.Applied), takeover("p2", "p2.r1", task.Applied), takeover("p2", "p2.r2", task.Applied)}},
		{"takeover, then the new run", []op{startOp("p1", "p1", task.Applied), takeover("p1", "p1", task.Applied),
			startOp("p1", "p1.r1", task.Applied), complete("p1.r1x")}},
		{"release and start again", []op{startOp("p1", "p1", task.Applied), release("p1", "p1"), startOp("p1", "p1", task.Applied), release("p1", "other")}},
		{"every task ended", []op{startOp("p1", "p1", task.Applied), complete("p1"), cancel("p2", task.Pending),
			startOp("k1", "k1", task.Applied), failOp("k1", "k1"), expire("k2")}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			now := time.Now()
			s := windowStore(t, 2, &now)
			for _, o := range append(append([]op{}, setup...), p.ops...) {
				if o.name == "complete p1.r1x" {
					mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "p1", "p1.r1", nil))
				} else {
					o.do(t, s)
				}
				checkWindow(t, s, "a")
				if t.Failed() {
					t.Fatalf("after %s", o.name)
				}
			}
		})
	}
}

func errsOf(_ []Change, errs []error) []error { return errs }

// A random walk over every change, on two accounts (weights 1 and 2) of
// one shard's store: after each step the books of both are what their
// records say, the balance is what the ledger says, and no task is
// refunded twice or once completed. A -short run takes a third of the
// steps.
func TestCountersRandomWalk(t *testing.T) {
	t.Parallel()
	for _, share := range []int{0, 1, 2, 3} {
		t.Run(fmt.Sprint("share ", share), func(t *testing.T) {
			t.Parallel()
			now := time.Now().Truncate(time.Millisecond)
			s := windowStore(t, share, &now)
			must(t, s.rdb.HSet(ctx, accountKey("acct_b"), fAcctWeight, 2).Err())
			rng := rand.New(rand.NewPCG(uint64(share), 21))
			accts := []string{"a", "acct_b"}
			var ids []string
			next := 0
			pick := func() (string, string) {
				if len(ids) == 0 {
					return "a", "none"
				}
				ref := ids[rng.IntN(len(ids))]
				acct, id, _ := strings.Cut(ref, "|")
				return acct, id
			}
			runOf := func(acct, id string) string {
				if rng.IntN(4) == 0 {
					return id + ".r" + strconv.Itoa(rng.IntN(3))
				}
				r := s.rdb.HGet(ctx, taskKey(acct, id), fTaskRun).Val()
				if r == "" {
					r = id
				}
				return r
			}
			steps := 300
			if testing.Short() {
				steps = 100
			}
			for step := 0; step < steps; step++ {
				var what string
				switch k := rng.IntN(14); {
				case k < 4 || len(ids) == 0:
					acct := accts[rng.IntN(2)]
					id := fmt.Sprint("t", next)
					next++
					c := std
					c.CountUntil = now.Add(time.Duration(1+rng.IntN(120)) * time.Second)
					_, err := s.tasks.Create(ctx, pendingAt(acct, id, next), c, []byte("job"))
					if err != nil && apperr.CodeOf(err) != apperr.LimitExceeded {
						t.Fatal(err)
					}
					if err == nil {
						ids = append(ids, acct+"|"+id)
					}
					what = "create " + id
				case k < 6:
					acct, id := pick()
					_, err := s.tasks.Start(ctx, acct, id, runOf(acct, id))
					must(t, err)
					what = "start " + id
				case k == 6:
					acct, id := pick()
					_, err := s.tasks.Complete(ctx, acct, id, runOf(acct, id), nil)
					must(t, err)
					what = "complete " + id
				case k == 7:
					acct, id := pick()
					run := runOf(acct, id)
					if rng.IntN(2) == 0 {
						run = ""
					}
					_, err := s.tasks.Fail(ctx, acct, id, run, task.Failure{Code: "x", Message: "y"})
					must(t, err)
					what = "fail " + id
				case k == 8:
					acct, id := pick()
					_, err := s.tasks.Cancel(ctx, acct, id)
					if err != nil && apperr.CodeOf(err) != apperr.Conflict && apperr.CodeOf(err) != apperr.NotFound {
						t.Fatal(err)
					}
					what = "cancel " + id
				case k == 9:
					acct, id := pick()
					_, _, err := s.tasks.Abort(ctx, acct, id, "")
					must(t, err)
					what = "abort " + id
				case k == 10:
					acct, id := pick()
					_, _, err := s.tasks.Takeover(ctx, acct, id, runOf(acct, id), func(n int) string { return id + ".r" + strconv.Itoa(n) })
					must(t, err)
					what = "takeover " + id
				case k == 11:
					acct, id := pick()
					must(t, s.tasks.Release(ctx, acct, id, runOf(acct, id)))
					what = "release " + id
				default:
					// Time passes; the recovery expires what is past its
					// deadline, shard by shard.
					now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
					for _, acct := range accts {
						expireDue(t, s, acct, now)
					}
					what = "recovery"
				}
				for _, acct := range accts {
					checkWindow(t, s, acct)
					checkLedger(t, s, acct)
				}
				if t.Failed() {
					t.Fatalf("step %d: %s", step, what)
				}
			}
		})
	}
}

// checkLedger checks that an account's balance is its seeded credits plus
// its ledger's movements, that no task is refunded twice, and that no
// completed task is refunded.
func checkLedger(t *testing.T, s *stores, acct string) {
	t.Helper()
	a, err := s.accounts.Get(ctx, acct)
	must(t, err)
	var sum int64
	refunds := map[string]int{}
	for _, e := range ledgerOf(t, s.rdb, acct) {
		n, _ := strconv.ParseInt(e.Values[fLedgerAmount].(string), 10, 64)
		sum += n
		if e.Values[fLedgerKind] == "refund" {
			refunds[e.Values[fLedgerTask].(string)]++
		}
	}
	if a.Credits != 1_000_000+sum {
		t.Errorf("%s: balance %d; the ledger says %d", acct, a.Credits, 1_000_000+sum)
	}
	for id, n := range refunds {
		if n > 1 {
			t.Errorf("%s/%s refunded %d times", acct, id, n)
		}
		if tk, err := s.tasks.Get(ctx, acct, id); err == nil && (tk.Status == task.Completed || !tk.Refunded) {
			t.Errorf("%s/%s refunded, and %s (refunded flag %v)", acct, id, tk.Status, tk.Refunded)
		}
	}
}

// Many gateways and workers at once on one account: the books stay
// exact.
func TestCountersUnderConcurrency(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := windowStore(t, 3, &now)
	const tasks = 120
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			ts := NewTasks(NewDB(s.rdb, Options{Share: 3, Now: func() time.Time { return now }}))
			for i := g; i < tasks; i += 8 {
				id := fmt.Sprint("t", i)
				if _, err := ts.Create(ctx, pendingAt("a", id, i), std, []byte("job")); err != nil {
					t.Error(err)
					return
				}
				// Another task of the account, at random.
				other := fmt.Sprint("t", rng.IntN(i+1))
				var err error
				switch rng.IntN(6) {
				case 0:
					_, err = ts.Start(ctx, "a", other, other)
				case 1:
					_, err = ts.Complete(ctx, "a", other, other, nil)
				case 2:
					_, err = ts.Fail(ctx, "a", other, "", task.Failure{Code: "x", Message: "y"})
				case 3:
					if _, err = ts.Cancel(ctx, "a", other); apperr.CodeOf(err) == apperr.Conflict {
						err = nil
					}
				case 4:
					// An undo is of its caller's own create: an undo of an id
					// never created leaves a tombstone that refuses it (the
					// create it overtook), so only this goroutine's tasks.
					own := fmt.Sprint("t", g+8*rng.IntN((i-g)/8+1))
					_, _, err = ts.Abort(ctx, "a", own, "")
				case 5:
					_, errs := ts.ExpireAll(ctx, []TaskRef{{"a", other}, {"a", id}})
					err = errors.Join(errs...)
				}
				var nf *apperr.NotFoundError
				if err != nil && !errors.As(err, &nf) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	checkWindow(t, s, "a")
	checkLedger(t, s, "a")
}

// A task whose record is gone though it never ended (it expired unread,
// or was evicted) leaves its account's books at the first change that
// finds it gone: the due work's read, the deadline's expire, or the
// promotion that finds it first in line; once.
func TestLostRecordsLeaveTheBooks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lose  string // the task whose record goes: a1 holds the place, k1 and k2 wait
		find  func(t *testing.T, s *stores, now time.Time) []task.Admitted
		admit []string
	}{
		{"an admitted task, found by Due", "a1", func(t *testing.T, s *stores, now time.Time) []task.Admitted {
			w, err := s.tasks.Due(ctx, ShardOf("a"), now.Add(FirstQueueCheck), 100)
			must(t, err)
			if len(w.Entries) != 0 {
				t.Errorf("Due = %+v; want nothing", w.Entries)
			}
			return nil
		}, nil},
		{"an admitted task, found by its expire", "a1", func(t *testing.T, s *stores, now time.Time) []task.Admitted {
			c := mustOutcome(t, task.Missing)(s.tasks.Expire(ctx, "a", "a1"))
			mustOutcome(t, task.Missing)(s.tasks.Expire(ctx, "a", "a1"))
			return c.Admitted
		}, nil},
		{"a parked task, found by Due", "k1", func(t *testing.T, s *stores, now time.Time) []task.Admitted {
			w, err := s.tasks.Due(ctx, ShardOf("a"), now.Add(time.Hour), 100)
			must(t, err)
			for _, e := range w.Entries {
				if e.TaskID == "k1" {
					t.Errorf("Due returned the lost task: %+v", e)
				}
			}
			return nil
		}, nil},
		{"a parked task, found by the promotion", "k1", func(t *testing.T, s *stores, now time.Time) []task.Admitted {
			return mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "a1", "a1", nil)).Admitted
		}, []string{"k2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now()
			s := windowStore(t, 1, &now)
			createAll(t, s, "a", std, "a1", "k1", "k2")
			must(t, s.rdb.Del(ctx, taskKey("a", tt.lose)).Err())
			admitted := tt.find(t, s, now)
			if !sameAdmitted(admitted, admittedOf(tt.admit...)) {
				t.Errorf("admitted %+v; want %v", admitted, tt.admit)
			}
			b := checkBooks(t, s, "a")
			if tt.lose == "a1" {
				// The place it held is free: the next change admits k1.
				if b.admitted != 0 {
					t.Errorf("%d places taken", b.admitted)
				}
				cr, err := s.tasks.Create(ctx, pendingAt("a", "k3", 9), std, []byte("job of k3"))
				must(t, err)
				if cr.Admitted || !sameAdmitted(cr.Others, admittedOf("k1")) {
					t.Errorf("the next create: %+v; want k1 admitted first", cr)
				}
			}
			checkWindow(t, s, "a")
		})
	}
}
