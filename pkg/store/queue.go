package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// Queue positions. Each queue has two sequence numbers: how many tasks
// joined it (NextQueueSeq, taken at create and kept in the task record)
// and how many left it (Dequeued: a worker started them, or they were
// canceled or undone while pending). A pending task's position is its own
// number less those that left: O(1), never a scan of the queue. It is an
// estimate: tasks leave out of order (a retry, an account at its share),
// so it is clamped to at least 1.
//
// The rate tasks leave at, for the ETA, is measured between two samples
// of the dequeued count taken at least queueSampleEvery apart.
const queueSampleEvery = 10 * time.Second

// NextQueueSeq takes the next sequence number of a queue, for a task about
// to join it.
func (s *Store) NextQueueSeq(ctx context.Context, queue string) (int64, error) {
	n, err := s.rdb.HIncrBy(ctx, queueKey(queue), "enq", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("store: queue %s: %w", queue, err)
	}
	return n, nil
}

// KEYS: queue. ARGV: n, now, sample every.
var dequeuedScript = redis.NewScript(`
local n = redis.call('HINCRBY', KEYS[1], 'deq', ARGV[1])
local v = redis.call('HMGET', KEYS[1], 't1', 'n1')
local now = tonumber(ARGV[2])
local t1 = tonumber(v[1] or '0') or 0
if now - t1 >= tonumber(ARGV[3]) then
  if t1 > 0 then redis.call('HSET', KEYS[1], 't0', t1, 'n0', v[2]) end
  redis.call('HSET', KEYS[1], 't1', now, 'n1', n)
end
return n
`)

// Dequeued records that n tasks left a queue.
func (s *Store) Dequeued(ctx context.Context, queue string, n int) error {
	if err := dequeuedScript.Run(ctx, s.rdb, []string{queueKey(queue)}, n, s.now().UnixMilli(), queueSampleEvery.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("store: queue %s: %w", queue, err)
	}
	return nil
}

// QueuePosition is where a pending task stands in its queue.
type QueuePosition struct {
	// Position is 1 for the next task to start.
	Position int64
	// ETA is the estimated time until a worker starts it, from the rate
	// tasks have left the queue lately; Known is false while there is no
	// rate to go by (nothing left the queue in the sampled window).
	ETA   time.Duration
	Known bool
}

// QueuePositionOf returns the position of the task that joined queue with
// sequence number seq (NextQueueSeq).
func (s *Store) QueuePositionOf(ctx context.Context, queue string, seq int64) (QueuePosition, error) {
	v, err := s.rdb.HMGet(ctx, queueKey(queue), queueFields...).Result()
	if err != nil {
		return QueuePosition{}, fmt.Errorf("store: queue %s: %w", queue, err)
	}
	return s.positionOf(v, seq), nil
}

var queueFields = []string{"deq", "t0", "n0"}

// positionOf computes a position from a queue's fields (queueFields).
func (s *Store) positionOf(v []any, seq int64) QueuePosition {
	num := func(i int) int64 {
		s, _ := v[i].(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	deq, t0, n0 := num(0), num(1), num(2)
	qp := QueuePosition{Position: max(seq-deq, 1)}
	now := s.now().UnixMilli()
	if t0 > 0 && now > t0 && deq > n0 {
		perMs := float64(deq-n0) / float64(now-t0)
		qp.ETA = time.Duration(float64(qp.Position)/perMs) * time.Millisecond
		qp.Known = true
	}
	return qp
}

// TaskPositioned is Task that also returns a pending task's queue position
// (nil for a task not pending, or with no number in its queue), in the
// same round trip: the queues' numbers are read with the record. queues
// maps each model id to its queue.
func (s *Store) TaskPositioned(ctx context.Context, accountID, taskID string, queues map[string]string) (*task.Task, *QueuePosition, error) {
	var rec *redis.MapStringStringCmd
	qs := map[string]*redis.SliceCmd{}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGetAll(ctx, taskKey(accountID, taskID))
		for _, q := range queues {
			if qs[q] == nil {
				qs[q] = p.HMGet(ctx, queueKey(q), queueFields...)
			}
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("store: task %s: %w", taskID, err)
	}
	m := rec.Val()
	if len(m) == 0 {
		return nil, nil, &apperr.NotFoundError{Kind: "task", ID: taskID}
	}
	t, err := decodeTask(accountID, taskID, m)
	if err != nil {
		return nil, nil, err
	}
	if t.Status != task.Pending || t.QueueSeq == 0 {
		return t, nil, nil
	}
	q, ok := qs[queues[t.Model]]
	if !ok {
		return t, nil, nil
	}
	p := s.positionOf(q.Val(), t.QueueSeq)
	return t, &p, nil
}
