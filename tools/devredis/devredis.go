// Package devredis runs an embedded Redis (miniredis) for a zero-setup local
// stack. miniredis never expires keys on its own, so a ticker advances its
// clock in step with the wall clock and the 24-hour TTLs work.
package devredis

import (
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Server is an embedded Redis.
type Server struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	done sync.WaitGroup
}

// Start listens on addr ("127.0.0.1:0" for any free port).
func Start(addr string) (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	s := &Server{m: m, stop: make(chan struct{})}
	s.done.Add(1)
	go s.tick(time.Second)
	return s, nil
}

// tick advances miniredis's TTL clock by the wall-clock time that passed.
func (s *Server) tick(every time.Duration) {
	defer s.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr is the host:port clients connect to.
func (s *Server) Addr() string { return s.m.Addr() }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.m.Addr() + "/0" }

// Close stops the server.
func (s *Server) Close() {
	close(s.stop)
	s.done.Wait()
	s.m.Close()
}
