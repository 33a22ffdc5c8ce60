package redistest

import (
	"testing"

	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// StartCluster starts a 3-master Redis Cluster for tb (about 2 s: start it
// early, or once in TestMain through redisproc.StartCluster), with extra
// redis-server arguments for every node, and stops it at cleanup. Connect
// with redis.ParseClusterURL(c.URL) and redis.NewClusterClient. In -short
// runs it skips tb instead: make test-short leaves clusters to make test.
func StartCluster(tb testing.TB, extra ...string) *redisproc.Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("no Redis Cluster in -short runs (make test starts one)")
	}
	c, err := redisproc.StartCluster(tb.TempDir(), 3, extra...)
	if err != nil {
		tb.Fatalf("start redis cluster: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// StartSentinel starts a primary, its replicas (1 to 4) and three sentinels
// for tb, with extra redis-server arguments for every data node, and stops
// them at cleanup. Connect with redis.ParseFailoverURL(s.URL) and
// redis.NewFailoverClient. In -short runs it skips tb instead.
func StartSentinel(tb testing.TB, replicas int, extra ...string) *redisproc.Sentinel {
	tb.Helper()
	if testing.Short() {
		tb.Skip("no Redis Sentinel in -short runs (make test starts one)")
	}
	s, err := redisproc.StartSentinel(tb.TempDir(), replicas, extra...)
	if err != nil {
		tb.Fatalf("start redis sentinel: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}
