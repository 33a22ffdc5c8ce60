package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// The Redis deployments the benchmark runs on (--redis).
const (
	redisSingle  = "single"  // one private redis-server
	redisCluster = "cluster" // a private Redis Cluster of clusterMasters masters
)

// clusterMasters is the size of the --redis cluster deployment.
const clusterMasters = 3

// benchRedis is the private Redis the benchmark starts and runs on: one
// redis-server or a local Redis Cluster, never a Redis another process uses.
type benchRedis struct {
	kind  string   // redisSingle or redisCluster
	url   string   // EASEL_REDIS_URL and the baselines' URL: redisconn.KindOf reads its kind
	addrs []string // host:port of each server (each master, on a cluster)
	pids  []int    // their processes, in the order of addrs
	stop  func()
}

// startRedis starts the Redis of kind with its files under dir.
func startRedis(dir, kind string) (*benchRedis, error) {
	switch kind {
	case redisSingle:
		p, err := redisproc.Start(dir)
		if err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		return &benchRedis{kind: kind, url: p.URL, addrs: []string{p.Addr}, pids: []int{p.Pid()}, stop: p.Stop}, nil
	case redisCluster:
		c, err := redisproc.StartCluster(dir, clusterMasters)
		if err != nil {
			return nil, fmt.Errorf("start a %d-master redis cluster: %w", clusterMasters, err)
		}
		r := &benchRedis{kind: kind, url: c.URL, addrs: c.Addrs, stop: c.Stop}
		for _, n := range c.Nodes {
			r.pids = append(r.pids, n.Pid())
		}
		return r, nil
	}
	return nil, fmt.Errorf("--redis %q: want %s or %s", kind, redisSingle, redisCluster)
}

// client is the benchmark's own client of the Redis, made as the services
// make theirs (redisconn): a *redis.Client of the one server or a
// *redis.ClusterClient of the cluster.
func (r *benchRedis) client(ctx context.Context) (redis.UniversalClient, error) {
	return redisconn.Open(ctx, r.url)
}

// cpuPids are the processes whose CPU is Redis's, for a cpuMeter: "redis",
// the sum over every server, and on a cluster each master on its own as
// "redis@host:port" too.
func (r *benchRedis) cpuPids() map[string][]int {
	m := map[string][]int{"redis": r.pids}
	if r.kind == redisCluster {
		for i, a := range r.addrs {
			m["redis@"+a] = []int{r.pids[i]}
		}
	}
	return m
}

// eachServer calls fn on the one server, or concurrently on every master of
// a cluster.
func eachServer(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("redis client %T: want *redis.Client or *redis.ClusterClient", rdb)
}

// flushAll empties every server (every master of a cluster). Only for the
// benchmark's own private servers, started by startRedis.
func flushAll(ctx context.Context, rdb redis.UniversalClient) error {
	err := eachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		if err := c.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("FLUSHALL on %s: %w", c.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("empty redis: %w", err)
	}
	return nil
}

// usedMemory is INFO memory's used_memory, summed over every master of a
// cluster.
func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	var total atomic.Int64
	err := eachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("INFO memory on %s: %w", c.Options().Addr, err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return fmt.Errorf("INFO memory on %s: used_memory %q: %w", c.Options().Addr, v, err)
				}
				total.Add(n)
				return nil
			}
		}
		return fmt.Errorf("INFO memory on %s: no used_memory", c.Options().Addr)
	})
	if err != nil {
		return 0, err
	}
	return total.Load(), nil
}
