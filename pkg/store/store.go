package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/task"
)

// Store reads and writes Easel's Redis data. It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	ttl time.Duration // of finished task records
	now func() time.Time
}

// New returns a store on rdb.
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, ttl: task.ResultTTL, now: time.Now}
}

// hgetAll reads several hashes in one round trip (per slot, on a cluster).
func (s *Store) hgetAll(ctx context.Context, keys []string) ([]map[string]string, error) {
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HGetAll(ctx, k)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(keys))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}
