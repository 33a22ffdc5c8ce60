// Package redistest starts a private redis-server for a test, on a free
// loopback port, with persistence off, and stops it when the test ends. Tests
// never touch a Redis another process uses.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running private redis-server.
type Server struct {
	Addr string // host:port
	URL  string // redis://host:port/0
}

// Client returns a new client of the server, closed at test cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Start starts a redis-server for tb. It fails the test, with an install
// hint, when redis-server is not on PATH.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found on PATH: install it (Debian: apt-get install redis-server); .ci/run does")
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(tb, bin)
		if err == nil {
			return s
		}
		lastErr = err
	}
	tb.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func start(tb testing.TB, bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := tb.TempDir()
	var out safeBuffer
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
	)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("redis-server exited (%v): %s", err, out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := rdb.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			// Make sure the server answering is ours, not another process
			// that took the port between freePort and the bind.
			if !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				_ = cmd.Process.Kill()
				<-exited
				return nil, fmt.Errorf("port %d is taken by another Redis", port)
			}
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("redis-server did not answer within 10s: %v; output: %s", err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return &Server{Addr: addr, URL: "redis://" + addr + "/0"}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
