package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/task"
)

// EachTask calls fn with every task record of an account, in no particular
// order, until fn returns an error. It scans the account's keys, reading the
// records of each page in one round trip: for tools, tests and benchmarks,
// never the request path.
func (s *Store) EachTask(ctx context.Context, accountID string, fn func(*task.Task) error) error {
	prefix := taskKey(accountID, "")
	// On a cluster, SCAN lists one node's keys: ask the node that holds the
	// account's slot, where all its tasks are.
	var scanner redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, prefix)
		if err != nil {
			return fmt.Errorf("store: tasks of %s: %w", accountID, err)
		}
		scanner = node
	}
	var cursor uint64
	for {
		keys, next, err := scanner.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return fmt.Errorf("store: tasks of %s: %w", accountID, err)
		}
		records, err := s.hgetAll(ctx, keys)
		if err != nil {
			return fmt.Errorf("store: tasks of %s: %w", accountID, err)
		}
		for i, m := range records {
			if len(m) == 0 {
				continue // expired since the scan saw it
			}
			t, err := decodeTask(accountID, strings.TrimPrefix(keys[i], prefix), m)
			if err != nil {
				return err
			}
			if err := fn(t); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// TaskRecordBytes returns the memory Redis uses for a task record (MEMORY
// USAGE), for the benchmark.
func (s *Store) TaskRecordBytes(ctx context.Context, accountID, taskID string) (int64, error) {
	return s.rdb.MemoryUsage(ctx, taskKey(accountID, taskID)).Result()
}
