// Package s3test starts a private S3 server (MinIO, see s3proc) for a test,
// on a free loopback port, and stops it when the test ends.
package s3test

import (
	"context"
	"testing"

	"github.com/easelhq/easel/tools/testkit/s3proc"
)

// Server is a running private S3 server.
type Server struct {
	Endpoint  string // http://127.0.0.1:port; buckets are addressed path-style
	AccessKey string
	SecretKey string
	Proc      *s3proc.Proc
}

// Start starts an S3 server for tb. It fails the test when MinIO can be
// neither found nor built. With -short (make test-short) it builds nothing:
// the test is skipped unless MinIO is already built, which make test does
// first (cmd/minio-install).
func Start(tb testing.TB) *Server {
	tb.Helper()
	SkipShortUnbuilt(tb)
	p, err := s3proc.Start(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatalf("start the S3 server: %v", err)
	}
	tb.Cleanup(p.Stop)
	return &Server{Endpoint: p.Endpoint, AccessKey: p.AccessKey, SecretKey: p.SecretKey, Proc: p}
}

// SkipShortUnbuilt skips tb under -short when MinIO is not built yet: a
// short run never spends minutes building a server for one package's S3
// tests. make test builds MinIO before its tests, so there they always run.
func SkipShortUnbuilt(tb testing.TB) {
	tb.Helper()
	if !testing.Short() {
		return
	}
	if _, ok := s3proc.Built(); !ok {
		tb.Skipf("MinIO is not built and -short builds nothing (make test builds it: go run ./tools/testkit/cmd/minio-install)")
	}
}
