// Package redistest starts a private redis-server for a test, on a free
// loopback port, with persistence off, and stops it when the test ends. Tests
// never touch a Redis another process uses.
package redistest

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// Server is a running private redis-server.
type Server struct {
	Addr string // host:port
	URL  string // redis://host:port/0
	// Proc is the process: Pause, Resume, Stop, Restart it to test faults.
	Proc *redisproc.Proc
}

// Client returns a new client of the server, closed at test cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Start starts a redis-server for tb, with extra redis-server arguments. It
// fails the test, with an install hint, when redis-server is not on PATH.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	p, err := redisproc.Start(tb.TempDir(), extra...)
	if err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(p.Stop)
	return &Server{Addr: p.Addr, URL: p.URL, Proc: p}
}

// RefuseWrites makes the server a replica of a master that does not
// exist: it answers PING and reads but refuses writes, as a primary does
// once a failover demoted it. AcceptWrites undoes it.
func (s *Server) RefuseWrites(tb testing.TB) {
	tb.Helper()
	// A port nothing can listen on until the test ends: a redis-server
	// that took a port merely let go would be the master.
	_, port, _ := net.SplitHostPort(localnet.ClosedAddr(tb))
	rdb := s.Client(tb)
	if err := rdb.Do(context.Background(), "REPLICAOF", "127.0.0.1", port).Err(); err != nil {
		tb.Fatal(err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("the demoted server does not answer PING: %v", err)
	}
}

// AcceptWrites makes the server a primary again (RefuseWrites).
func (s *Server) AcceptWrites(tb testing.TB) {
	tb.Helper()
	if err := s.Client(tb).Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		tb.Fatal(err)
	}
}
