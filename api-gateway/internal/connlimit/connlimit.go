// Package connlimit caps a listener's open connections, per client address
// and in all, so that one client holding connections open (half-sent
// requests, idle keep-alives) cannot take every file descriptor the process
// has: past its share a client's new connections are closed as soon as they
// are accepted, and past the total the listener stops accepting until one
// closes (netutil.LimitListener; the kernel queues new ones meanwhile).
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/net/netutil"
)

// Listener is a listener with caps.
type Listener struct {
	net.Listener
	perClient int
	mu        sync.Mutex
	open      map[string]int
	refused   atomic.Int64
}

// Wrap caps ln at total connections (0: no total cap) and perClient per
// client address (0: no per-client cap).
func Wrap(ln net.Listener, total, perClient int) *Listener {
	if total > 0 {
		ln = netutil.LimitListener(ln, total)
	}
	return &Listener{Listener: ln, perClient: perClient, open: map[string]int{}}
}

// Refused counts the connections closed for being over a client's share.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// Accept returns the next connection within its client's share.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.perClient <= 0 {
			return c, err
		}
		addr := clientAddr(c)
		l.mu.Lock()
		if l.open[addr] >= l.perClient {
			l.mu.Unlock()
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		l.open[addr]++
		l.mu.Unlock()
		return &conn{Conn: c, l: l, addr: addr}, nil
	}
}

func (l *Listener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr] <= 1 {
		delete(l.open, addr)
		return
	}
	l.open[addr]--
}

func clientAddr(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

type conn struct {
	net.Conn
	l    *Listener
	addr string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}
