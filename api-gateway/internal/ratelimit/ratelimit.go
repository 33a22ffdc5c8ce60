// Package ratelimit limits request rates per API key with GCRA on Redis
// (github.com/go-redis/redis_rate), so a limit holds across every gateway
// replica.
package ratelimit

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
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
	l *redis_rate.Limiter
}

// New returns a limiter on rdb.
func New(rdb redis.UniversalClient) *Limiter {
	return &Limiter{l: redis_rate.NewLimiter(rdb)}
}

// Allow counts one request in bucket against perSecond (a burst of
// perSecond, refilled at perSecond a second).
func (l *Limiter) Allow(ctx context.Context, bucket string, perSecond int) (Result, error) {
	r, err := l.l.Allow(ctx, bucket, redis_rate.PerSecond(perSecond))
	if err != nil {
		return Result{}, err
	}
	return Result{
		Allowed:    r.Allowed > 0,
		Limit:      perSecond,
		Remaining:  r.Remaining,
		RetryAfter: r.RetryAfter,
		ResetAfter: r.ResetAfter,
	}, nil
}
