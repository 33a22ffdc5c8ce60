package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// Queue positions. Each queue has two sequence numbers: how many tasks
// joined it (taken by the create, kept in the task record) and how many
// left it (a worker started them, or they were canceled, failed or undone
// while pending: the scripts that make those changes say so, and the store
// counts them out). A pending task's position is its own number less
// those that left: O(1), never a scan of the queue. It is an estimate:
// tasks leave out of order (a retry, an account at its share), so it is
// clamped to at least 1.
//
// The rate tasks leave at, for the ETA, is measured between two samples
// of the dequeued count taken at least queueSampleEvery apart, within the
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
}

// nextQueueSeq takes the next sequence number of a queue, for a task
// about to join it.
func (db *DB) nextQueueSeq(ctx context.Context, queue string) (int64, error) {
	r, err := joinQueueLua.run(ctx, db, queueKeys{Queue: queueKey(queue)}, joinQueueArgs{Now: db.now().UnixMilli()})
	if err != nil {
		return 0, fmt.Errorf("store: queue %s: %w", queue, err)
	}
	return r.Seq, nil
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
	N           int   `lua:"n"`
	Now         int64 `lua:"now"`
	SampleEvery int64 `lua:"sample_every"`
}

// dequeued records that n tasks left a queue.
func (db *DB) dequeued(ctx context.Context, queue string, n int) error {
	if _, err := dequeuedLua.run(ctx, db, queueKeys{Queue: queueKey(queue)}, dequeuedArgs{
		N: n, Now: db.now().UnixMilli(), SampleEvery: queueSampleEvery.Milliseconds(),
	}); err != nil {
		return fmt.Errorf("store: queue %s: %w", queue, err)
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
