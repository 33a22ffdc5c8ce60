package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// A create applies only until its ValidUntil by Redis's clock: one that
// reaches Redis later (held up while its caller gave up) changes nothing
// and says so.
func TestCreateValidUntil(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	for i, tt := range []struct {
		name       string
		validUntil time.Time
		late       bool
	}{
		{"no bound", time.Time{}, false},
		{"in time", time.Now().Add(time.Minute), false},
		{"past", time.Now().Add(-time.Second), true},
		{"long past", time.Now().Add(-time.Hour), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := "task_lumen_" + string(rune('1'+i))
			c := std
			c.ValidUntil = tt.validUntil
			c.Idempotency = task.Idempotency{Key: "k-" + tt.name, BodyHash: "b"}
			before := balanceOf(t, s, "acct_a")
			_, err := s.tasks.Create(ctx, pending("acct_a", id), c, nil)
			if tt.late != errors.Is(err, ErrLate) || (!tt.late && err != nil) {
				t.Fatalf("Create = %v; want late %v", err, tt.late)
			}
			_, gerr := s.tasks.Get(ctx, "acct_a", id)
			spent := before - balanceOf(t, s, "acct_a")
			idem := s.rdb.Exists(ctx, idempotencyKey("acct_a", c.Idempotency.Key)).Val()
			if tt.late {
				if apperr.CodeOf(gerr) != apperr.NotFound || spent != 0 || idem != 0 {
					t.Errorf("a late create left: Get %v, %d credits spent, idempotency key %d", gerr, spent, idem)
				}
				return
			}
			if gerr != nil || spent != c.Price || idem != 1 {
				t.Errorf("created: Get %v, %d credits spent, idempotency key %d", gerr, spent, idem)
			}
		})
	}
}

// An undo that finds no task leaves a tombstone: the create it overtook
// (still on its way to Redis) then never applies, so "not created" stays
// true. The tombstone is no task to anyone, and goes away by itself.
func TestAbortTombstone(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	ok, admitted, err := s.tasks.Abort(ctx, "acct_a", "task_lumen_late", "")
	if err != nil || ok || len(admitted) != 0 {
		t.Fatalf("Abort of no task = %v, %v, %v; want not aborted", ok, admitted, err)
	}
	if _, err := s.tasks.Get(ctx, "acct_a", "task_lumen_late"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("Get of a tombstone: %v; want not found", err)
	}
	if ttl := s.rdb.PTTL(ctx, taskKey("acct_a", "task_lumen_late")).Val(); ttl <= 0 || ttl > voidFor {
		t.Errorf("the tombstone's TTL %v; want at most %v", ttl, voidFor)
	}
	before := balanceOf(t, s, "acct_a")
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_late"), std, nil); err == nil {
		t.Fatal("the create an undo overtook applied")
	}
	if spent := before - balanceOf(t, s, "acct_a"); spent != 0 {
		t.Errorf("the create an undo overtook charged %d", spent)
	}
	if _, err := s.tasks.Get(ctx, "acct_a", "task_lumen_late"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("Get after the late create: %v; want not found", err)
	}
	list, _, err := s.tasks.List(ctx, "acct_a", task.Filter{Limit: 10})
	if err != nil || len(list) != 0 {
		t.Errorf("List = %d tasks, %v; want none", len(list), err)
	}
}

// A create and an undo that Redis runs only after they are past their
// time change nothing: with Redis hung (SIGSTOP) both time out on the
// client, and when Redis resumes it refuses them.
func TestLateChangesOnAHungRedis(t *testing.T) {
	t.Parallel()
	// A client that gives up at its context's deadline, as the services'
	// clients do (redisconn): the default one would wait out its 3 s read
	// timeout on the hung server, not the calls' 200 ms.
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	seedAccount(t, rdb, "acct_a", 1_000_000, "")
	s := storesOn(rdb, Options{})
	ctx := context.Background()
	create(t, s, "acct_a", "task_lumen_stays")
	before := balanceOf(t, s, "acct_a")
	// Redis knows both scripts (a NOSCRIPT answer would be all it gave the
	// held calls).
	if _, _, err := s.tasks.Abort(ctx, "acct_a", "task_lumen_other", ""); err != nil {
		t.Fatal(err)
	}
	// And the client holds idle connections for both calls: a new one
	// would not get past its handshake.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); s.rdb.BLPop(ctx, 100*time.Millisecond, "easel:test:none") }()
	}
	wg.Wait()

	if err := srv.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Proc.Resume()
		}
	}()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	c := std
	c.ValidUntil = time.Now().Add(200*time.Millisecond + ClockSkew)
	if _, err := s.tasks.Create(short, pending("acct_a", "task_lumen_held"), c, nil); err == nil {
		t.Fatal("a create on a hung Redis answered")
	}
	undo, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if _, _, err := s.tasks.Abort(undo, "acct_a", "task_lumen_stays", ""); err == nil {
		t.Fatal("an undo on a hung Redis answered")
	}
	time.Sleep(200*time.Millisecond + ClockSkew + 500*time.Millisecond)
	if err := srv.Proc.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// Redis runs what it had buffered; a PING after it on a new connection
	// proves nothing about order, so wait until the answers settle.
	deadline := time.Now().Add(5 * time.Second)
	for s.rdb.Ping(ctx).Err() != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)

	if _, err := s.tasks.Get(ctx, "acct_a", "task_lumen_held"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("the held create applied: Get %v", err)
	}
	if tk, err := s.tasks.Get(ctx, "acct_a", "task_lumen_stays"); err != nil || tk.Status != task.Pending {
		t.Errorf("the held undo applied: Get %+v, %v", tk, err)
	}
	if b := balanceOf(t, s, "acct_a"); b != before {
		t.Errorf("balance %d after the held changes; want %d", b, before)
	}
}

// A create under way holds its Idempotency-Key only until neither it nor
// its undo can apply any more: a gateway that died mid-create leaves the
// key to replay its task from then on, not for a fixed 30 s.
func TestIdempotencyHeldUntilSettled(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, _ := newStoreWith(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	c := std
	c.Idempotency = task.Idempotency{Key: "k", BodyHash: "b"}
	c.ValidUntil = now.Add(time.Second)
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_1"), c, nil); err != nil {
		t.Fatal(err)
	}
	// Its gateway dies here: IdempotencyDone never comes.
	settled := c.ValidUntil.Add(UndoWindow + ClockSkew)
	for _, tt := range []struct {
		name   string
		at     time.Time
		replay bool
	}{
		{"while the create may still be undone", settled.Add(-time.Millisecond), false},
		{"once it no longer can", settled, true},
		{"long before the old 30 s", settled.Add(time.Second), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now = tt.at
			retry := std
			retry.Idempotency = c.Idempotency
			_, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_2"), retry, nil)
			var r *task.Replayed
			switch {
			case tt.replay && (!errors.As(err, &r) || r.TaskID != "task_lumen_1"):
				t.Errorf("retry = %v; want a replay of task_lumen_1", err)
			case !tt.replay && apperr.CodeOf(err) != apperr.Conflict:
				t.Errorf("retry = %v; want a conflict", err)
			}
		})
	}
}

func balanceOf(t *testing.T, s *stores, acct string) int64 {
	t.Helper()
	n, err := s.rdb.HGet(context.Background(), accountKey(acct), "credits").Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A task whose queue number could not be taken (on a cluster the queue's
// key is on another slot: that call failed) still joins its queue, with no
// position: its record names the queue, so its queue checks and its
// admission can queue its job; without it the task would wait in no queue
// until its deadline.
func TestCreateWithoutAQueueNumberKeepsTheQueue(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	acct, id := "acct_a", "task_lumen_nonumber"
	now := time.Now()
	k := createKeys{Task: taskKey(acct, id), Account: accountKey(acct), Ledger: ledgerKey(acct),
		Parked: parkedKey(acct), Due: dueOf(acct), Index: tasksIndexKey(acct), Idem: noKey(acct), Queue: noKey(acct)}
	a := createArgs{Now: now.UnixMilli(), TTL: time.Hour.Milliseconds(), Price: 4, DefaultMax: 100,
		Deadline: now.Add(time.Hour).UnixMilli(), Tier: "standard", AccountID: acct, TaskID: id,
		CheckAt: now.UnixMilli(), IdemUntil: now.UnixMilli(), IdemTTL: 1000,
		QueueName: "standard", QueueSeq: noQueueSeq, Input: []byte("in"), Type: task.Type, Model: testModel, Created: now.UnixMilli()}
	if _, err := createLua.run(ctx, s.db, k, a); err != nil {
		t.Fatal(err)
	}
	tk, err := s.tasks.Get(ctx, acct, id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.QueueSeq != 0 {
		t.Errorf("a task with no number shows number %d in %q", tk.QueueSeq, tk.Queue)
	}
	if q := s.rdb.HGet(ctx, taskKey(acct, id), fTaskQueue).Val(); q != "standard" {
		t.Errorf("the record's queue %q; want standard", q)
	}
	w, err := s.tasks.Due(ctx, ShardOf(acct), now.Add(time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Entries) != 1 || w.Entries[0].Kind != DueCheck || w.Entries[0].Queue != "standard" {
		t.Errorf("due work %+v; want the task's queue check, on its queue", w.Entries)
	}
}
