package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Probe checks that Redis takes writes, not only that it answers: it fails
// on a read-only replica after a failover, a full memory, a cluster that is
// down, or one that keeps redirecting. On a cluster it checks every master:
// each must say the cluster is ok and take a write of a key in its own
// slots. For readiness checks.
func (db *DB) Probe(ctx context.Context, instance string) error {
	cc, ok := db.rdb.(*redis.ClusterClient)
	if !ok {
		return db.rdb.Set(ctx, probeKey("", instance), db.now().UnixMilli(), 30*time.Second).Err()
	}
	tags, err := db.probeTags(ctx, cc)
	if err != nil {
		return err
	}
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return errors.New("CLUSTERDOWN: a master says the cluster is not ok")
		}
		return nil
	}); err != nil {
		return err
	}
	for _, tag := range tags {
		if err := cc.Set(ctx, probeKey(tag, instance), db.now().UnixMilli(), 30*time.Second).Err(); err != nil {
			return err
		}
	}
	return nil
}

// probeTags are hash tags whose slots cover every master of the cluster,
// one a master, found with CLUSTER KEYSLOT and kept until the slots move.
type probeTags struct {
	mu     sync.Mutex
	layout string
	tags   []string
}

func (db *DB) probeTags(ctx context.Context, cc *redis.ClusterClient) ([]string, error) {
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	// The slots alone: a shard's nodes carry replication offsets, which
	// move all the time.
	slots := make([][]redis.SlotRange, len(shards))
	for i, sh := range shards {
		slots[i] = sh.Slots
	}
	layout := fmt.Sprint(slots)
	db.probes.mu.Lock()
	defer db.probes.mu.Unlock()
	if db.probes.layout == layout {
		return db.probes.tags, nil
	}
	// 256 candidates, their slots computed by the server in one round trip:
	// a master owning a third of the slots misses all of them with
	// probability (2/3)^256.
	const candidates = 256
	cmds := make([]*redis.IntCmd, candidates)
	if _, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.ClusterKeySlot(ctx, fmt.Sprintf("p%d", i))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var tags []string
	for _, ranges := range slots {
		i := slices.IndexFunc(cmds, func(c *redis.IntCmd) bool {
			slot := c.Val()
			return slices.ContainsFunc(ranges, func(r redis.SlotRange) bool { return slot >= r.Start && slot <= r.End })
		})
		if i >= 0 {
			tags = append(tags, fmt.Sprintf("p%d", i))
		}
	}
	db.probes.layout, db.probes.tags = layout, tags
	return tags, nil
}
