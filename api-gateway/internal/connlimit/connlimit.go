// Package connlimit caps a listener's open connections, per client
// address, per client network and in all, so that clients holding
// connections open (half-sent requests, silent connections, idle
// keep-alives) cannot take every file descriptor the process has, nor keep
// a new client waiting:
//
//   - past its share a client's (or its network's) new connections are
//     closed as soon as they are accepted;
//   - near the total (three quarters of it), a new connection must send its
//     first byte within Limits.FirstByte, or it is closed;
//   - at the total, a new connection takes the place of the oldest one
//     with no request under way (silent since it was accepted, or an idle
//     keep-alive), which is closed; only when every connection has a
//     request under way does the listener stop accepting until one closes
//     (the kernel queues new ones meanwhile).
//
// The listener learns which connections have a request under way from the
// HTTP server's connection states (Listener.ConnState); without them, from
// a connection's first byte.
package connlimit

import (
	"container/list"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are a Listener's caps; 0 turns a cap off.
type Limits struct {
	// Total caps the open connections.
	Total int
	// PerClient caps one client address's.
	PerClient int
	// PerNetwork caps one client network's: a /24 (IPv4) or a /64 (IPv6),
	// the addresses one client usually has.
	PerNetwork int
	// FirstByte is how long a connection accepted near Total has to send
	// its first byte.
	FirstByte time.Duration
}

// Listener is a listener with caps.
type Listener struct {
	net.Listener
	lim      Limits
	mu       sync.Mutex
	freed    *sync.Cond // a connection closed, or the listener did
	closed   bool
	open     int
	byAddr   map[netip.Addr]int
	byNet    map[netip.Prefix]int
	quiet    list.List // of *conn with no request under way, oldest first
	refused  atomic.Int64
	evicted  atomic.Int64
	timedOut atomic.Int64
}

// Wrap caps ln.
func Wrap(ln net.Listener, lim Limits) *Listener {
	l := &Listener{Listener: ln, lim: lim, byAddr: map[netip.Addr]int{}, byNet: map[netip.Prefix]int{}}
	l.freed = sync.NewCond(&l.mu)
	return l
}

// Refused counts the connections closed for being over a client's or a
// network's share.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// Evicted counts the connections with no request under way closed to make
// room at the total.
func (l *Listener) Evicted() int64 { return l.evicted.Load() }

// TimedOut counts the connections accepted near the total closed for
// sending nothing within Limits.FirstByte.
func (l *Listener) TimedOut() int64 { return l.timedOut.Load() }

// Close closes the listener; an Accept waiting for room returns.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.freed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// Accept returns the next connection within its client's and its network's
// shares, once there is room for it.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := clientAddr(c)
		network := networkOf(addr)
		l.mu.Lock()
		if (l.lim.PerClient > 0 && l.byAddr[addr] >= l.lim.PerClient) || (l.lim.PerNetwork > 0 && l.byNet[network] >= l.lim.PerNetwork) {
			l.mu.Unlock()
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		for l.lim.Total > 0 && l.open >= l.lim.Total && !l.closed {
			if !l.evictLocked() {
				l.freed.Wait()
			}
		}
		if l.closed {
			l.mu.Unlock()
			_ = c.Close()
			return nil, net.ErrClosed
		}
		l.open++
		l.byAddr[addr]++
		l.byNet[network]++
		cc := &conn{Conn: c, l: l, addr: addr, network: network}
		cc.elem = l.quiet.PushBack(cc)
		if l.lim.Total > 0 && l.lim.FirstByte > 0 && l.open >= l.lim.Total*3/4 {
			cc.timer = time.AfterFunc(l.lim.FirstByte, cc.silent)
		}
		l.mu.Unlock()
		return cc, nil
	}
}

// evictLocked closes the oldest connection with no request under way, and
// reports whether there was one.
func (l *Listener) evictLocked() bool {
	e := l.quiet.Front()
	if e == nil {
		return false
	}
	victim := e.Value.(*conn)
	l.releaseLocked(victim)
	l.evicted.Add(1)
	go victim.Conn.Close() // its own Close finds it released
	return true
}

// releaseLocked gives back c's places, once.
func (l *Listener) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	if c.elem != nil {
		l.quiet.Remove(c.elem)
		c.elem = nil
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	l.open--
	if l.byAddr[c.addr] <= 1 {
		delete(l.byAddr, c.addr)
	} else {
		l.byAddr[c.addr]--
	}
	if l.byNet[c.network] <= 1 {
		delete(l.byNet, c.network)
	} else {
		l.byNet[c.network]--
	}
	l.freed.Signal()
}

// ConnState is an http.Server's ConnState hook: it tells the listener which
// connections have a request under way (StateActive) and which may be
// closed to make room (StateNew, StateIdle).
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	switch s {
	case http.StateActive:
		c.busy()
	case http.StateIdle:
		l.mu.Lock()
		if !c.released && c.elem == nil {
			c.elem = l.quiet.PushBack(c)
		}
		l.mu.Unlock()
	}
}

// clientAddr is c's peer address.
func clientAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// networkOf is the network of addr that one client usually holds whole.
func networkOf(addr netip.Addr) netip.Prefix {
	bits := 64
	if addr.Is4() {
		bits = 24
	}
	p, _ := addr.Prefix(bits)
	return p
}

type conn struct {
	net.Conn
	l        *Listener
	addr     netip.Addr
	network  netip.Prefix
	heard    atomic.Bool
	timer    *time.Timer
	once     sync.Once
	released bool          // guarded by l.mu
	elem     *list.Element // in l.quiet; guarded by l.mu
}

// busy marks c as having a request under way: not to be evicted, and no
// longer on its first byte's clock.
func (c *conn) busy() {
	c.l.mu.Lock()
	if c.elem != nil {
		c.l.quiet.Remove(c.elem)
		c.elem = nil
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.l.mu.Unlock()
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.heard.Load() {
		c.heard.Store(true)
		c.busy()
	}
	return n, err
}

// ReadFrom hands what the server copies from a file to the connection
// itself when it can take it (a TCP connection sends a file with sendfile,
// without copying it through the process): results are streamed so.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// writerOnly hides a writer's ReadFrom, so io.Copy does not call it back.
type writerOnly struct{ io.Writer }

// silent closes c if it has sent nothing yet.
func (c *conn) silent() {
	if c.heard.Load() {
		return
	}
	c.l.timedOut.Add(1)
	_ = c.Close()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.releaseLocked(c)
		c.l.mu.Unlock()
	})
	return err
}
