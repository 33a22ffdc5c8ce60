package e2e

import (
	"os"
	"testing"

	"github.com/easelhq/easel/tools/testkit/redistest"
)

// testRedisURL starts the Redis the suite runs on: one redis-server, or,
// with EASEL_E2E_REDIS=cluster, a 3-master Redis Cluster (make test runs the
// core flows both ways).
func testRedisURL(t *testing.T) string {
	t.Helper()
	switch os.Getenv("EASEL_E2E_REDIS") {
	case "cluster":
		return redistest.StartCluster(t).URL
	case "", "single":
		return redistest.Start(t).URL
	}
	t.Fatalf("EASEL_E2E_REDIS=%q: want single or cluster", os.Getenv("EASEL_E2E_REDIS"))
	return ""
}
