package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// startReplicated starts a primary and one replica that acknowledges its
// writes (a replica just synced may not for a few hundred milliseconds).
func startReplicated(tb testing.TB) (primary, replica *redistest.Server) {
	tb.Helper()
	primary = redistest.Start(tb, "--repl-diskless-sync-delay", "0")
	_, port, _ := net.SplitHostPort(primary.Addr)
	replica = redistest.Start(tb, "--replicaof", "127.0.0.1", port)
	pc := primary.Client(tb)
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pc.Set(ctx, "easel:test:synced", 1, 0)
		if n, _ := pc.Do(ctx, "WAIT", 1, 100).Int(); n == 1 {
			return primary, replica
		}
		if time.Now().After(deadline) {
			info, _ := pc.Info(ctx, "replication").Result()
			tb.Fatalf("the replica does not acknowledge writes: %s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With Options.MinReplicas, a change is reported done only once the replicas
// have it: read from the replica right after, it is there. Without a
// replica that confirms, it is ErrNotReplicated (503), and the caller's undo
// works.
func TestMinReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		replicated bool
		pause      bool // the replica is hung
	}{
		{"a replica confirms", true, false},
		{"no replica", false, false},
		{"the replica hangs", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var primary, replica *redistest.Server
			if tc.replicated {
				primary, replica = startReplicated(t)
			} else {
				primary = redistest.Start(t)
			}
			rdb := primary.Client(t)
			seedAccount(t, rdb, "a", 100, "")
			// A replica that answers is given time on a loaded machine; one
			// that hangs is given up on soon.
			wait := 5 * time.Second
			if tc.pause || !tc.replicated {
				wait = 100 * time.Millisecond
			}
			s := storesOn(rdb, Options{MinReplicas: 1, ReplicaWait: wait})
			if tc.pause {
				if err := replica.Proc.Pause(); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = replica.Proc.Resume() }()
			}
			created, err := s.tasks.Create(ctx, pending("a", "t1"), std, []byte("job"))
			if tc.replicated && !tc.pause {
				if err != nil || created.Balance != 96 {
					t.Fatalf("Create = %+v, %v", created, err)
				}
				rc := replica.Client(t)
				if st := rc.HGet(ctx, taskKey("a", "t1"), fTaskStatus).Val(); st != string(task.Pending) {
					t.Errorf("the replica has the task as %q right after the create", st)
				}
				if c, _ := rc.HGet(ctx, accountKey("a"), fAcctCredits).Int64(); c != 96 {
					t.Errorf("the replica has the balance at %d", c)
				}
				// The state changes that move money wait too.
				if c := mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "t1", "", task.Failure{Code: "x", Message: "y"})); c.Refunded != std.Price {
					t.Errorf("the fail refunded %d; want %d", c.Refunded, std.Price)
				}
				if c, _ := rc.HGet(ctx, accountKey("a"), fAcctCredits).Int64(); c != 100 {
					t.Errorf("the replica has the balance at %d after the refund", c)
				}
				// So do the recovery's expiries, made in one batch.
				for _, id := range []string{"t2", "t3"} {
					if _, err := s.tasks.Create(ctx, pending("a", id), std, nil); err != nil {
						t.Fatal(err)
					}
				}
				changes, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"a", "t2"}, {"a", "t3"}})
				for i, c := range changes {
					if errs[i] != nil || c.Outcome != task.Applied || c.Refunded != std.Price {
						t.Errorf("ExpireAll[%d] = %+v, %v", i, c, errs[i])
					}
				}
				if c, _ := rc.HGet(ctx, accountKey("a"), fAcctCredits).Int64(); c != 100 {
					t.Errorf("the replica has the balance at %d after the expiries", c)
				}
				if st := rc.HGet(ctx, taskKey("a", "t3"), fTaskStatus).Val(); st != string(task.Failed) {
					t.Errorf("the replica has the expired task as %q", st)
				}
				return
			}
			if !errors.Is(err, ErrNotReplicated) || apperr.CodeOf(err) != apperr.Unavailable {
				t.Fatalf("Create = %+v, %v; want ErrNotReplicated, unavailable", created, err)
			}
			// The recovery's batch of expiries is told too (and made on
			// the primary: the next round finds them ended).
			if _, err := s.tasks.Create(ctx, pending("a", "t2"), std, nil); !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("Create = %v; want ErrNotReplicated", err)
			}
			_, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"a", "t2"}})
			if !errors.Is(errs[0], ErrNotReplicated) {
				t.Errorf("ExpireAll = %v; want ErrNotReplicated", errs[0])
			}
			if st := rdb.HGet(ctx, taskKey("a", "t2"), fTaskStatus).Val(); st != string(task.Failed) {
				t.Errorf("the primary has the expired task as %q", st)
			}
			// Made on the primary: the caller undoes it.
			if ok, _, err := s.tasks.Abort(ctx, "a", "t1", ""); !ok && !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("Abort = %v, %v", ok, err)
			}
			if c, _ := rdb.HGet(ctx, accountKey("a"), fAcctCredits).Int64(); c != 100 {
				t.Errorf("balance %d after the undo; want 100", c)
			}
			if n := rdb.Exists(ctx, taskKey("a", "t1")).Val(); n != 0 {
				t.Error("the task record survived the undo")
			}
		})
	}
}

// BenchmarkCreateTaskDurability is what EASEL_REDIS_MIN_REPLICAS=1 costs a
// create: the script alone, then the script followed by WAIT for one replica
// on loopback; one at a time (latency), then 16 goroutines at once
// (throughput, each WAIT holding its connection).
func BenchmarkCreateTaskDurability(b *testing.B) {
	primary, _ := startReplicated(b)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr})
	defer rdb.Close()
	seedAccount(b, rdb, "a", 1<<60, "")
	var seq atomic.Int64 // task ids unique across every run of the sub-benchmarks
	c := task.Charge{Price: 1, Tier: "standard", CountUntil: time.Now().Add(time.Hour)}
	create := func(b *testing.B, s *Tasks) {
		if _, err := s.Create(context.Background(), pending("a", fmt.Sprint("b", seq.Add(1))), c, []byte("job")); err != nil {
			b.Error(err)
		}
	}
	for _, n := range []int{0, 1} {
		s := NewTasks(NewDB(rdb, Options{MinReplicas: n, ReplicaWait: time.Second}))
		b.Run("serial/min_replicas="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				create(b, s)
			}
		})
		b.Run("parallel16/min_replicas="+strconv.Itoa(n), func(b *testing.B) {
			b.SetParallelism(8) // 8 × GOMAXPROCS 2
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					create(b, s)
				}
			})
		})
	}
}

// Only changes that move credits or end a task wait for replicas: with
// MinReplicas and no replica, what does neither (an account's keys and
// limits, a run letting go, progress, the webhook log) is made at once,
// while a create is refused.
func TestMinReplicasOnlyForDurableChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	seedAccount(t, rdb, "acct_a", 1_000, "")
	s := storesOn(rdb, Options{MinReplicas: 1, ReplicaWait: 50 * time.Millisecond})
	if _, err := s.accounts.AddKey(ctx, "acct_a", "esk_a_key_claimed_without_replicas"); err != nil {
		t.Errorf("AddKey waited for a replica: %v", err)
	}
	if _, err := s.accounts.SetLimits(ctx, "acct_a", account.LimitsUpdate{RateLimit: new(int)}); err != nil {
		t.Errorf("SetLimits waited for a replica: %v", err)
	}
	if err := s.tasks.Release(ctx, "acct_a", "task_lumen_1", "task_lumen_1"); err != nil {
		t.Errorf("Release waited for a replica: %v", err)
	}
	if _, err := s.hooks.RecordAttempt(ctx, "acct_a", "task_lumen_1", task.EventCompleted, 0, webhook.Attempt{Time: time.Now()}, webhook.StateRetrying, webhook.Outgoing{}); err != nil {
		t.Errorf("RecordAttempt waited for a replica: %v", err)
	}
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_1"), std, nil); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Create without a replica: %v; want ErrNotReplicated", err)
	}
	if _, err := s.accounts.AddCredits(ctx, "acct_a", 5, ""); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("AddCredits without a replica: %v; want ErrNotReplicated", err)
	}
	// The task was made on the primary: what neither moves credits nor
	// ends it runs at once, the rest waits.
	if _, err := s.tasks.Progress(ctx, "acct_a", "task_lumen_1", "task_lumen_1", 10); err != nil {
		t.Errorf("Progress waited for a replica: %v", err)
	}
	if err := s.hooks.Queued(ctx, "acct_a", "task_lumen_1", task.EventProgress, 10); err != nil {
		t.Errorf("Queued waited for a replica: %v", err)
	}
	if _, err := s.tasks.Due(ctx, ShardOf("acct_a"), time.Now().Add(time.Hour), 10); err != nil {
		t.Errorf("Due waited for a replica: %v", err)
	}
	if _, err := s.leases.TakeShards(ctx, "w1", []int{1, 2}, time.Minute); err != nil {
		t.Errorf("TakeShards waited for a replica: %v", err)
	}
	if err := s.leases.ReleaseShards(ctx, "w1", []int{1, 2}); err != nil {
		t.Errorf("ReleaseShards waited for a replica: %v", err)
	}
	if _, err := s.leases.Workers(ctx, "w1", time.Minute); err != nil {
		t.Errorf("Workers waited for a replica: %v", err)
	}
	for name, change := range map[string]func() error{
		"Start":  func() error { _, err := s.tasks.Start(ctx, "acct_a", "task_lumen_1", "task_lumen_1"); return err },
		"Cancel": func() error { _, err := s.tasks.Cancel(ctx, "acct_a", "task_lumen_1"); return err },
		"Expire": func() error { _, err := s.tasks.Expire(ctx, "acct_a", "task_lumen_1"); return err },
		"ExpireAll": func() error {
			_, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"acct_a", "task_lumen_1"}})
			return errs[0]
		},
		"Abort": func() error { _, _, err := s.tasks.Abort(ctx, "acct_a", "task_lumen_1", ""); return err },
		"Complete": func() error {
			_, err := s.tasks.Complete(ctx, "acct_a", "task_lumen_1", "task_lumen_1", nil)
			return err
		},
		"Fail": func() error {
			_, err := s.tasks.Fail(ctx, "acct_a", "task_lumen_1", "", task.Failure{Code: "x", Message: "y"})
			return err
		},
		"Takeover": func() error {
			_, _, err := s.tasks.Takeover(ctx, "acct_a", "task_lumen_1", "task_lumen_1", runName)
			return err
		},
	} {
		if err := change(); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("%s without a replica: %v; want ErrNotReplicated", name, err)
		}
	}
}
