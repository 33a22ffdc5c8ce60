package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// Queue positions. Each queue has two sequence numbers: how many tasks
// joined it (taken by the create, kept in the task record) and how many
// left it (a worker started them, or they were canceled, failed or undone
// while pending). On one server the scripts that make those changes keep
// both in the same step (lib.lua's QUEUES): a create or a promotion
// numbers the task it admits, a change that takes a task out of pending
// counts it out. On a cluster the queue's key is on another slot: the
// scripts say which queue, and the store numbers the tasks admitted
// (created or promoted) in batches (numberLater) and counts them out in
// batches (countOut). A pending task's position is its own number less
// those that left: O(1), never a scan of the queue. It is an estimate:
// tasks leave out of order (a retry, an account at its share), so it is
// clamped to at least 1.
//
// The rate tasks leave at, for the ETA, is measured between two samples
// of the dequeued count taken at least queueSampleEvery (lib.lua's
// SAMPLE_EVERY) apart, within the
// queue's busy period: a task joining an empty queue restarts the samples
// (join_queue in lib.lua).
const queueSampleEvery = 10 * time.Second

// PickUp is the ETA of a task first in a queue that was empty: how long a
// worker takes to pick it up (an idle worker polls its queues every 50 ms,
// EASEL_TASK_CHECK_INTERVAL). The estimate assumes a free worker; with
// every worker busy the task waits for one to finish.
const PickUp = 100 * time.Millisecond

// Queues reads the queues' numbers.
type Queues struct{ db *DB }

// NewQueues returns the queue numbers on db.
func NewQueues(db *DB) *Queues { return &Queues{db: db} }

var joinQueueLua = newScript[queueKeys, joinQueueArgs, joinQueueReply]("join_queue", map[string]int64{"JOINED": 1})

type joinQueueReply struct {
	Code int64 `lua:"code"`
	Seq  int64 `lua:"seq"`
}

type joinQueueArgs struct {
	Now int64 `lua:"now"`
	N   int   `lua:"n"`
}

var dequeuedLua = newScript[queueKeys, dequeuedArgs, dequeuedReply]("dequeued", map[string]int64{"COUNTED": 1})

type dequeuedReply struct {
	Code     int64 `lua:"code"`
	Dequeued int64 `lua:"dequeued"`
}

type queueKeys struct {
	Queue string `lua:"queue"`
}

type dequeuedArgs struct {
	N   int   `lua:"n"`
	Now int64 `lua:"now"`
}

// dequeued records, now, that n tasks left a queue.
func (db *DB) dequeued(ctx context.Context, queue string, n int) error {
	if _, err := dequeuedLua.run(ctx, db, queueKeys{Queue: queueKey(queue)}, dequeuedArgs{N: n, Now: db.now().UnixMilli()}); err != nil {
		return fmt.Errorf("store: queue %s: %w", queue, err)
	}
	return nil
}

// queues is the scripts' queues argument (lib.lua's QUEUES): the prefix
// of the queues' keys on one server, where the scripts keep the queues'
// numbers in their own step; empty on a cluster, where the store does.
func (db *DB) queues() string {
	if db.cluster() {
		return ""
	}
	return queueKey("")[:len(queueKey(""))-1]
}

// queueCountEvery is how long tasks counted out of their queues on a
// cluster wait in memory before one dequeued call a queue counts them.
// A process that dies loses the counts it holds: the tasks behind them
// read a position that many too high (never a task lost, nor a number
// given twice) until they leave their queue.
const queueCountEvery = 100 * time.Millisecond

// queueCounts are what a cluster's store holds of its queues' books, to
// be flushed: the counts of tasks out of their queues, and the tasks
// admitted that are yet to take their numbers.
type queueCounts struct {
	mu       sync.Mutex
	n        map[string]int
	admitted []task.Admitted
	pending  bool
	// flushing is held while a flush sends, so that a flush returns only
	// once the counts taken before it (by another flush) are sent too.
	flushing sync.Mutex
}

// countOut counts n tasks out of a queue (a script returned it: a
// cluster): held and flushed with the others of queueCountEvery in one
// dequeued call a queue. On one server the scripts count them themselves.
func (db *DB) countOut(queue string, n int) {
	if queue == "" || n <= 0 {
		return
	}
	c := &db.counts
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[queue] += n
	db.flushLater()
}

// numberLater gives tasks admitted on a cluster (created or promoted)
// their numbers in their queues, for their positions, within
// queueCountEvery, in one batch with the others admitted meanwhile
// (numberInQueues): a change that admits a task makes no round trip to
// the queues' slots itself. Until then the task reads no position; a
// process that dies first leaves its tasks without one (never a task lost,
// nor a number given twice).
func (db *DB) numberLater(admitted []task.Admitted) {
	c := &db.counts
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.admitted)
	for _, a := range admitted {
		if a.Queue != "" && a.TaskID != "" {
			c.admitted = append(c.admitted, a)
		}
	}
	if len(c.admitted) > n {
		db.flushLater()
	}
}

// flushLater flushes the queues' books held queueCountEvery from now,
// unless a flush is due already; c.mu is held.
func (db *DB) flushLater() {
	c := &db.counts
	if c.pending {
		return
	}
	c.pending = true
	time.AfterFunc(queueCountEvery, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = db.FlushQueueCounts(ctx)
	})
}

// FlushQueueCounts writes, now, the queues' books the store holds: the
// numbers of the tasks admitted (numberLater), in two round trips, then
// the counts of the tasks out of their queues (countOut, and the numbers
// given back) in one dequeued call a queue, pipelined; after any flush
// already sending (so what was held before the call is all written when it
// returns). A process stopping calls it; what it fails to write is lost
// (a task without a position, or positions read one too high a count),
// never retried twice.
func (db *DB) FlushQueueCounts(ctx context.Context) error {
	c := &db.counts
	c.flushing.Lock()
	defer c.flushing.Unlock()
	c.mu.Lock()
	held, admitted := c.n, c.admitted
	c.n, c.admitted, c.pending = nil, nil, false
	c.mu.Unlock()
	if len(admitted) > 0 {
		for q, n := range db.numberInQueues(ctx, admitted) {
			if held == nil {
				held = map[string]int{}
			}
			held[q] += n
		}
	}
	if len(held) == 0 {
		return nil
	}
	now := db.now().UnixMilli()
	calls := make([]call[queueKeys, dequeuedArgs], 0, len(held))
	for q, n := range held {
		calls = append(calls, call[queueKeys, dequeuedArgs]{queueKeys{Queue: queueKey(q)}, dequeuedArgs{N: n, Now: now}})
	}
	_, errs, err := dequeuedLua.runPipelined(ctx, db, calls)
	if err != nil {
		return fmt.Errorf("store: queue counts: %w", err)
	}
	for _, e := range errs {
		if e != nil {
			return fmt.Errorf("store: queue counts: %w", e)
		}
	}
	return nil
}

// QueueStats are a queue's numbers: how many tasks left it, and the
// sample of that count the ETA's rate is measured from.
type QueueStats struct {
	Dequeued int64
	// SampleAt and SampleCount: the dequeued count at that time (zero:
	// no sample yet).
	SampleAt    time.Time
	SampleCount int64
}

// Stats reads a queue's numbers.
func (q *Queues) Stats(ctx context.Context, queue string) (QueueStats, error) {
	v, err := q.db.hot.HMGet(ctx, queueKey(queue), fQueueDeq, fQueueT0, fQueueN0).Result()
	if err != nil {
		return QueueStats{}, fmt.Errorf("store: queue %s: %w", queue, err)
	}
	num := func(i int) int64 {
		s, _ := v[i].(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	st := QueueStats{Dequeued: num(0), SampleCount: num(2)}
	if ms := num(1); ms > 0 {
		st.SampleAt = time.UnixMilli(ms)
	}
	return st, nil
}

// PositionOf returns the position, at now, of the task that joined the
// queue with sequence number seq (task.Task.QueueSeq).
func (q QueueStats) PositionOf(seq int64, now time.Time) task.QueuePosition {
	qp := task.QueuePosition{Position: max(seq-q.Dequeued, 1)}
	switch {
	case q.SampleAt.IsZero() || now.Before(q.SampleAt):
	case q.Dequeued > q.SampleCount:
		perMs := float64(q.Dequeued-q.SampleCount) / float64(now.Sub(q.SampleAt).Milliseconds()+1)
		qp.ETA = time.Duration(float64(qp.Position)/perMs) * time.Millisecond
		qp.Known = true
	case qp.Position == 1 && now.Sub(q.SampleAt) < queueSampleEvery:
		// First in a queue that has just become busy: no rate yet, and
		// nothing ahead.
		qp.ETA, qp.Known = PickUp, true
	}
	return qp
}
