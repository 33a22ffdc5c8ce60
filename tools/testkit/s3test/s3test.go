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
// neither found nor built.
func Start(tb testing.TB) *Server {
	tb.Helper()
	p, err := s3proc.Start(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatalf("start the S3 server: %v", err)
	}
	tb.Cleanup(p.Stop)
	return &Server{Endpoint: p.Endpoint, AccessKey: p.AccessKey, SecretKey: p.SecretKey, Proc: p}
}
