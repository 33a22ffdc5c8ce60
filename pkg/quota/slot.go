package quota

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/logging"
)

// Slot is the right to make one upstream call, from Acquire. While it is
// held its lease in Redis is extended; Release gives it back.
type Slot struct {
	q      *Quota
	m      *model
	member string // the holder's id in the semaphore; "" without one
	waited time.Duration
	log    *zap.Logger

	cancel context.CancelFunc // stops the extensions
	done   chan struct{}      // closed when they have stopped
	once   sync.Once
}

// Waited is how long Acquire waited for the slot (cooldown, semaphore and
// rate together).
func (s *Slot) Waited() time.Duration {
	if s == nil {
		return 0
	}
	return s.waited
}

// Release gives the slot back: it stops counting at once for every worker,
// and a waiter of this process asks for it at once. Call it once the call
// is over, whatever its outcome; later calls do nothing. Should Redis not
// answer, the slot frees itself when its lease runs out.
func (s *Slot) Release() {
	if s == nil || s.member == "" {
		return
	}
	s.once.Do(func() {
		s.cancel()
		<-s.done // no extension may re-add the holder after the ZREM
		ctx, cancel := context.WithTimeout(context.Background(), s.q.opts.Lease/3)
		defer cancel()
		if err := s.q.rdb.ZRem(ctx, s.m.holders, s.member).Err(); err != nil {
			s.log.Warn("quota: a slot could not be released; it frees itself when its lease runs out",
				zap.String("model", s.m.name), zap.Duration("lease", s.q.opts.Lease), zap.Error(err))
		}
		select {
		case s.m.freed <- struct{}{}:
		default:
		}
	})
}

// acquireScript removes the holders whose lease has run out and adds
// ARGV[1] if fewer than ARGV[2] remain, for a lease of ARGV[3] ms; unless a
// cooldown is on. It returns {1, 0} when it added the holder, {0, ms} when
// a cooldown has ms to run, {-1, 0} when the semaphore is full.
var acquireScript = redis.NewScript(`
redis.replicate_commands()
local cd = redis.call('PTTL', KEYS[2])
if cd > 0 then
  return {0, cd}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return {-1, 0}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * lease)
return {1, 0}
`)

// extendScript extends holder ARGV[1]'s lease by ARGV[3] ms. A holder
// whose lease ran out (Redis unreachable for a whole lease) is added again
// if fewer than ARGV[2] hold: its call is still running. It returns 1 when
// extended, 2 when added again, 0 when the semaphore is full without it.
var extendScript = redis.NewScript(`
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local res = 1
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    return 0
  end
  res = 2
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * lease)
return res
`)

// cooldownScript stops calls for ARGV[1] ms, unless a longer cooldown is
// on; the value is the end, in Unix ms (Redis time), for people to read.
var cooldownScript = redis.NewScript(`
redis.replicate_commands()
local ms = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) >= ms then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], now + ms, 'PX', ms)
return 1
`)

// takeSlot waits for a place in m's semaphore (and for no cooldown).
func (q *Quota) takeSlot(ctx context.Context, m *model) (*Slot, error) {
	if err := lock(ctx, m.slotGate); err != nil {
		return nil, err
	}
	defer unlock(m.slotGate)
	member := q.id + ":" + strconv.FormatUint(q.seq.Add(1), 36)
	lease := q.opts.Lease.Milliseconds()
	for {
		res, err := acquireScript.Run(ctx, q.rdb, []string{m.holders, m.cooldown}, member, m.lim.Concurrent, lease).Int64Slice()
		if err != nil {
			// The script may have added the holder before its answer was
			// lost: take it out, or it would count until its lease ran out.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.opts.Lease/3)
			_ = q.rdb.ZRem(rctx, m.holders, member).Err()
			cancel()
			return nil, q.redisErr(ctx, err)
		}
		switch {
		case res[0] == 1:
			return q.newSlot(ctx, m, member), nil
		case res[0] == 0 && len(res) > 1:
			err = sleep(ctx, time.Duration(res[1])*time.Millisecond, nil)
		default:
			err = sleep(ctx, jitter(q.opts.Poll), m.freed)
		}
		if err != nil {
			return nil, err
		}
	}
}

// newSlot returns the slot of a holder just added, its lease extended
// every Lease/3 until Release.
func (q *Quota) newSlot(ctx context.Context, m *model, member string) *Slot {
	ectx, cancel := context.WithCancel(context.Background())
	s := &Slot{
		q: q, m: m, member: member,
		log:    logging.From(ctx),
		cancel: cancel, done: make(chan struct{}),
	}
	go s.extend(ectx)
	return s
}

// extend extends the slot's lease every Lease/3 until ctx ends.
func (s *Slot) extend(ctx context.Context) {
	defer close(s.done)
	every := s.q.opts.Lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	keys := []string{s.m.holders}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		n, err := extendScript.Run(rctx, s.q.rdb, keys, s.member, s.m.lim.Concurrent, s.q.opts.Lease.Milliseconds()).Int64()
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("quota: a slot's lease could not be extended; trying again",
				zap.String("model", s.m.name), zap.Duration("every", every), zap.Error(err))
		case n == 0:
			s.log.Warn("quota: a slot's lease ran out and the others took its place; this call runs uncounted",
				zap.String("model", s.m.name))
		case n == 2:
			s.log.Warn("quota: a slot's lease ran out; it was taken again", zap.String("model", s.m.name))
		}
	}
}
