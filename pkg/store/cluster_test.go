package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// Everything the store does, on a 3-master Redis Cluster: accounts spread
// over the masters, and every operation that reads or writes across them
// (the account index, the key index, the sweeper's scans, per-account task
// scans, readiness probes) sees all of them.
func TestOnACluster(t *testing.T) {
	c := redistest.StartCluster(t)
	opt, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = cc.Close() })
	s := New(cc)
	ctx := context.Background()

	// Twelve accounts: with three masters, some on each (checked).
	type acct struct{ id, key string }
	var accts []acct
	masters := map[string]int{}
	for i := 0; i < 12; i++ {
		a, err := s.CreateAccount(ctx, NewAccount{Name: fmt.Sprint("c", i), Credits: 100})
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := s.CreateKey(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		accts = append(accts, acct{a.ID, k})
		node, err := cc.MasterForKey(ctx, accountKey(a.ID))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr]++
	}
	if len(masters) < 2 {
		t.Fatalf("twelve accounts on %d master(s): %v", len(masters), masters)
	}

	t.Run("accounts and keys", func(t *testing.T) {
		all, err := s.Accounts(ctx)
		if err != nil || len(all) != len(accts) {
			t.Fatalf("Accounts = %d, %v; want %d", len(all), err, len(accts))
		}
		for _, a := range accts {
			got, err := s.Authenticate(ctx, a.key)
			if err != nil || got.ID != a.id {
				t.Errorf("Authenticate(key of %s) = %v, %v", a.id, got, err)
			}
			ks, err := s.Keys(ctx, a.id)
			if err != nil || len(ks) != 1 {
				t.Errorf("Keys(%s) = %v, %v", a.id, ks, err)
			}
		}
		// Revoking by visible prefix crosses from the prefix index to the
		// key's account.
		k, err := s.RevokeKey(ctx, accts[0].key[:visiblePrefix])
		if err != nil || k == nil {
			t.Fatalf("RevokeKey by prefix: %v, %v", k, err)
		}
		if _, err := s.Authenticate(ctx, accts[0].key); !errors.Is(err, apperr.ErrKeyRevoked) {
			t.Errorf("a revoked key authenticates: %v", err)
		}
		if bal, err := s.AddCredits(ctx, accts[1].id, 50, "top-up"); err != nil || bal != 150 {
			t.Errorf("AddCredits = %d, %v", bal, err)
		}
		if l, err := s.Ledger(ctx, accts[1].id, 10); err != nil || len(l) != 2 {
			t.Errorf("Ledger = %v, %v; want the initial credits and the top-up", l, err)
		}
	})

	t.Run("tasks, recovery and the sweeper", func(t *testing.T) {
		past := Charge{Price: 4, Tier: "standard", MaxInflight: 10, CountUntil: time.Now().Add(-time.Second)}
		var wantChecks, wantOverdue []string
		for i, a := range accts[2:] {
			for _, id := range []string{"done", "failed", "waiting"} {
				if _, err := s.CreateTask(ctx, pending(a.id, id), std, []byte("job")); err != nil {
					t.Fatal(err)
				}
			}
			mustOutcome(t, Applied)(s.StartTask(ctx, a.id, "done", "done"))
			must(t, s.SetProgress(ctx, a.id, "done", "done", 50))
			o, _, err := s.CompleteTask(ctx, a.id, "done", "done", []task.Result{{Key: "k", ContentType: "image/png", Size: 1}})
			mustOutcome(t, Applied)(o, err)
			mustOutcome(t, Applied)(s.FailTask(ctx, a.id, "failed", "", task.Failure{Code: "x", Message: "y"}))
			wantChecks = append(wantChecks, a.id+"/waiting")
			if i%2 == 0 {
				if _, err := s.CreateTask(ctx, pending(a.id, "late"), past, []byte("job")); err != nil {
					t.Fatal(err)
				}
				must(t, s.DropQueueCheck(ctx, a.id, "late"))
				wantOverdue = append(wantOverdue, a.id+"/late")
			}
		}

		for _, a := range accts[2:] {
			seen := map[string]task.Status{}
			must(t, s.EachTask(ctx, a.id, func(tk *task.Task) error { seen[tk.ID] = tk.Status; return nil }))
			if seen["done"] != task.Completed || seen["failed"] != task.Failed || seen["waiting"] != task.Pending {
				t.Errorf("EachTask(%s) = %v", a.id, seen)
			}
		}

		checks, err := s.QueueChecks(ctx, time.Now().Add(FirstQueueCheck+time.Second), 1000)
		if err != nil {
			t.Fatal(err)
		}
		var gotChecks []string
		for _, c := range checks {
			if !c.Pending || string(c.Job) != "job" {
				t.Errorf("queue check %+v", c)
			}
			gotChecks = append(gotChecks, c.AccountID+"/"+c.TaskID)
		}
		if !sameSet(gotChecks, wantChecks) {
			t.Errorf("QueueChecks = %v; want %v", gotChecks, wantChecks)
		}

		od, err := s.Overdue(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var gotOverdue []string
		for _, o := range od {
			gotOverdue = append(gotOverdue, o.AccountID+"/"+o.TaskID)
			mustOutcome(t, Applied)(s.Expire(ctx, o))
		}
		if !sameSet(gotOverdue, wantOverdue) {
			t.Errorf("Overdue = %v; want %v", gotOverdue, wantOverdue)
		}
		for _, a := range accts[2:] {
			// done and waiting charged; failed, and late where there is one,
			// refunded.
			const want = 100 - 2*4
			if got, err := s.Account(ctx, a.id); err != nil || got.Credits != want {
				t.Errorf("%s: balance %v, %v; want %d", a.id, got, err, want)
			}
		}

		ok, err := s.TryLock(ctx, "sweep", time.Minute)
		if err != nil || !ok {
			t.Fatalf("TryLock = %v, %v", ok, err)
		}
		if ok, _ := s.TryLock(ctx, "sweep", time.Minute); ok {
			t.Error("a held lease was taken twice")
		}
	})

	t.Run("readiness", func(t *testing.T) {
		if err := s.Probe(ctx, "test"); err != nil {
			t.Fatalf("Probe on a healthy cluster: %v", err)
		}
		// Every master was written to.
		for _, addr := range c.Addrs {
			n := redis.NewClient(&redis.Options{Addr: addr})
			keys, err := n.Keys(ctx, prefix+"probe:*").Result()
			n.Close()
			if err != nil || len(keys) != 1 {
				t.Errorf("master %s holds probe keys %v (%v); want one", addr, keys, err)
			}
		}
		// One master gives up a slot: the cluster is down (it requires full
		// coverage), though every node still answers PING.
		n0 := redis.NewClient(&redis.Options{Addr: c.Addrs[0]})
		defer n0.Close()
		if err := n0.ClusterDelSlots(ctx, 0).Err(); err != nil {
			t.Fatal(err)
		}
		waitProbe(t, s, false, "after a master gave up slot 0")
		if err := n0.ClusterAddSlots(ctx, 0).Err(); err != nil {
			t.Fatal(err)
		}
		waitProbe(t, s, true, "with slot 0 back")
		// A master gone.
		c.Nodes[2].Stop()
		waitProbe(t, s, false, "with a master stopped")
	})
}

// waitProbe waits up to 10 s for Probe to succeed (ok) or fail.
func waitProbe(t *testing.T, s *Store, ok bool, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.Probe(pctx, "test")
		cancel()
		if (err == nil) == ok {
			if err != nil {
				t.Logf("Probe %s: %v", when, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Probe %s: %v; want ok=%v", when, err, ok)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
