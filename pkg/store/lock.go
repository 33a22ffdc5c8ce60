package store

import (
	"context"
	"fmt"
	"time"
)

// TryLock takes the lease name for ttl if no one holds it, and reports
// whether it did. Leases are not released: they run out, so a holder that
// dies frees the lease by itself. For periodic work that one process at a
// time should do (the sweeper).
func (s *Store) TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, lockKey(name), "1", ttl).Result()
	if err != nil {
		return false, fmt.Errorf("store: lock %s: %w", name, err)
	}
	return ok, nil
}

// Unlock gives up the lease name before it runs out.
func (s *Store) Unlock(ctx context.Context, name string) error {
	if err := s.rdb.Del(ctx, lockKey(name)).Err(); err != nil {
		return fmt.Errorf("store: unlock %s: %w", name, err)
	}
	return nil
}
