package store

import (
	"context"
	"fmt"
	"time"
)

// Leases are named leases one process at a time holds, for periodic work
// that one process should do (the recoveries).
type Leases struct{ db *DB }

// NewLeases returns the leases on db.
func NewLeases(db *DB) *Leases { return &Leases{db: db} }

// TryLock takes the lease name for ttl if no one holds it, and reports
// whether it did. Leases are not released: they run out, so a holder that
// dies frees the lease by itself.
func (l *Leases) TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	ok, err := l.db.rdb.SetNX(ctx, lockKey(name), "1", ttl).Result()
	if err != nil {
		return false, fmt.Errorf("store: lock %s: %w", name, err)
	}
	return ok, nil
}

// Unlock gives up the lease name before it runs out.
func (l *Leases) Unlock(ctx context.Context, name string) error {
	if err := l.db.rdb.Del(ctx, lockKey(name)).Err(); err != nil {
		return fmt.Errorf("store: unlock %s: %w", name, err)
	}
	return nil
}
