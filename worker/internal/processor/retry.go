package processor

import (
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Retry is the worker's one retry policy. Two things are retried, both with
// the same backoff: Initial, doubling each time up to MaxInterval, each wait
// drawn from ±50% of that for jitter.
//
//   - A generation that fails with a retryable error (the model's 429 or 5xx,
//     a timeout, a lost connection) is tried again at once by the processor,
//     at most MaxAttempts times in all and none started after MaxElapsed; the
//     task stays processing meanwhile, then fails with the last error's code.
//   - A job whose worker died, or that could not record its outcome (Redis
//     unreachable), runs again from the queue, at most jobs.MaxRetry more
//     times (Asynq's retries, waiting Delay between them).
type Retry struct {
	MaxAttempts int
	MaxElapsed  time.Duration
	Initial     time.Duration
	MaxInterval time.Duration
}

const (
	retryMultiplier   = 2
	retryRandomFactor = 0.5
)

// Delay is the wait before retry n (0 for the first retry) of a job.
func (r Retry) Delay(n int) time.Duration {
	d := r.Initial
	for i := 0; i < n && d < r.MaxInterval; i++ {
		d *= retryMultiplier
	}
	d = min(d, r.MaxInterval)
	spread := time.Duration(float64(d) * retryRandomFactor)
	return d - spread + rand.N(2*spread+1)
}

// backOff is the same schedule for the processor's retries of a generation.
func (r Retry) backOff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = r.Initial
	b.MaxInterval = r.MaxInterval
	b.Multiplier = retryMultiplier
	b.RandomizationFactor = retryRandomFactor
	return b
}
