package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// KEYS: running set. ARGV: now ms, task id, until ms, limit.
// Returns 1 when the task may run (it holds, or now took, a place), 0 when
// the account has limit generations running already.
var claimRunScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
`)

// ClaimRun takes one of an account's limit places for running generations
// for taskID until until (its deadline), and reports false when all are
// taken: the account's share of the workers is used up, and the task waits
// for a place. Claiming a place the task holds already renews it.
func (s *Store) ClaimRun(ctx context.Context, accountID, taskID string, limit int, until time.Time) (bool, error) {
	n, err := claimRunScript.Run(ctx, s.rdb, []string{runningKey(accountID)},
		s.now().UnixMilli(), taskID, until.UnixMilli(), limit).Int()
	if err != nil {
		return false, fmt.Errorf("store: claim a running place for %s: %w", taskID, err)
	}
	return n == 1, nil
}

// ReleaseRun gives a task's running place back.
func (s *Store) ReleaseRun(ctx context.Context, accountID, taskID string) error {
	if err := s.rdb.ZRem(ctx, runningKey(accountID), taskID).Err(); err != nil {
		return fmt.Errorf("store: release the running place of %s: %w", taskID, err)
	}
	return nil
}

// Running is how many generations of an account hold a place now.
func (s *Store) Running(ctx context.Context, accountID string) (int64, error) {
	n, err := s.rdb.ZCount(ctx, runningKey(accountID), fmt.Sprint(s.now().UnixMilli()), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("store: running of %s: %w", accountID, err)
	}
	return n, nil
}
