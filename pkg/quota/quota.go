// Package quota keeps every worker process together within an upstream
// model's quota: a number of calls started per minute and a number of calls
// running at once, per model, held in Redis so that the limits hold however
// many workers run. A worker asks for a slot before each upstream call
// (Acquire), gives it back after (Slot.Release), and reports an upstream 429
// (Throttled), which makes every worker wait, not only the one that saw it.
//
// Acquire goes through three steps, each shared by all workers:
//
//  1. the cooldown: after a 429 nobody calls until the time Throttled set;
//  2. the concurrency limit: a lease-based semaphore, a sorted set of holders
//     scored by when their lease runs out. A holder's lease is extended
//     every Lease/3 while its call runs; a holder whose worker died stops
//     counting when its lease runs out, so a crash never leaks a slot for
//     good;
//  3. the rate: GCRA (github.com/go-redis/redis_rate), PerMinute calls a
//     minute with a burst of Burst (1 unless set: calls spaced 60/PerMinute
//     seconds apart, so no 60-second window holds more than PerMinute).
//
// The rate comes after the semaphore on purpose: a call that has its rate
// token starts at once, so the upstream sees the rate Redis granted. (Taken
// the other way round, tokens could pile up behind a full semaphore and
// their calls go out together.) A slot is held while its rate token is
// awaited; that idles nothing while the rate is what limits.
//
// Waiting costs Redis little whatever the number of waiters: in each
// process only one goroutine per model and step asks Redis at a time, the
// others queue behind it in memory. The rate step sleeps the Retry-After
// Redis answers; a full semaphore is asked again every Poll (jittered), or
// at once when a slot of the same process is released.
//
// Key layout. Every key of a model carries the hash tag "{<model>}", so on
// Redis Cluster they share a slot (a script may read the cooldown and
// change the holders together):
//
//	quota:{<model>}:holders       zset    running calls, by when their lease runs out (Redis time, ms)
//	quota:{<model>}:cooldown      string  after a 429: until when (Unix ms) nobody calls; expires then
//	rate:quota:{<model>}:rpm      string  the GCRA bucket (go-redis/redis_rate adds "rate:")
//
// Times are Redis's (TIME in the scripts, PTTL for the cooldown), so the
// workers' clocks need not agree.
//
// A model with no limit (neither PerMinute nor Concurrent) passes straight
// through: Acquire makes no Redis call and Throttled does nothing.
package quota

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
)

// Defaults of Options.
const (
	DefaultLease       = 30 * time.Second
	DefaultPoll        = 250 * time.Millisecond
	DefaultCooldown    = 10 * time.Second
	DefaultMaxCooldown = 5 * time.Minute
	minLease           = 30 * time.Millisecond
)

// Options tune a Quota; zero fields take the defaults above.
type Options struct {
	// Lease is how long a slot counts without being extended: a worker
	// that dies frees its slots after at most this. Extended every Lease/3;
	// at least 30ms.
	Lease time.Duration
	// Poll is how often a process asks Redis again for a slot of a full
	// semaphore (with ±50% jitter); a release in the same process wakes
	// its waiter at once.
	Poll time.Duration
	// Cooldown is how long Throttled stops every worker when the upstream
	// gave no Retry-After.
	Cooldown time.Duration
	// MaxCooldown caps the wait one Throttled sets.
	MaxCooldown time.Duration
}

func (o Options) withDefaults() Options {
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	o.Lease = max(o.Lease, minLease)
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if o.MaxCooldown <= 0 {
		o.MaxCooldown = DefaultMaxCooldown
	}
	return o
}

// Quota limits calls to upstream models across every process that shares
// its Redis. It is safe for concurrent use; a process needs one.
type Quota struct {
	rdb    redis.UniversalClient
	limits Limits
	opts   Options
	rate   *redis_rate.Limiter
	id     string // this instance's prefix of holder ids
	seq    atomic.Uint64

	mu     sync.Mutex
	models map[string]*model
}

// model is one process's state for an upstream model.
type model struct {
	name                     string
	lim                      Limit
	holders, cooldown, rateK string
	// slotGate and rateGate let one goroutine at a time ask Redis for a
	// slot, or a rate token; the others wait in memory.
	slotGate, rateGate chan struct{}
	// freed: a slot of this process was released (capacity 1).
	freed chan struct{}
}

// New returns a Quota on rdb with limits (see ParseLimits), which it does
// not change.
func New(rdb redis.UniversalClient, limits Limits, opts Options) *Quota {
	return &Quota{
		rdb:    rdb,
		limits: limits,
		opts:   opts.withDefaults(),
		rate:   redis_rate.NewLimiter(rdb),
		id:     strconv.FormatUint(rand.Uint64(), 36),
		models: make(map[string]*model),
	}
}

// Limit returns the limits that apply to model.
func (q *Quota) Limit(model string) Limit { return q.limits.For(model) }

func (q *Quota) model(name string, lim Limit) *model {
	q.mu.Lock()
	defer q.mu.Unlock()
	m, ok := q.models[name]
	if !ok {
		tag := keyTag(name)
		m = &model{
			name: name, lim: lim,
			holders: tag + "holders", cooldown: tag + "cooldown", rateK: tag + "rpm",
			slotGate: make(chan struct{}, 1), rateGate: make(chan struct{}, 1),
			freed: make(chan struct{}, 1),
		}
		q.models[name] = m
	}
	return m
}

// errNoModel: a call names no model (its keys would have no hash tag).
var errNoModel = apperr.New(apperr.Invalid, "quota: no upstream model named")

// Acquire waits until a call to model may start: no cooldown, a free slot
// (its lease then extended until Release), a rate token. It returns the
// slot to release when the call ends, whatever its outcome. When ctx ends
// first it returns ctx's error, having taken nothing; a Redis failure is an
// apperr.Unavailable, retryable. A model without limits gets a slot at
// once, without asking Redis.
func (q *Quota) Acquire(ctx context.Context, model string) (*Slot, error) {
	lim := q.limits.For(model)
	if lim.unlimited() {
		return &Slot{}, nil
	}
	if model == "" {
		return nil, errNoModel
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	m := q.model(model, lim)
	s := &Slot{}
	if lim.Concurrent > 0 {
		var err error
		if s, err = q.takeSlot(ctx, m); err != nil {
			return nil, err
		}
	}
	if lim.PerMinute > 0 {
		// The semaphore's script has just checked the cooldown.
		if err := q.takeRate(ctx, m, lim.Concurrent <= 0); err != nil {
			s.Release()
			return nil, err
		}
	}
	s.waited = time.Since(start)
	return s, nil
}

// Throttled reports that the upstream refused a call to model for too many
// requests: every worker waits retryAfter (Options.Cooldown when 0 or
// less, at most Options.MaxCooldown) before calling model again. A longer
// cooldown already set stays. Nothing happens for a model without limits.
func (q *Quota) Throttled(ctx context.Context, model string, retryAfter time.Duration) error {
	lim := q.limits.For(model)
	if lim.unlimited() {
		return nil
	}
	if model == "" {
		return errNoModel
	}
	d := retryAfter
	if d <= 0 {
		d = q.opts.Cooldown
	}
	d = min(d, q.opts.MaxCooldown)
	m := q.model(model, lim)
	if _, err := cooldownScript.Call(ctx, q.rdb, cooldownKeys{Cooldown: m.cooldown}, cooldownArgs{Ms: max(d.Milliseconds(), 1)}); err != nil {
		return q.redisErr(ctx, err)
	}
	return nil
}

// Cooldown returns how long calls to model still wait after a 429; 0 when
// they do not.
func (q *Quota) Cooldown(ctx context.Context, model string) (time.Duration, error) {
	if q.limits.For(model).unlimited() {
		return 0, nil
	}
	if model == "" {
		return 0, errNoModel
	}
	m := q.model(model, q.limits.For(model))
	d, err := q.rdb.PTTL(ctx, m.cooldown).Result()
	if err != nil {
		return 0, q.redisErr(ctx, err)
	}
	return max(d, 0), nil
}

// takeRate waits for a rate token; checkCooldown: read the cooldown before
// the first token (it is read again after every wait).
func (q *Quota) takeRate(ctx context.Context, m *model, checkCooldown bool) error {
	if err := lock(ctx, m.rateGate); err != nil {
		return err
	}
	defer unlock(m.rateGate)
	limit := redis_rate.Limit{Rate: m.lim.PerMinute, Burst: max(m.lim.Burst, 1), Period: time.Minute}
	for {
		if checkCooldown {
			d, err := q.rdb.PTTL(ctx, m.cooldown).Result()
			if err != nil {
				return q.redisErr(ctx, err)
			}
			if d > 0 {
				if err := sleep(ctx, d, nil); err != nil {
					return err
				}
				continue
			}
		}
		res, err := q.rate.Allow(ctx, m.rateK, limit)
		if err != nil {
			return q.redisErr(ctx, err)
		}
		if res.Allowed > 0 {
			return nil
		}
		// A 429 may come while we wait: read the cooldown again after.
		checkCooldown = true
		if err := sleep(ctx, max(res.RetryAfter, time.Millisecond), nil); err != nil {
			return err
		}
	}
}

// redisErr: ctx's own error when ctx has ended, else Redis is unavailable.
func (q *Quota) redisErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return apperr.Transient(err, apperr.Unavailable, "the upstream quota could not be checked")
}

// lock takes a gate (a channel of capacity 1), or returns ctx's error.
func lock(ctx context.Context, gate chan struct{}) error {
	select {
	case gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func unlock(gate chan struct{}) { <-gate }

// sleep waits d, or until wake receives (when not nil); ctx's error if ctx
// ends first.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter returns d ± 50%.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d+1)
}

// InUse reads, for operators, how many calls of model hold a slot now
// (holders whose lease has not run out, by Redis's clock): the
// concurrency part of its quota in use.
func InUse(ctx context.Context, rdb redis.UniversalClient, model string) (int64, error) {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return rdb.ZCount(ctx, keyTag(model)+"holders", "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
}

// keyTag starts every key of a model's quota: its hash tag keeps them on
// one slot.
func keyTag(model string) string { return "quota:{" + model + "}:" }
