package store

import (
	"context"
	"time"
)

// Probe writes a short-lived key of the instance's: it fails when Redis
// does not take writes (a read-only replica after a failover, a cluster that
// is down or that sends the key elsewhere, a full memory), not only when it
// does not answer. For readiness checks.
func (s *Store) Probe(ctx context.Context, instance string) error {
	return s.rdb.Set(ctx, probeKey(instance), s.now().UnixMilli(), 30*time.Second).Err()
}
