package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pulse is a worker process's liveness: a key of its own, renewed every
// PulseEvery while the process runs (Run) and lasting PulseTTL, so that a
// task whose run never let go counts as a crash only when the worker that
// started the run is dead (its key ran out and it did not come back), not
// when a run was cut by Redis being away, by a hang, or by a graceful
// stop (Stop). The task records the id of the worker running it (the
// task's live field).
//
// A dead worker's key is gone PulseTTL after its last renewal, well
// before its Asynq lease (30 s) runs out and its runs are taken over. A
// live worker's key outlasts a Redis outage of up to PulseTTL -
// PulseEvery; after a longer one, a worker judges no other dead until it
// has itself renewed its key without a break for pulseSteady: by then
// every live worker has renewed its own.
type Pulse struct {
	db         *DB
	id         string
	every, ttl time.Duration
	now        func() time.Time

	mu sync.Mutex
	// since is the first renewal of the current unbroken run of them
	// (zero: the last one failed, or none yet); last the latest one.
	since, last time.Time
}

// Liveness timings.
const (
	PulseEvery = 2 * time.Second
	PulseTTL   = 15 * time.Second
	// pulseSteady: how long a worker's own renewals go unbroken before it
	// judges another worker dead.
	pulseSteady = 3 * PulseEvery
	// pulseStopped: how long the key of a worker that stopped gracefully
	// says so; a run it did not let go is no crash when found within it.
	pulseStopped      = 24 * time.Hour
	pulseStoppedValue = "stopped"
)

// NewPulse returns the liveness of a new worker process named name
// (service.InstanceID). Its id is name and a random suffix: a process
// restarted in a container has the host and pid of the one before, and
// is a worker of its own.
func NewPulse(db *DB, name string) *Pulse {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &Pulse{db: db, id: name + ":" + hex.EncodeToString(b[:]), every: PulseEvery, ttl: PulseTTL, now: time.Now}
}

// ID is the worker's id.
func (p *Pulse) ID() string { return p.id }

// Beat renews the worker's key once.
func (p *Pulse) Beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.every)
	defer cancel()
	err := p.db.rdb.Set(ctx, workerKey(p.id), "1", p.ttl).Err()
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.since = time.Time{}
		return fmt.Errorf("store: worker liveness: %w", err)
	}
	if p.since.IsZero() || now.Sub(p.last) > 2*p.every {
		p.since = now
	}
	p.last = now
	return nil
}

// Run renews the worker's key every PulseEvery until ctx is done.
func (p *Pulse) Run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		_ = p.Beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop records that the worker stopped gracefully: the runs it did not
// let go (its shutdown ran out of time) are no crashes.
func (p *Pulse) Stop(ctx context.Context) error {
	if err := p.db.rdb.Set(ctx, workerKey(p.id), pulseStoppedValue, pulseStopped).Err(); err != nil {
		return fmt.Errorf("store: worker stopped: %w", err)
	}
	return nil
}

// steady reports whether this worker's renewals have gone unbroken for
// pulseSteady up to now.
func (p *Pulse) steady(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.since.IsZero() && now.Sub(p.last) <= 2*p.every && now.Sub(p.since) >= pulseSteady
}

// Dead reports whether the worker holder is dead: not this one, its key
// ran out, and this worker has been renewing its own long enough that
// holder would have come back. When it cannot tell yet, holder is taken
// for alive: a crash missed costs a task one run more, a crash wrongly
// counted fails an innocent task.
func (p *Pulse) Dead(ctx context.Context, holder string) (bool, error) {
	if holder == p.id || !p.steady(p.now()) {
		return false, nil
	}
	err := p.db.rdb.Get(ctx, workerKey(holder)).Err()
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, redis.Nil):
		return true, nil
	}
	return false, fmt.Errorf("store: liveness of worker %s: %w", holder, err)
}
