package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/redisconn"
)

// TestRedisEnv sets the benchmark's environment up on each Redis it runs
// on: the private servers start, the client is of the right kind, fresh
// empties every server (on a cluster, every master: keys of all slots) and
// makes an account whose keys authenticate, and INFO memory and the CPU
// meter count every node.
func TestRedisEnv(t *testing.T) {
	for _, tt := range []struct {
		kind   string
		nodes  int
		client string
		url    redisconn.Kind
	}{
		{redisSingle, 1, "*redis.Client", redisconn.Single},
		{redisCluster, clusterMasters, "*redis.ClusterClient", redisconn.Cluster},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			ctx := context.Background()
			r, err := startRedis(t.TempDir(), tt.kind)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.stop)
			if len(r.pids) != tt.nodes || len(r.addrs) != tt.nodes {
				t.Fatalf("%d pids, %d addresses; want %d", len(r.pids), len(r.addrs), tt.nodes)
			}
			// The services and the baselines read the URL with redisconn.
			if k, err := redisconn.KindOf(r.url); err != nil || k != tt.url {
				t.Errorf("redisconn.KindOf(%q) = %q, %v; want %q", r.url, k, err, tt.url)
			}
			rdb, err := r.client(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			if got := fmt.Sprintf("%T", rdb); got != tt.client {
				t.Fatalf("client %s; want %s", got, tt.client)
			}

			// Leftovers of an earlier run, on every node.
			const junk = 300
			for i := range junk {
				if err := rdb.Set(ctx, "junk:"+strconv.Itoa(i), "x", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if sizes := dbSizes(t, r); len(sizes) != tt.nodes || minOf(sizes) == 0 {
				t.Fatalf("keys per node %v: want some on each of %d", sizes, tt.nodes)
			}

			e := &env{redis: r, rdb: rdb}
			if err := e.fresh(ctx); err != nil {
				t.Fatal(err)
			}
			first := e.acct
			for i := range junk {
				if n, err := rdb.Exists(ctx, "junk:"+strconv.Itoa(i)).Result(); err != nil || n != 0 {
					t.Fatalf("junk:%d after fresh: exists %d, %v", i, n, err)
				}
			}
			st := e.accounts()
			if len(e.keys) != 4 {
				t.Fatalf("%d keys; want 4", len(e.keys))
			}
			for _, k := range e.keys {
				a, err := st.Authenticate(ctx, k)
				if err != nil || a.ID != e.acct {
					t.Fatalf("key of the fresh account: %v, %v", a, err)
				}
			}
			firstKeys := e.keys

			// A second fresh leaves nothing of the first.
			if err := e.fresh(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Get(ctx, first); apperr.CodeOf(err) != apperr.NotFound {
				t.Errorf("the first account after a second fresh: %v; want not found", err)
			}
			for _, k := range firstKeys {
				if _, err := st.Authenticate(ctx, k); !errors.Is(err, apperr.ErrUnknownKey) {
					t.Errorf("a key of the first account after a second fresh: %v; want unknown", err)
				}
			}

			// used_memory is summed over the nodes.
			total, err := usedMemory(ctx, rdb)
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, a := range r.addrs {
				sum += nodeUsedMemory(t, a)
			}
			if total < sum*9/10 || total > sum*11/10 {
				t.Errorf("used_memory %d; the nodes' own figures add up to %d", total, sum)
			}

			// The CPU meter counts every node's process.
			pids := r.cpuPids()
			if got := pids["redis"]; len(got) != tt.nodes {
				t.Errorf("redis pids %v; want %d", got, tt.nodes)
			}
			if tt.kind == redisCluster {
				for i, a := range r.addrs {
					if got := pids["redis@"+a]; len(got) != 1 || got[0] != r.pids[i] {
						t.Errorf("pids of %s: %v; want [%d]", a, got, r.pids[i])
					}
				}
			} else if len(pids) != 1 {
				t.Errorf("single server: cpu pids %v; want only redis", pids)
			}
			m := newCPUMeter(pids)
			// Some work on every node, until it shows: CPU time is read in
			// clock ticks (10 ms), which 2,000 commands may not fill on a
			// fast machine.
			work := func() {
				for i := range 2000 {
					_ = rdb.Incr(ctx, "n:"+strconv.Itoa(i%50)).Err()
				}
			}
			work()
			cpu := m.perOp(1)
			for n := 1; cpu["redis"] <= 0 && n < 10; n++ {
				work()
				cpu = m.perOp(1)
			}
			var parts float64
			for name, v := range cpu {
				if v < 0 {
					t.Errorf("cpu %s = %v", name, v)
				}
				if strings.HasPrefix(name, "redis@") {
					parts += v
				}
			}
			if cpu["redis"] <= 0 {
				t.Errorf("redis cpu %v after 20,000 commands", cpu["redis"])
			}
			if tt.kind == redisCluster && parts != cpu["redis"] {
				// The meter reads each name at its own time: allow a tick per node.
				if d := parts - cpu["redis"]; d > float64(tt.nodes*10_000) || d < -float64(tt.nodes*10_000) {
					t.Errorf("redis cpu %v µs, the nodes' parts %v µs", cpu["redis"], parts)
				}
			}
		})
	}
}

// dbSizes is each server's DBSIZE, asked of the server itself.
func dbSizes(t *testing.T, r *benchRedis) []int64 {
	t.Helper()
	var out []int64
	for _, a := range r.addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true})
		n, err := c.DBSize(context.Background()).Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", a, err)
		}
		out = append(out, n)
	}
	return out
}

func nodeUsedMemory(t *testing.T, addr string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	n, err := usedMemory(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func minOf(v []int64) int64 {
	m := v[0]
	for _, x := range v[1:] {
		m = min(m, x)
	}
	return m
}

func TestStartRedisRefusesOtherKinds(t *testing.T) {
	if _, err := startRedis(t.TempDir(), "sentinel"); err == nil {
		t.Error("startRedis accepted sentinel")
	}
	if err := run(context.Background(), []string{"--redis", "clustr"}); err == nil || !strings.Contains(err.Error(), "--redis") {
		t.Errorf("run --redis clustr: %v", err)
	}
}

func TestCommandLine(t *testing.T) {
	o := options{rounds: 3, duration: 8 * time.Second, concurrency: 64, drain: 10000, only: defaultOnly, redis: redisSingle}
	// make bench's own command line is what it always was.
	if got, want := commandLine(o), "make bench (easelbench --rounds 3 --duration 8s --concurrency 64 --drain 10000)"; got != want {
		t.Errorf("commandLine = %q; want %q", got, want)
	}
	o.redis, o.only = redisCluster, "http,drain"
	if got, want := commandLine(o), "make bench (easelbench --rounds 3 --duration 8s --concurrency 64 --drain 10000 --only http,drain --redis cluster)"; got != want {
		t.Errorf("commandLine = %q; want %q", got, want)
	}
}

func TestCPUTimesSums(t *testing.T) {
	one, err := cpuTimes([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	two, err := cpuTimes([]int{os.Getpid(), os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if two < 2*one {
		t.Errorf("the same process twice: %v; once %v", two, one)
	}
	if _, err := cpuTimes([]int{os.Getpid(), 1 << 30}); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
