package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
)

// backlog charges n pending tasks of the env's account (its share off:
// all admitted) whose jobs are lost, and returns their ids.
func (e *sweepEnv) backlog(t *testing.T, n int) []string {
	t.Helper()
	if _, err := e.accounts.AddCredits(context.Background(), e.acct, int64(10*n), "backlog"); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("task_lumen_%03d", i)
		if _, admitted := e.create(t, ids[i], time.Now().Add(time.Hour), hooksWanted); !admitted {
			t.Fatalf("%s parked; want admitted (no share)", ids[i])
		}
	}
	return ids
}

// queuedJobs is how many image jobs wait on the standard queue.
func (e *sweepEnv) queuedJobs(t *testing.T) int {
	t.Helper()
	info, err := asynq.NewInspectorFromRedisClient(e.rdb).GetQueueInfo(jobs.Queue(catalog.Standard))
	if err != nil {
		return 0
	}
	return info.Pending
}

// A shard with more due than a batch is read through in one poll, batch
// after batch, each task checked once; a poll whose round runs out stops
// after the batch it is at, says more is due, and the next reads on where
// it stopped.
func TestRecoveryReadsABacklogThrough(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	ids := e.backlog(t, 35)
	spy := &dueSpy{Tasks: e.tasks}
	r := e.recovery("w1", spy, nil)
	r.batch = 10
	clock := time.Now().Add(store.FirstQueueCheck + time.Second)
	r.now = func() time.Time { return clock }
	r.lease(ctx)
	if rep := r.poll(ctx); rep.queued != 35 || rep.more {
		t.Errorf("poll %+v; want 35 jobs queued, nothing more due", rep)
	}
	if got := spy.taken(store.DueCheck); !slices.Equal(got, ids) {
		t.Errorf("checked %v; want each of the 35 tasks once", got)
	}
	if n := e.queuedJobs(t); n != 35 {
		t.Errorf("%d jobs queued; want 35", n)
	}

	// Lost again, and checked again a recheck later, a batch a poll.
	if _, err := asynq.NewInspectorFromRedisClient(e.rdb).DeleteAllPendingTasks(jobs.Queue(catalog.Standard)); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(store.QueueRecheck)
	r.round = 0
	for n := range r.held { // the backlog's shard alone is due
		if n != store.ShardOf(e.acct) {
			r.held[n] = clock.Add(time.Hour)
		}
	}
	var got []recoveryReport
	for i := 0; i < 5; i++ {
		got = append(got, r.poll(ctx))
	}
	want := []recoveryReport{{queued: 10, more: true}, {queued: 10, more: true}, {queued: 10, more: true}, {queued: 5}, {}}
	if !slices.Equal(got, want) {
		t.Errorf("polls %+v; want %+v", got, want)
	}
	if got := spy.taken(store.DueCheck); !slices.Equal(got, ids) {
		t.Errorf("checked %v; want each of the 35 tasks once", got)
	}
}

// A poll whose round ran out leaves the shards it did not get to for the
// next, which reads them first: a shard's backlog holds up the others by
// a round at most.
func TestRecoveryReadsTheLongestWaitingFirst(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	e.backlog(t, 25)
	spy := &shardSpy{Tasks: e.tasks}
	r := newRecovery(spy, e.leases, e.q, e.notes, nil, "w1", zap.NewNop())
	r.batch, r.round = 10, 0
	clock := time.Now().Add(store.FirstQueueCheck + time.Second)
	r.now = func() time.Time { return clock }
	r.lease(ctx)
	// The backlog's shard and another one, due since earlier: the other is
	// read first, then the backlog's, a batch a poll; another shard due
	// meanwhile is read before the backlog's next batch.
	shard := store.ShardOf(e.acct)
	a, b := (shard+1)%store.Shards, (shard+2)%store.Shards
	for n := range r.held {
		r.held[n] = clock.Add(time.Hour)
	}
	r.held[shard], r.held[a] = clock.Add(-time.Second), clock.Add(-2*time.Second)
	reads := func() []int {
		out := spy.shards
		spy.shards = nil
		return out
	}
	if rep := r.poll(ctx); !rep.more || rep.queued != 0 {
		t.Errorf("poll %+v; want nothing queued (an empty shard read), more due", rep)
	}
	if got := reads(); !slices.Equal(got, []int{a}) {
		t.Errorf("the first poll read shards %v; want %d (waiting longest) only", got, a)
	}
	if rep := r.poll(ctx); !rep.more || rep.queued != 10 {
		t.Errorf("poll %+v; want a batch queued, more due", rep)
	}
	r.held[b] = clock.Add(-time.Millisecond)
	if rep := r.poll(ctx); !rep.more || rep.queued != 0 {
		t.Errorf("poll %+v; want the shard due meanwhile read first", rep)
	}
	if got := reads(); !slices.Equal(got, []int{shard, b}) {
		t.Errorf("polls read shards %v; want %d then %d", got, shard, b)
	}
	for i := 0; i < 3; i++ {
		r.poll(ctx)
	}
	if got := reads(); !slices.Equal(got, []int{shard, shard}) {
		t.Errorf("polls read shards %v; want the rest of %d: two batches", got, shard)
	}
	if n := e.queuedJobs(t); n != 25 {
		t.Errorf("%d jobs queued; want 25", n)
	}
}

// shardSpy is the task store with the shards whose due work was read, in
// order, written down (the recovery reads from one goroutine).
type shardSpy struct {
	*store.Tasks
	shards []int
}

func (s *shardSpy) Due(ctx context.Context, shard int, now time.Time, limit int) (store.DueWork, error) {
	s.shards = append(s.shards, shard)
	return s.Tasks.Due(ctx, shard, now, limit)
}

// The recovery's loop polls at once when it starts, and again at once
// while a poll leaves work due, however long its poll interval.
func TestRecoveryLoopReadsOnAtOnce(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	e.backlog(t, 35)
	r := e.recovery("w1", nil, nil)
	r.batch, r.round, r.pollEvery = 10, 0, time.Hour
	r.now = func() time.Time { return time.Now().Add(store.FirstQueueCheck + time.Second) }
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(rctx)
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, 10*time.Second, "every lost job queued again, without waiting for the poll interval", func() bool {
		return e.queuedJobs(t) == 35
	})
}

// flakyQueue is the queues, whose queue checks fail while down.
type flakyQueue struct {
	*jobs.Enqueuer
	down bool
}

func (q *flakyQueue) Missing(ctx context.Context, runs []jobs.Run) ([]bool, error) {
	if q.down {
		return nil, errors.New("the queues' Redis is away")
	}
	return q.Enqueuer.Missing(ctx, runs)
}

// A batch whose queue checks fail ends the shard's read for a poll
// interval, rather than moving the whole backlog on unchecked; its tasks are
// checked again a recheck later.
func TestRecoveryStopsReadingWhenChecksFail(t *testing.T) {
	e := newSweepEnv(t)
	ctx := context.Background()
	e.backlog(t, 35)
	q := &flakyQueue{Enqueuer: e.q, down: true}
	spy := &dueSpy{Tasks: e.tasks}
	r := e.recovery("w1", spy, q)
	r.batch = 10
	clock := time.Now().Add(store.FirstQueueCheck + time.Second)
	r.now = func() time.Time { return clock }
	r.lease(ctx)
	if rep := r.poll(ctx); rep.queued != 0 || rep.more {
		t.Errorf("poll %+v; want nothing queued, nothing more read at once", rep)
	}
	if got := spy.taken(store.DueCheck); len(got) != 10 {
		t.Errorf("read %d checks; want a batch (10)", len(got))
	}
	q.down = false
	if rep := r.poll(ctx); rep.queued != 0 || rep.more {
		t.Errorf("poll at once %+v; want the shard left for a poll interval", rep)
	}
	clock = clock.Add(r.pollEvery)
	if rep := r.poll(ctx); rep.queued != 25 || rep.more {
		t.Errorf("poll %+v; want the other 25 queued", rep)
	}
	clock = clock.Add(store.QueueRecheck)
	readAll(r)
	if rep := r.poll(ctx); rep.queued != 10 {
		t.Errorf("poll a recheck later %+v; want the 10 whose checks failed queued", rep)
	}
	if n := e.queuedJobs(t); n != 35 {
		t.Errorf("%d jobs queued; want 35", n)
	}
}
