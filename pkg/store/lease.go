package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
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

var leaseLua = newScript[leaseKeys, leaseArgs, codeReply]("lease", map[string]int64{"HELD": 1, "TAKEN": 0})
var unleaseLua = newScript[leaseKeys, unleaseArgs, codeReply]("unlease", map[string]int64{"RELEASED": 1, "TAKEN": 0})

type leaseKeys struct {
	Lease string `lua:"lease"`
}

type leaseArgs struct {
	Holder string `lua:"holder"`
	TTL    int64  `lua:"ttl"`
}

type unleaseArgs struct {
	Holder string `lua:"holder"`
}

// TakeShards takes, or renews, the leases of shards for holder, for ttl,
// in one round trip, and returns which it holds now (another holder has
// the others).
func (l *Leases) TakeShards(ctx context.Context, holder string, shards []int, ttl time.Duration) ([]int, error) {
	calls := make([]call[leaseKeys, leaseArgs], len(shards))
	for i, n := range shards {
		calls[i] = call[leaseKeys, leaseArgs]{leaseKeys{Lease: shardLeaseKey(n)}, leaseArgs{Holder: holder, TTL: ttl.Milliseconds()}}
	}
	replies, errs, err := leaseLua.runPipelined(ctx, l.db, calls)
	if err != nil {
		return nil, fmt.Errorf("store: shard leases: %w", err)
	}
	var held []int
	for i, r := range replies {
		if errs[i] == nil && r.Code == 1 {
			held = append(held, shards[i])
		}
	}
	return held, nil
}

// ReleaseShards gives back the leases of shards holder has.
func (l *Leases) ReleaseShards(ctx context.Context, holder string, shards []int) error {
	calls := make([]call[leaseKeys, unleaseArgs], len(shards))
	for i, n := range shards {
		calls[i] = call[leaseKeys, unleaseArgs]{leaseKeys{Lease: shardLeaseKey(n)}, unleaseArgs{Holder: holder}}
	}
	if _, _, err := unleaseLua.runPipelined(ctx, l.db, calls); err != nil {
		return fmt.Errorf("store: release shard leases: %w", err)
	}
	return nil
}

// Leave takes holder off the workers that share the shards (Workers), so
// the others take its share at their next round.
func (l *Leases) Leave(ctx context.Context, holder string) error {
	if err := l.db.rdb.ZRem(ctx, recoveryWorkersKey(), holder).Err(); err != nil {
		return fmt.Errorf("store: recovery workers: %w", err)
	}
	return nil
}

// Workers records that holder is alive now and returns how many holders
// did so within ttl, itself included: the workers that share the shards.
func (l *Leases) Workers(ctx context.Context, holder string, ttl time.Duration) (int, error) {
	now := l.db.now()
	var n *redis.IntCmd
	if _, err := l.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, recoveryWorkersKey(), redis.Z{Score: float64(now.UnixMilli()), Member: holder})
		p.ZRemRangeByScore(ctx, recoveryWorkersKey(), "-inf", fmt.Sprint(now.Add(-ttl).UnixMilli()))
		n = p.ZCard(ctx, recoveryWorkersKey())
		return nil
	}); err != nil {
		return 0, fmt.Errorf("store: recovery workers: %w", err)
	}
	return int(max(n.Val(), 1)), nil
}
