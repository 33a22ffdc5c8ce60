package redisproc_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/tools/testkit/redisproc"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// clusterClient is a go-redis cluster client of c, made from c.URL as a
// service would make it from its configuration.
func clusterClient(t *testing.T, c *redisproc.Cluster) *redis.ClusterClient {
	t.Helper()
	opt, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		t.Fatalf("ParseClusterURL(%q): %v", c.URL, err)
	}
	if !slices.Equal(opt.Addrs, c.Addrs) {
		t.Fatalf("ParseClusterURL(%q).Addrs = %v, want %v", c.URL, opt.Addrs, c.Addrs)
	}
	opt.DisableIdentity = true // CLIENT SETINFO is Redis 7.2+
	cc := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func nodeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := redistest.StartCluster(t)
	t.Logf("cluster of %d masters ready in %v: %s", len(c.Nodes), time.Since(start).Round(time.Millisecond), c.URL)
	if len(c.Nodes) != 3 || len(c.Addrs) != 3 {
		t.Fatalf("%d nodes, %d addrs: want 3 masters", len(c.Nodes), len(c.Addrs))
	}
	ctx := t.Context()
	cc := clusterClient(t, c)

	const keys = 100
	for i := range keys {
		if err := cc.Set(ctx, "key:"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatalf("SET key:%d: %v", i, err)
		}
	}
	for i := range keys {
		got, err := cc.Get(ctx, "key:"+strconv.Itoa(i)).Int()
		if err != nil || got != i {
			t.Fatalf("GET key:%d = %d, %v; want %d", i, got, err, i)
		}
	}

	// Every master holds a share of the keys: each serves its slot range.
	var sum int64
	for _, addr := range c.Addrs {
		n, err := nodeClient(t, addr).DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", addr, err)
		}
		if n == 0 {
			t.Errorf("master %s holds no key of %d: its slots serve nothing", addr, keys)
		}
		sum += n
	}
	if sum != keys {
		t.Errorf("DBSIZE summed over the masters = %d, want %d", sum, keys)
	}

	// "a" (slot 15495) and "b" (slot 3300) are on different masters; keys
	// with the same hash tag share a slot.
	if sa, sb := cc.ClusterKeySlot(ctx, "a").Val(), cc.ClusterKeySlot(ctx, "b").Val(); sa == sb {
		t.Fatalf("a and b both hash to slot %d", sa)
	}
	tests := []struct {
		name      string
		run       func(context.Context) error
		crossSlot bool
	}{
		{"MSET across slots", func(ctx context.Context) error { return cc.MSet(ctx, "a", 1, "b", 2).Err() }, true},
		{"SUNIONSTORE across slots", func(ctx context.Context) error { return cc.SUnionStore(ctx, "a", "b").Err() }, true},
		{"RENAME across slots", func(ctx context.Context) error {
			if err := cc.Set(ctx, "a", 1, 0).Err(); err != nil {
				return err
			}
			return cc.Rename(ctx, "a", "b").Err()
		}, true},
		{"MSET in one hash tag", func(ctx context.Context) error { return cc.MSet(ctx, "{t}a", 1, "{t}b", 2).Err() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run(ctx)
			gotCrossSlot := err != nil && strings.HasPrefix(err.Error(), "CROSSSLOT")
			if gotCrossSlot != tt.crossSlot || (!tt.crossSlot && err != nil) {
				t.Errorf("error %v; want CROSSSLOT: %v", err, tt.crossSlot)
			}
		})
	}
}

// A node restarted with Proc.Restart comes back into the cluster from its
// nodes-<port>.conf (with its slots, and no data: persistence is off).
func TestClusterNodeRestart(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := t.Context()
	cc := clusterClient(t, c)

	// A key on the first node.
	key := ""
	for i := 0; key == ""; i++ {
		k := "k" + strconv.Itoa(i)
		n, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if n.Options().Addr == c.Addrs[0] {
			key = k
		}
	}
	if err := cc.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[0].Restart(); err != nil {
		t.Fatalf("restart %s: %v", c.Addrs[0], err)
	}
	restarted := time.Now()

	// It serves its slots again once its 2 s start-up delay is over.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	for {
		if err = cc.Set(wctx, key, "after", 0).Err(); err == nil {
			break
		}
		select {
		case <-wctx.Done():
			t.Fatalf("SET %s after the restart of %s: %v", key, c.Addrs[0], err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Logf("restarted node serves again after %v", time.Since(restarted).Round(time.Millisecond))
	for _, addr := range c.Addrs {
		info, err := nodeClient(t, addr).ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Errorf("CLUSTER INFO on %s: %v\n%s", addr, err, info)
		}
	}
}

func TestStartClusterSizes(t *testing.T) {
	t.Parallel()
	for _, masters := range []int{0, -1, 16385} {
		if c, err := redisproc.StartCluster(t.TempDir(), masters); err == nil {
			c.Stop()
			t.Errorf("StartCluster with %d masters: no error", masters)
		}
	}
	// One master holds every slot.
	c, err := redisproc.StartCluster(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if want := "redis://" + c.Addrs[0]; c.URL != want {
		t.Errorf("URL = %q, want %q", c.URL, want)
	}
	cc := clusterClient(t, c)
	if err := cc.Set(t.Context(), "x", 1, 0).Err(); err != nil {
		t.Errorf("SET on a 1-master cluster: %v", err)
	}
}
