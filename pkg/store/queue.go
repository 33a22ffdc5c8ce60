package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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

// QueueStats are a queue's numbers: how many tasks left it, and the
// sample of that count the ETA's rate is measured from.
type QueueStats struct {
	Dequeued int64
	// SampleAt and SampleCount: the dequeued count at that time (zero:
	// no sample yet).
	SampleAt    time.Time
	SampleCount int64
}

// QueueStatsOf reads a queue's numbers.
func (s *Store) QueueStatsOf(ctx context.Context, queue string) (QueueStats, error) {
	v, err := s.rdb.HMGet(ctx, queueKey(queue), "deq", "t0", "n0").Result()
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
func (q QueueStats) PositionOf(seq int64, now time.Time) QueuePosition {
	qp := QueuePosition{Position: max(seq-q.Dequeued, 1)}
	if !q.SampleAt.IsZero() && now.After(q.SampleAt) && q.Dequeued > q.SampleCount {
		perMs := float64(q.Dequeued-q.SampleCount) / float64(now.Sub(q.SampleAt).Milliseconds()+1)
		qp.ETA = time.Duration(float64(qp.Position)/perMs) * time.Millisecond
		qp.Known = true
	}
	return qp
}
