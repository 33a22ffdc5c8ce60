// Package ratelimit limits request rates per API key with GCRA on Redis
// (github.com/go-redis/redis_rate), so a limit holds across every gateway
// replica.
//
// Below LeaseFrom requests a second every request asks Redis. At or above
// it, a gateway takes tokens from the key's Redis bucket a few at a time
// (about 2% of the limit, at most 100) and hands them out itself for up to
// LeaseTTL: Redis sees one call per batch instead of one per request. The
// tokens are debited in Redis when taken, so all gateways together never
// admit more than the limit; a lease that expires unused only makes a
// gateway admit slightly less, for a moment. A refusal is remembered until
// its Retry-After, so a client hammering past its limit costs Redis nothing
// more.
package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/store"
)

// Leasing parameters.
const (
	LeaseFrom  = 100                    // requests per second
	LeaseTTL   = 100 * time.Millisecond // how long leased tokens stay usable
	leaseShare = 50                     // a batch is limit/leaseShare tokens
	maxBatch   = 100
)

// Result is the outcome of one request against its limit.
type Result struct {
	Allowed    bool
	Limit      int           // requests per second
	Remaining  int           // requests left in the burst
	RetryAfter time.Duration // when refused: how long to wait
	ResetAfter time.Duration // until the bucket is full again
}

// Limiter limits rates.
type Limiter struct {
	l      *redis_rate.Limiter
	leases *lru.Cache[string, *lease]
	now    func() time.Time
}

// lease is a gateway's batch of tokens for one bucket.
type lease struct {
	mu       sync.Mutex
	limit    int
	tokens   int // left to hand out
	expires  time.Time
	leasedAt time.Time
	res      redis_rate.Result // Redis's answer when the batch was taken
	// refusedUntil: Redis said no token before then; refuse without asking.
	refusedUntil time.Time
}

// New returns a limiter on rdb.
func New(rdb redis.UniversalClient) *Limiter {
	leases, _ := lru.New[string, *lease](100_000)
	return &Limiter{l: redis_rate.NewLimiter(rdb), leases: leases, now: time.Now}
}

// Allow counts one request in bucket against perSecond (a burst of
// perSecond, refilled at perSecond a second). At any limit, a refusal is
// remembered until its Retry-After: a client hammering past its limit costs
// Redis nothing more until then.
func (l *Limiter) Allow(ctx context.Context, bucket string, perSecond int) (Result, error) {
	ls, ok := l.leases.Get(bucket)
	if !ok {
		ls = &lease{}
		if prev, found, _ := l.leases.PeekOrAdd(bucket, ls); found {
			ls = prev
		}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := l.now()
	if perSecond < LeaseFrom {
		if ls.limit == perSecond && now.Before(ls.refusedUntil) {
			return Result{Limit: perSecond, RetryAfter: ls.refusedUntil.Sub(now), ResetAfter: max(ls.res.ResetAfter-now.Sub(ls.leasedAt), 0)}, nil
		}
		r, err := l.l.Allow(ctx, bucket, redis_rate.PerSecond(perSecond))
		if err != nil {
			return Result{}, err
		}
		ls.limit, ls.res, ls.leasedAt, ls.refusedUntil = perSecond, *r, now, time.Time{}
		if r.Allowed == 0 && r.RetryAfter > 0 {
			ls.refusedUntil = now.Add(r.RetryAfter)
		}
		return result(r, perSecond, 0), nil
	}
	if ls.limit == perSecond {
		switch {
		case ls.tokens > 0 && now.Before(ls.expires):
			ls.tokens--
			r := result(&ls.res, perSecond, ls.tokens)
			r.ResetAfter = max(ls.res.ResetAfter-now.Sub(ls.leasedAt), 0)
			return r, nil
		case now.Before(ls.refusedUntil):
			return Result{Limit: perSecond, RetryAfter: ls.refusedUntil.Sub(now), ResetAfter: max(ls.res.ResetAfter-now.Sub(ls.leasedAt), 0)}, nil
		}
	}
	batch := min(max(perSecond/leaseShare, 1), maxBatch)
	r, err := l.l.AllowAtMost(ctx, bucket, redis_rate.PerSecond(perSecond), batch)
	if err != nil {
		return Result{}, err
	}
	ls.limit, ls.res, ls.leasedAt, ls.expires = perSecond, *r, now, now.Add(LeaseTTL)
	ls.tokens = max(r.Allowed-1, 0)
	ls.refusedUntil = time.Time{}
	if r.Allowed == 0 && r.RetryAfter > 0 {
		ls.refusedUntil = now.Add(r.RetryAfter)
	}
	return result(r, perSecond, ls.tokens), nil
}

// result converts Redis's answer; leased tokens not yet handed out count as
// remaining.
func result(r *redis_rate.Result, perSecond, leased int) Result {
	return Result{
		Allowed:    r.Allowed > 0,
		Limit:      perSecond,
		Remaining:  r.Remaining + leased,
		RetryAfter: r.RetryAfter,
		ResetAfter: r.ResetAfter,
	}
}

// Class is a class of request, limited on its own: creates and the rest.
type Class string

// Classes.
const (
	Create Class = "create"
	Query  Class = "query"
)

// Bucket is the bucket of an API key (by its hash) for a class of request.
func Bucket(class Class, keyHash string) string { return store.RateBucket(string(class), keyHash) }
