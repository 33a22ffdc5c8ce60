package logging

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Burst logs a failure that may repeat on every request once per burst, not
// once per request: the first failure (with the logger of the request that
// met it), a count every interval while failures go on, and the recovery.
// Its zero value is not usable; use NewBurst. Safe for concurrent use; a
// success while nothing is failing costs one atomic load.
type Burst struct {
	what  string
	every time.Duration
	now   func() time.Time

	failing atomic.Bool
	mu      sync.Mutex
	since   time.Time // first failure of the burst
	last    time.Time // last line logged
	n       int64     // failures since the last line
	total   int64     // failures in the burst
}

// NewBurst returns a Burst whose lines start with what and which, while
// failures go on, logs a count every interval.
func NewBurst(what string, every time.Duration) *Burst {
	return &Burst{what: what, every: every, now: time.Now}
}

// Fail records a failure; log is the logger of the request or job that met
// it (it carries its id).
func (b *Burst) Fail(log *zap.Logger, err error, fields ...zap.Field) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.n++
	b.total++
	if !b.failing.Load() {
		b.failing.Store(true)
		b.since, b.last, b.n, b.total = now, now, 0, 1
		log.Warn(b.what+": failing", append(fields, zap.Error(err))...)
		return
	}
	if now.Sub(b.last) >= b.every {
		log.Warn(b.what+": still failing", append(fields,
			zap.Int64("failures", b.n), zap.Duration("for", now.Sub(b.since)), zap.Error(err))...)
		b.last, b.n = now, 0
	}
}

// Failing reports whether a burst of failures is going on: a caller on a
// hot path asks before building the logger OK takes.
func (b *Burst) Failing() bool { return b.failing.Load() }

// OK records a success, ending a burst of failures if one is going on.
func (b *Burst) OK(log *zap.Logger) {
	if !b.failing.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.failing.Load() {
		return
	}
	b.failing.Store(false)
	log.Info(b.what+": recovered", zap.Int64("failures", b.total), zap.Duration("after", b.now().Sub(b.since)))
}
