package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// Everything the store does, on a 3-master Redis Cluster: accounts spread
// over the masters, and every operation that reads or writes across them
// (the account index, the key index, the sweeper's scans, per-account task
// scans and listings, queue numbers, readiness probes) sees all of them.
func TestOnACluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	opt, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = cc.Close() })
	s := storesOn(cc, Options{})
	ctx := context.Background()

	// Twelve accounts: with three masters, some on each (checked).
	type acct struct{ id, key string }
	var accts []acct
	masters := map[string]int{}
	for i := 0; i < 12; i++ {
		a, err := s.accounts.Create(ctx, account.Spec{Name: fmt.Sprint("c", i), Credits: 100})
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := s.accounts.CreateKey(ctx, a.ID)
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
		all, err := s.accounts.List(ctx)
		if err != nil || len(all) != len(accts) {
			t.Fatalf("Accounts = %d, %v; want %d", len(all), err, len(accts))
		}
		for _, a := range accts {
			got, err := s.accounts.Authenticate(ctx, a.key)
			if err != nil || got.ID != a.id {
				t.Errorf("Authenticate(key of %s) = %v, %v", a.id, got, err)
			}
			ks, err := s.accounts.Keys(ctx, a.id)
			if err != nil || len(ks) != 1 {
				t.Errorf("Keys(%s) = %v, %v", a.id, ks, err)
			}
		}
		// Revoking by visible prefix crosses from the prefix index to the
		// key's account.
		k, err := s.accounts.RevokeKey(ctx, accts[0].key[:account.VisiblePrefix])
		if err != nil || k == nil {
			t.Fatalf("RevokeKey by prefix: %v, %v", k, err)
		}
		if _, err := s.accounts.Authenticate(ctx, accts[0].key); !errors.Is(err, apperr.ErrKeyRevoked) {
			t.Errorf("a revoked key authenticates: %v", err)
		}
		if bal, err := s.accounts.AddCredits(ctx, accts[1].id, 50, "top-up"); err != nil || bal != 150 {
			t.Errorf("AddCredits = %d, %v", bal, err)
		}
		if l, err := s.accounts.Ledger(ctx, accts[1].id, 10); err != nil || len(l) != 2 {
			t.Errorf("Ledger = %v, %v; want the initial credits and the top-up", l, err)
		}
	})

	t.Run("tasks, recovery and the sweeper", func(t *testing.T) {
		now := time.Now()
		late := task.Charge{Price: 4, Tier: "standard", MaxInflight: 10, CountUntil: now.Add(time.Second)}
		var wantChecks, wantOverdue []string
		shards := map[int]bool{}
		for i, a := range accts[2:] {
			shards[ShardOf(a.id)] = true
			for _, id := range []string{"done", "failed", "waiting"} {
				if _, err := s.tasks.Create(ctx, pending(a.id, id), std, []byte("job")); err != nil {
					t.Fatal(err)
				}
			}
			mustOutcome(t, task.Applied)(start(s, a.id, "done", "done"))
			progress(t, s, a.id, "done", "done", 50)
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, a.id, "done", "done", []task.Result{{Key: "k.png", ContentType: "image/png", Size: 1}}))
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, a.id, "failed", "", task.Failure{Code: "x", Message: "y"}))
			wantChecks = append(wantChecks, a.id+"/waiting")
			if i%2 == 0 {
				if _, err := s.tasks.Create(ctx, pending(a.id, "late"), late, []byte("job")); err != nil {
					t.Fatal(err)
				}
				wantOverdue = append(wantOverdue, a.id+"/late")
			}
		}
		if len(shards) < 2 {
			t.Fatalf("ten accounts on %d shard(s)", len(shards))
		}

		for _, a := range accts[2:] {
			seen := map[string]task.Status{}
			must(t, eachTask(ctx, s, a.id, func(tk *task.Task) { seen[tk.ID] = tk.Status }))
			if seen["done"] != task.Completed || seen["failed"] != task.Failed || seen["waiting"] != task.Pending {
				t.Errorf("the task records of %s = %v", a.id, seen)
			}
			// The listing, from the account's index, sees the same.
			listed, _, err := s.tasks.List(ctx, a.id, task.Filter{Limit: 100})
			must(t, err)
			got := map[string]task.Status{}
			for _, tk := range listed {
				got[tk.ID] = tk.Status
			}
			if fmt.Sprint(got) != fmt.Sprint(seen) {
				t.Errorf("List(%s) = %v; the records are %v", a.id, got, seen)
			}
			checkBooks(t, s, a.id)
		}

		// The due work, shard by shard, each on its master.
		var gotChecks, gotOverdue []string
		var overdue []TaskRef
		for n := range shards {
			w, err := s.tasks.Due(ctx, n, now.Add(FirstQueueCheck+time.Minute), 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range w.Entries {
				switch e.Kind {
				case DueCheck:
					gotChecks = append(gotChecks, e.AccountID+"/"+e.TaskID)
					// What it takes to queue the job again: the task's
					// deadline with the check, its input in its record.
					if e.Deadline.UnixMilli() != std.CountUntil.UnixMilli() {
						t.Errorf("the check of %s: deadline %v; want %v", e.TaskID, e.Deadline, std.CountUntil)
					}
					if in, ok := inputOf(t, s, e.AccountID, e.TaskID); !ok || in != "job" {
						t.Errorf("the input of %s = %q (kept %v)", e.TaskID, in, ok)
					}
				case DueExpire:
					gotOverdue = append(gotOverdue, e.AccountID+"/"+e.TaskID)
					overdue = append(overdue, TaskRef{e.AccountID, e.TaskID})
				default:
					t.Errorf("due work %+v", e)
				}
			}
		}
		if !sameSet(gotChecks, wantChecks) {
			t.Errorf("queue checks = %v; want %v", gotChecks, wantChecks)
		}
		if !sameSet(gotOverdue, wantOverdue) {
			t.Errorf("overdue = %v; want %v", gotOverdue, wantOverdue)
		}
		// One batch for every master.
		changes, errs := s.tasks.ExpireAll(ctx, overdue)
		for i, c := range changes {
			if errs[i] != nil || c.Outcome != task.Applied || c.Refunded != late.Price {
				t.Errorf("Expire(%s) = %+v, %v; want applied, refunded %d", overdue[i].TaskID, c, errs[i], late.Price)
			}
		}
		for _, a := range accts[2:] {
			// done and waiting charged; failed, and late where there is one,
			// refunded.
			const want = 100 - 2*4
			if got, err := s.accounts.Get(ctx, a.id); err != nil || got.Credits != want {
				t.Errorf("%s: balance %v, %v; want %d", a.id, got, err, want)
			}
			checkBooks(t, s, a.id)
		}

		ok, err := s.leases.TryLock(ctx, "sweep", time.Minute)
		if err != nil || !ok {
			t.Fatalf("TryLock = %v, %v", ok, err)
		}
		if ok, _ := s.leases.TryLock(ctx, "sweep", time.Minute); ok {
			t.Error("a held lease was taken twice")
		}
		must(t, s.leases.Unlock(ctx, "sweep"))
		if ok, err := s.leases.TryLock(ctx, "sweep", time.Minute); err != nil || !ok {
			t.Errorf("TryLock after Unlock = %v, %v", ok, err)
		}
		// The shards' leases, on every master, in one call.
		all := make([]int, Shards)
		for i := range all {
			all[i] = i
		}
		held, err := s.leases.TakeShards(ctx, "w1", all, time.Minute)
		if err != nil || len(held) != Shards {
			t.Fatalf("TakeShards(w1, all) = %d held, %v", len(held), err)
		}
		if held, err := s.leases.TakeShards(ctx, "w2", all, time.Minute); err != nil || len(held) != 0 {
			t.Errorf("TakeShards(w2, all) = %v, %v; want none", held, err)
		}
		must(t, s.leases.ReleaseShards(ctx, "w1", all[:100]))
		if held, err := s.leases.TakeShards(ctx, "w2", all, time.Minute); err != nil || !slices.Equal(held, all[:100]) {
			t.Errorf("TakeShards(w2, all) after w1 gave back 100 = %d held, %v", len(held), err)
		}
	})

	// The account's window on a cluster: the promotion touches the parked
	// tasks' records and jobs, in the shard's slot though not named in the
	// script's keys; the due work of the shard finds them.
	t.Run("parking and due work", func(t *testing.T) {
		now := time.Now().Truncate(time.Millisecond)
		ps := storesOn(cc, Options{Share: 1, Now: func() time.Time { return now }})
		c := std
		c.CountUntil = now.Add(time.Hour)
		var ids []string
		mine := map[string]bool{}
		masters := map[string]bool{}
		for i := 0; i < 9; i++ {
			a, err := ps.accounts.Create(ctx, account.Spec{Name: fmt.Sprint("p", i), Credits: 100})
			must(t, err)
			ids = append(ids, a.ID)
			mine[a.ID] = true
			node, err := cc.MasterForKey(ctx, accountKey(a.ID))
			must(t, err)
			masters[node.Options().Addr] = true
		}
		if len(masters) < 2 {
			t.Fatalf("nine accounts on %d master(s)", len(masters))
		}
		for _, id := range ids {
			for i, tid := range []string{"p1", "p2", "p3"} {
				cr, err := ps.tasks.Create(ctx, pendingAt(id, tid, i), c, []byte("job of "+tid))
				must(t, err)
				if cr.Admitted != (i == 0) {
					t.Fatalf("%s/%s admitted %v", id, tid, cr.Admitted)
				}
			}
			mustOutcome(t, task.Busy)(start(ps, id, "p2", "p2"))
			checkWindow(t, ps, id)
		}
		// Every account's parked tasks are due at their deadline, not
		// before; the admitted one for its queue check.
		dues := map[int][]DueEntry{}
		for _, id := range ids {
			n := ShardOf(id)
			if _, ok := dues[n]; ok {
				continue
			}
			w, err := ps.tasks.Due(ctx, n, now.Add(FirstQueueCheck), 1000)
			must(t, err)
			dues[n] = w.Entries
		}
		for _, id := range ids {
			want := DueEntry{Kind: DueCheck, AccountID: id, TaskID: "p1", Deadline: c.CountUntil}
			if !slices.ContainsFunc(dues[ShardOf(id)], func(e DueEntry) bool { return sameEntry(e, want) }) {
				t.Errorf("%s: due %+v; want %+v", id, dues[ShardOf(id)], want)
			}
			for _, e := range dues[ShardOf(id)] {
				if e.AccountID == id && e.TaskID != "p1" {
					t.Errorf("a parked task is due before its deadline: %+v", e)
				}
			}
			// The end of the first admits the second, with its deadline
			// (its input stays in its record); the cancel of the second the
			// third.
			mustOutcome(t, task.Applied)(start(ps, id, "p1", "p1"))
			ch := mustOutcome(t, task.Applied)(ps.tasks.Complete(ctx, id, "p1", "p1", nil))
			if want := []task.Admitted{{AccountID: id, TaskID: "p2", Deadline: c.CountUntil}}; !sameAdmitted(ch.Admitted, want) {
				t.Errorf("%s: Complete admitted %+v; want %+v", id, ch.Admitted, want)
			}
			if in, ok := inputOf(t, ps, id, "p2"); !ok || in != "job of p2" {
				t.Errorf("%s: the input of p2 = %q (kept %v)", id, in, ok)
			}
			cn, err := ps.tasks.Cancel(ctx, id, "p2")
			must(t, err)
			if want := []task.Admitted{{AccountID: id, TaskID: "p3", Deadline: c.CountUntil}}; !sameAdmitted(cn.Admitted, want) {
				t.Errorf("%s: Cancel admitted %+v; want %+v", id, cn.Admitted, want)
			}
			if in, ok := inputOf(t, ps, id, "p3"); !ok || in != "job of p3" {
				t.Errorf("%s: the input of p3 = %q (kept %v)", id, in, ok)
			}
			if in, ok := inputOf(t, ps, id, "p2"); !ok || in != "job of p2" {
				t.Errorf("%s: the canceled p2's input = %q (kept %v); want it kept for its record", id, in, ok)
			}
			checkWindow(t, ps, id)
		}
		// At the deadline, the recovery expires what is left, in one batch
		// over every master.
		now = now.Add(time.Hour)
		var refs []TaskRef
		for n := range dues {
			w, err := ps.tasks.Due(ctx, n, now, 1000)
			must(t, err)
			for _, e := range w.Entries {
				if !mine[e.AccountID] {
					continue // the other subtests' tasks
				}
				if e.Kind != DueExpire {
					t.Errorf("due at the deadline: %+v", e)
				}
				refs = append(refs, TaskRef{e.AccountID, e.TaskID})
			}
		}
		if len(refs) != len(ids) {
			t.Errorf("%d tasks due to expire; want %d (each account's p3)", len(refs), len(ids))
		}
		_, errs := ps.tasks.ExpireAll(ctx, refs)
		for _, err := range errs {
			must(t, err)
		}
		for _, id := range ids {
			if got, _ := ps.tasks.Get(ctx, id, "p3"); got.Status != task.Failed || !got.Refunded {
				t.Errorf("%s/p3 past its deadline: %+v", id, got)
			}
			if b := checkWindow(t, ps, id); b.unfinished != 0 {
				t.Errorf("%s: %d tasks unfinished", id, b.unfinished)
			}
			// p1 completed (4), p2 canceled and p3 expired, refunded.
			if got, _ := ps.accounts.Get(ctx, id); got.Credits != 100-4 {
				t.Errorf("%s: balance %d; want 96", id, got.Credits)
			}
		}
	})

	// The queue's numbers live in their own slot: a create is one round
	// trip, and the tasks it admits take their numbers after it, in one
	// batch (numberLater: in the order they were admitted, within
	// queueCountEvery, or at a flush); a refused create takes none, a task
	// that left pending before its batch gives its number back, and every
	// way out of pending counts the task out once.
	t.Run("queue positions", func(t *testing.T) {
		const queue = "cluster-standard"
		c := std
		c.Queue = queue
		broke := accts[3].id
		_, err := s.accounts.AddCredits(ctx, broke, -s.mustCredits(t, broke), "empty it")
		must(t, err)
		for _, a := range accts[4:8] {
			tk := pending(a.id, "queued")
			_, err := s.tasks.Create(ctx, tk, c, nil)
			must(t, err)
			if got, err := s.tasks.Get(ctx, a.id, "queued"); err != nil || got.Queue != queue || got.QueueSeq != 0 {
				t.Fatalf("%s, just created: %+v, %v; want in %s with no number yet", a.id, got, err, queue)
			}
		}
		tk := pending(broke, "refused")
		if _, err := s.tasks.Create(ctx, tk, c, nil); apperr.CodeOf(err) != apperr.InsufficientCredits || tk.QueueSeq != 0 {
			t.Fatalf("refused create: %v, seq %d", err, tk.QueueSeq)
		}
		if got := dequeuedOf(t, s, queue); got != 0 { // flushes the batch
			t.Fatalf("dequeued %d after a refused create; want 0 (it took no number)", got)
		}
		var seqs []int64
		for i, a := range accts[4:8] {
			got, err := s.tasks.Get(ctx, a.id, "queued")
			must(t, err)
			if got.Queue != queue || got.QueueSeq != int64(i+1) {
				t.Fatalf("create %d: record %q/%d; want %s/%d, in the order of the creates", i, got.Queue, got.QueueSeq, queue, i+1)
			}
			seqs = append(seqs, got.QueueSeq)
		}
		mustOutcome(t, task.Applied)(start(s, accts[4].id, "queued", "queued"))
		_, err = s.tasks.Cancel(ctx, accts[5].id, "queued")
		must(t, err)
		mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, accts[6].id, "queued", "", task.Failure{Code: "x", Message: "y"}))
		if got := dequeuedOf(t, s, queue); got != 3 {
			t.Errorf("dequeued %d; want 3 (a start, a cancel, a fail)", got)
		}
		for _, a := range accts[5:7] {
			if v := s.rdb.HMGet(ctx, taskKey(a.id, "queued"), fTaskQueue, fTaskQueueSeq).Val(); v[0] != nil || v[1] != nil {
				t.Errorf("%s: a task ended keeps its queue fields %v", a.id, v)
			}
		}
		// The one left waiting is first.
		st, err := s.queues.Stats(ctx, queue)
		must(t, err)
		if p := st.PositionOf(seqs[3], time.Now()); p.Position != 1 {
			t.Errorf("the last waiting task's position %+v; want 1", p)
		}

		// A task started before its batch: its number is given back.
		a := accts[7]
		_, err = s.accounts.AddCredits(ctx, a.id, 10, "more")
		must(t, err)
		_, err = s.tasks.Create(ctx, pending(a.id, "quick"), c, nil)
		must(t, err)
		mustOutcome(t, task.Applied)(start(s, a.id, "quick", "quick"))
		if got := dequeuedOf(t, s, queue); got != 4 {
			t.Errorf("dequeued %d; want 4 (the quick task's number, given back)", got)
		}
		if p := st.PositionOf(seqs[3], time.Now()); p.Position != 1 {
			t.Errorf("the last waiting task's position %+v; want 1 still", p)
		}
	})

	// A task promoted on a cluster takes its number in its queue after the
	// change that admitted it, in the next batch (one join_queue a queue,
	// the numbers set in one more round trip); a parked create takes none.
	t.Run("promoted queue numbers", func(t *testing.T) {
		const queue = "cluster-promoted"
		ps := storesOn(cc, Options{Share: 1})
		a, err := ps.accounts.Create(ctx, account.Spec{Name: "promoted", Credits: 100})
		must(t, err)
		c := std
		c.Queue = queue
		for i, tid := range []string{"p1", "p2", "p3"} {
			cr, err := ps.tasks.Create(ctx, pendingAt(a.ID, tid, i), c, nil)
			must(t, err)
			if cr.Admitted != (i == 0) {
				t.Fatalf("%s admitted %v", tid, cr.Admitted)
			}
		}
		if got := dequeuedOf(t, ps, queue); got != 0 {
			t.Fatalf("dequeued %d after two parked creates; want 0 (they took no number)", got)
		}
		last := int64(0)
		for i, step := range []struct{ run, admits string }{{"p1", "p2"}, {"p2", "p3"}} {
			mustOutcome(t, task.Applied)(start(ps, a.ID, step.run, step.run))
			ch := mustOutcome(t, task.Applied)(ps.tasks.Complete(ctx, a.ID, step.run, step.run, nil))
			if len(ch.Admitted) != 1 || ch.Admitted[0].TaskID != step.admits || ch.Admitted[0].Queue != queue {
				t.Fatalf("complete %s admitted %+v; want %s in %s", step.run, ch.Admitted, step.admits, queue)
			}
			if d := dequeuedOf(t, ps, queue); d != int64(1+i) { // flushes the batch
				t.Errorf("dequeued %d after %d started; want %d", d, i+1, 1+i)
			}
			got, err := ps.tasks.Get(ctx, a.ID, step.admits)
			must(t, err)
			if got.Queue != queue || got.QueueSeq <= last {
				t.Fatalf("%s promoted in %q with number %d; want %s, past %d", step.admits, got.Queue, got.QueueSeq, queue, last)
			}
			last = got.QueueSeq
			st, err := ps.queues.Stats(ctx, queue)
			must(t, err)
			if p := st.PositionOf(got.QueueSeq, time.Now()); p.Position != 1 {
				t.Errorf("%s, alone waiting: position %+v; want 1", step.admits, p)
			}
		}
	})

	// A batch of durable changes over every master: each master's calls in
	// one pipeline followed by WAIT on it; these masters have no replica,
	// so each change is made and reported not replicated.
	t.Run("durable batches", func(t *testing.T) {
		ds := storesOn(cc, Options{MinReplicas: 1, ReplicaWait: 20 * time.Millisecond})
		var refs []TaskRef
		masters := map[string]bool{}
		for _, a := range accts[4:] { // accts[3] was emptied
			_, err := s.tasks.Create(ctx, pending(a.id, "durable"), std, nil)
			must(t, err)
			refs = append(refs, TaskRef{a.id, "durable"})
			node, err := cc.MasterForKey(ctx, accountKey(a.id))
			must(t, err)
			masters[node.Options().Addr] = true
		}
		if len(masters) < 2 {
			t.Fatalf("the batch spans %d master(s)", len(masters))
		}
		_, errs := ds.tasks.ExpireAll(ctx, refs)
		for i, err := range errs {
			if !errors.Is(err, ErrNotReplicated) {
				t.Errorf("expire %s: %v; want ErrNotReplicated", refs[i].AccountID, err)
			}
			if tk, err := s.tasks.Get(ctx, refs[i].AccountID, "durable"); err != nil || tk.Status != task.Failed {
				t.Errorf("%s: %+v, %v; want it failed on its master", refs[i].AccountID, tk, err)
			}
		}
		if _, err := ds.tasks.Expire(ctx, accts[4].id, "durable"); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("Expire: %v; want ErrNotReplicated", err)
		}
	})

	t.Run("the account's default webhook endpoint and recent deliveries", func(t *testing.T) {
		a := accts[1]
		url := "https://hooks.example.com/" + strings.Repeat("c", 90)
		must(t, s.hooks.SetEndpoint(ctx, a.id, task.Callback{URL: url, Events: task.DefaultEvents}))
		create(t, s, a.id, "hooked")
		mustOutcome(t, task.Applied)(start(s, a.id, "hooked", "hooked"))
		ch, err := s.tasks.Complete(ctx, a.id, "hooked", "hooked", nil)
		if err != nil || !ch.Hooked {
			t.Fatalf("complete = %+v, %v; want hooked by the account's endpoint", ch, err)
		}
		if tk, err := s.tasks.Get(ctx, a.id, "hooked"); err != nil || tk.Callback.URL != url {
			t.Errorf("the task's callback %+v, %v; want the account's endpoint", tk, err)
		}
		must(t, s.hooks.Queued(ctx, a.id, "hooked", task.EventCompleted, 0))
		if got, err := s.hooks.Recent(ctx, a.id, 10); err != nil || len(got) != 1 || got[0].TaskID != "hooked" {
			t.Errorf("recent deliveries %+v, %v; want the completion", got, err)
		}
		must(t, s.hooks.SetEndpoint(ctx, a.id, task.Callback{}))
	})

	t.Run("key limits, spend, usage and console users", func(t *testing.T) {
		a := accts[0]
		key, _, err := s.accounts.NewKey(ctx, a.id, account.KeySpec{Name: "capped", KeyLimits: account.KeyLimits{SpendLimit: 8, Models: []catalog.Tier{catalog.Standard}}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.accounts.Authenticate(ctx, key)
		if err != nil || got.Via == nil || got.Via.SpendLimit != 8 || !got.Via.AllowsModel(catalog.Standard) || got.Via.AllowsModel(catalog.Pro) {
			t.Fatalf("Authenticate: %+v %v", got, err)
		}
		c := task.Charge{Price: 4, Tier: "standard", MaxInflight: 10, CountUntil: time.Now().Add(time.Hour), KeyHash: account.HashKey(key), SpendLimit: 8}
		today := func(id string) *task.Task { tk := pending(a.id, id); tk.CreateTime = time.Now(); return tk }
		for _, id := range []string{"k1", "k2"} {
			if _, err := s.tasks.Create(ctx, today(id), c, nil); err != nil {
				t.Fatal(err)
			}
		}
		var spend *apperr.SpendLimitError
		if _, err := s.tasks.Create(ctx, today("k3"), c, nil); !errors.As(err, &spend) || spend.Spent != 8 {
			t.Fatalf("past the limit: %v", err)
		}
		if _, err := s.tasks.Cancel(ctx, a.id, "k1"); err != nil {
			t.Fatal(err)
		}
		keys, err := s.accounts.Keys(ctx, a.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k.Name == "capped" && k.Spent != 4 {
				t.Errorf("spent %d after a refund; want 4", k.Spent)
			}
		}
		days, err := s.accounts.Usage(ctx, a.id, 1)
		want := account.Usage{Tasks: 1, Credits: 4, Refunds: 1, RefundedCredits: 4}
		if err != nil || days[0].Models[testModel] != want || len(days[0].Keys) != 1 {
			t.Errorf("usage %+v %v; want one task of 4 credits (one refunded), all of one key", days, err)
		}
		for _, k := range keys {
			if k.Name == "capped" && days[0].Keys[k.Prefix][testModel] != want {
				t.Errorf("usage of key %s: %+v; want %+v", k.Prefix, days[0].Keys, want)
			}
		}
		users := NewUsers(s.db)
		u, err := users.CreateUser(ctx, a.id, "c0@example.com", "hash", false)
		if err != nil {
			t.Fatal(err)
		}
		if err := users.SaveSession(ctx, "h", Session{UserID: u.ID, AccountID: a.id, CSRF: "x", Gen: 1, CreatedAt: time.Now(), Until: time.Now().Add(time.Hour)}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if ss, err := users.TouchSession(ctx, "h", time.Hour); err != nil || ss.UserID != u.ID {
			t.Errorf("session %+v %v", ss, err)
		}
		if list, err := users.UsersOf(ctx, a.id); err != nil || len(list) != 1 {
			t.Errorf("users %v %v", list, err)
		}
	})

	t.Run("key layout", func(t *testing.T) {
		checkKeyLayout(t, s)
	})

	t.Run("readiness", func(t *testing.T) {
		if err := s.db.Probe(ctx, "test"); err != nil {
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
		waitProbe(t, s.db, false, "after a master gave up slot 0")
		if err := n0.ClusterAddSlots(ctx, 0).Err(); err != nil {
			t.Fatal(err)
		}
		waitProbe(t, s.db, true, "with slot 0 back")
		// A master gone.
		c.Nodes[2].Stop()
		waitProbe(t, s.db, false, "with a master stopped")
	})
}

// mustCredits returns an account's balance.
func (s *stores) mustCredits(t *testing.T, accountID string) int64 {
	t.Helper()
	a, err := s.accounts.Get(context.Background(), accountID)
	if err != nil {
		t.Fatal(err)
	}
	return a.Credits
}

// eachTask calls fn with every task record of an account, scanning its
// keys; on a cluster on the node that holds the account's slot, where all
// its tasks are (SCAN lists one node's keys).
func eachTask(ctx context.Context, s *stores, accountID string, fn func(*task.Task)) error {
	pfx := taskKey(accountID, "")
	var scanner redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, pfx)
		if err != nil {
			return err
		}
		scanner = node
	}
	var cursor uint64
	for {
		keys, next, err := scanner.Scan(ctx, cursor, pfx+"*", 1000).Result()
		if err != nil {
			return err
		}
		records, err := s.db.hgetAll(ctx, keys)
		if err != nil {
			return err
		}
		for i, m := range records {
			if len(m) == 0 {
				continue // expired since the scan saw it
			}
			tk, err := decodeTask(accountID, strings.TrimPrefix(keys[i], pfx), m)
			if err != nil {
				return err
			}
			fn(tk)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// waitProbe waits up to 10 s for Probe to succeed (ok) or fail.
func waitProbe(t *testing.T, db *DB, ok bool, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.Probe(pctx, "test")
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
