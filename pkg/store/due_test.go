package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/task"
)

// The shard's due work, read with the store's clock moved: each
// unfinished task has one entry, due FirstQueueCheck after its admission
// (DueCheck, its queue, run and deadline; then every QueueRecheck, never
// past its deadline), QueueRecheck after its start and every QueueRecheck
// on while processing (DueCheck of its run's job, which a failover can
// lose), at its deadline while parked (DueExpire then, again dueRetry
// later if the expire did not happen); an
// ended task's entry is gone, and so is a stale one Due finds; a final
// webhook event is due HookGrace after the end (DueHook, again dueRetry
// later until Queued). Next is when the first entry left is due.
func TestDue(t *testing.T) {
	t.Parallel()
	const dl = 2 * time.Minute // every task's deadline, from the start
	type step struct {
		at   time.Duration // the clock, from the start
		do   func(t *testing.T, s *stores)
		want []string      // the entries returned, in order: "kind id [queue|run|event]"
		next time.Duration // when the first entry left is due, from the start; -1: none
	}
	check := func(id string) string { return "c " + id }
	expire := func(id string) string { return "x " + id }
	tests := []struct {
		name  string
		share int
		setup func(t *testing.T, e *dueEnv)
		steps []step
	}{
		{"an admitted task, pending until its deadline", 0, func(t *testing.T, e *dueEnv) {
			e.create(t, "a1", "")
		}, []step{
			{at: FirstQueueCheck - time.Millisecond, next: FirstQueueCheck},
			{at: FirstQueueCheck, want: []string{check("a1")}, next: FirstQueueCheck + QueueRecheck},
			{at: FirstQueueCheck + QueueRecheck - time.Millisecond, next: FirstQueueCheck + QueueRecheck},
			{at: FirstQueueCheck + QueueRecheck, want: []string{check("a1")}, next: FirstQueueCheck + 2*QueueRecheck},
			// Read late: due again a recheck later, never past the deadline.
			{at: dl - 5*time.Second, want: []string{check("a1")}, next: dl},
			{at: dl, want: []string{expire("a1")}, next: dl + dueRetry},
			// The expire did not happen: due again.
			{at: dl + dueRetry, want: []string{expire("a1")}, next: dl + 2*dueRetry},
			{at: dl + 2*dueRetry - time.Millisecond, do: func(t *testing.T, s *stores) {
				mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "a", "a1"))
			}, next: -1},
		}},
		{"a check carries the task's queue and its run", 0, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "standard")
			e.create(t, "a2", "")
			c, _, err := s.tasks.Takeover(ctx, "a", "a2", "a2", func(int) string { return "a2.r1" })
			mustOutcome(t, task.Applied)(c, err)
		}, []step{
			{at: FirstQueueCheck, want: []string{check("a1") + " [standard||]", check("a2") + " [|a2.r1|]"}, next: FirstQueueCheck + QueueRecheck},
		}},
		{"a started task is checked for its run's job until its deadline", 0, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "standard")
			mustOutcome(t, task.Applied)(start(s, "a", "a1", "a1"))
		}, []step{
			{at: FirstQueueCheck, next: QueueRecheck},
			{at: QueueRecheck - time.Millisecond, next: QueueRecheck},
			{at: QueueRecheck, want: []string{check("a1") + " [standard|a1|]"}, next: 2 * QueueRecheck},
			{at: dl - time.Second, want: []string{check("a1") + " [standard|a1|]"}, next: dl},
			{at: dl, want: []string{expire("a1")}, next: dl + dueRetry},
		}},
		{"a processing task found early is checked", 0, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "")
			mustOutcome(t, task.Applied)(start(s, "a", "a1", "a1"))
			e.dueAt(t, "a1", 5*time.Second)
		}, []step{
			{at: 5 * time.Second, want: []string{check("a1") + " [|a1|]"}, next: 5*time.Second + QueueRecheck},
			{at: dl, want: []string{expire("a1")}, next: dl + dueRetry},
		}},
		{"a parked task is due at its deadline", 1, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "")
			e.create(t, "k1", "")
			mustOutcome(t, task.Applied)(start(s, "a", "a1", "a1"))
		}, []step{
			{at: FirstQueueCheck, next: QueueRecheck}, // a1's check; k1 at its deadline
			{at: dl, want: []string{expire("a1"), expire("k1")}, next: dl + dueRetry},
		}},
		{"a parked task found early is moved to its deadline", 1, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "")
			e.create(t, "k1", "")
			mustOutcome(t, task.Applied)(start(s, "a", "a1", "a1"))
			e.dueAt(t, "k1", 5*time.Second)
		}, []step{
			{at: 5 * time.Second, next: QueueRecheck}, // a1's check; k1 at its deadline
		}},
		{"an admission makes the task due for its check", 1, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "")
			e.create(t, "k1", "standard")
			mustOutcome(t, task.Applied)(start(s, "a", "a1", "a1"))
		}, []step{
			{at: 30 * time.Second, do: func(t *testing.T, s *stores) {
				mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "a1", "a1", nil))
			}, next: 30*time.Second + FirstQueueCheck},
			{at: 30*time.Second + FirstQueueCheck, want: []string{check("k1") + " [standard||]"}, next: 30*time.Second + FirstQueueCheck + QueueRecheck},
			{at: 50 * time.Second, do: func(t *testing.T, s *stores) {
				mustOutcome(t, task.Applied)(start(s, "a", "k1", "k1"))
			}, next: 50*time.Second + QueueRecheck},
		}},
		{"an ended task leaves; a stale entry of one too", 0, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "")
			e.create(t, "a2", "")
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "a1", "", task.Failure{Code: "x", Message: "y"}))
			e.dueAt(t, "a2", 5*time.Second)
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "a2", "a2", nil))
			e.dueAt(t, "a2", 5*time.Second) // as a late write would
			// The deadline's expire of a task ended meanwhile only takes
			// its entry off.
			e.dueAt(t, "a1", time.Second)
			c := mustOutcome(t, task.AlreadyFinal)(s.tasks.Expire(ctx, "a", "a1"))
			if c.Refunded != 0 || c.Hooked || c.Model != testModel {
				t.Errorf("Expire of an ended task = %+v", c)
			}
			if err := s.rdb.ZScore(ctx, dueOf("a"), taskDue("a", "a1")).Err(); err != redis.Nil {
				t.Errorf("the ended task's entry: %v; want it gone", err)
			}
		}, []step{
			{at: 5 * time.Second, next: -1},
		}},
		{"a task gone unfinished leaves, and stops counting", 0, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "")
			e.create(t, "a2", "")
			must(t, s.rdb.Del(ctx, taskKey("a", "a1")).Err()) // expired, evicted
		}, []step{
			{at: FirstQueueCheck, want: []string{check("a2")}, next: FirstQueueCheck + QueueRecheck},
		}},
		{"a parked task gone unfinished leaves, and stops counting", 1, func(t *testing.T, e *dueEnv) {
			s := e.s
			e.create(t, "a1", "")
			e.create(t, "k1", "")
			mustOutcome(t, task.Applied)(start(s, "a", "a1", "a1"))
			must(t, s.rdb.Del(ctx, taskKey("a", "k1")).Err())
		}, []step{
			{at: dl, want: []string{expire("a1")}, next: dl + dueRetry},
		}},
		{"a final webhook event", 0, func(t *testing.T, e *dueEnv) {
			s := e.s
			tk := pending("a", "a1")
			tk.Callback = task.Callback{URL: "https://hooks.example.com/", Events: task.DefaultEvents}
			c := std
			c.CountUntil = e.deadline
			_, err := s.tasks.Create(ctx, tk, c, nil)
			must(t, err)
			mustOutcome(t, task.Applied)(start(s, "a", "a1", "a1"))
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "a1", "a1", nil))
		}, []step{
			{at: HookGrace - time.Millisecond, next: HookGrace},
			{at: HookGrace, want: []string{"h a1 [||task.completed]"}, next: HookGrace + dueRetry},
			{at: HookGrace + dueRetry, want: []string{"h a1 [||task.completed]"}, next: HookGrace + 2*dueRetry},
			{at: HookGrace + dueRetry + time.Second, do: func(t *testing.T, s *stores) {
				must(t, s.hooks.Queued(ctx, "a", "a1", task.EventCompleted, 0))
			}, next: -1},
		}},
		{"oldest first, at most limit", 0, func(t *testing.T, e *dueEnv) {
			for i := 5; i >= 1; i-- { // ids against the order of time
				e.create(t, fmt.Sprint("a", i), "")
				*e.now = e.now.Add(time.Millisecond)
			}
		}, []step{
			{at: FirstQueueCheck + time.Second, want: []string{check("a5"), check("a4")}, next: FirstQueueCheck + 2*time.Millisecond},
			{at: FirstQueueCheck + time.Second, want: []string{check("a3"), check("a2")}, next: FirstQueueCheck + 4*time.Millisecond},
			{at: FirstQueueCheck + time.Second, want: []string{check("a1")}, next: FirstQueueCheck + time.Second + QueueRecheck},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Now().Truncate(time.Millisecond)
			now := t0
			s := windowStore(t, tt.share, &now)
			tt.setup(t, &dueEnv{s: s, now: &now, t0: t0, deadline: t0.Add(dl)})
			for i, st := range tt.steps {
				now = t0.Add(st.at)
				if st.do != nil {
					st.do(t, s)
				}
				limit := 100
				if tt.name == "oldest first, at most limit" {
					limit = 2
				}
				w, err := s.tasks.Due(ctx, ShardOf("a"), now, limit)
				must(t, err)
				var got []string
				for _, e := range w.Entries {
					if e.AccountID != "a" {
						t.Errorf("an entry of account %q", e.AccountID)
					}
					// A check carries the task's deadline, what it takes to
					// queue its job again; the other kinds none.
					if wantDl := map[bool]time.Time{true: t0.Add(dl)}[e.Kind == DueCheck]; !e.Deadline.Equal(wantDl) {
						t.Errorf("step %d: %c %s: deadline %v; want %v", i, e.Kind, e.TaskID, e.Deadline, wantDl)
					}
					r := string(e.Kind) + " " + e.TaskID
					if e.Queue != "" || e.Run != "" || e.Event != "" {
						r += " [" + e.Queue + "|" + e.Run + "|" + e.Event + "]"
					}
					got = append(got, r)
				}
				if !slices.Equal(got, st.want) {
					t.Errorf("step %d (at %v): Due = %q; want %q", i, st.at, got, st.want)
				}
				wantNext := time.Time{}
				if st.next >= 0 {
					wantNext = t0.Add(st.next)
				}
				if !w.Next.Equal(wantNext) {
					t.Errorf("step %d (at %v): Next %v; want %v", i, st.at, w.Next.Sub(t0), st.next)
				}
				// Whatever Due read, the books hold.
				checkBooks(t, s, "a")
			}
		})
	}
}

// dueEnv is a due test's store, its clock and the tasks' deadline.
type dueEnv struct {
	s        *stores
	now      *time.Time
	t0       time.Time
	deadline time.Time
}

// create creates task id of account "a" (due at the test's deadline) in
// queue (none: "").
func (e *dueEnv) create(t *testing.T, id, queue string) {
	t.Helper()
	c := std
	c.CountUntil = e.deadline
	c.Queue = queue
	_, err := e.s.tasks.Create(ctx, pendingAt("a", id, int(e.now.Sub(e.t0)/time.Millisecond)), c, []byte("job of "+id))
	must(t, err)
}

// dueAt moves the due entry of task id of account "a" to d from now, as
// an entry written out of turn would be.
func (e *dueEnv) dueAt(t *testing.T, id string, d time.Duration) {
	t.Helper()
	must(t, e.s.rdb.ZAdd(ctx, dueOf("a"), redis.Z{Score: float64(e.now.Add(d).UnixMilli()), Member: taskDue("a", id)}).Err())
}
