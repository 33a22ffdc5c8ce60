package connlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// serve runs an HTTP server on a capped loopback listener.
func serve(t *testing.T, lim Limits) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := Wrap(ln, lim)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }), ReadHeaderTimeout: time.Minute, ConnState: cl.ConnState}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return cl, ln.Addr().String()
}

// halfSent opens a connection from local that sends half a request.
func halfSent(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	c := silentConn(t, local, addr)
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n"))
	return c
}

func get(t *testing.T, local, addr string) error {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// One client holding half-sent requests open gets its share and no more;
// another client is served at once. (21,000 such connections from one client
// once exhausted the gateway's file descriptors.)
func TestPerClientCap(t *testing.T) {
	other := "127.0.0.2"
	if c, err := net.Listen("tcp", other+":0"); err != nil {
		t.Skipf("no second loopback address: %v", err)
	} else {
		c.Close()
	}
	cl, addr := serve(t, Limits{PerClient: 10})
	var held []net.Conn
	for i := 0; i < 10; i++ {
		held = append(held, halfSent(t, "127.0.0.1", addr))
	}
	// The 11th is closed at once: reading it ends, not times out.
	extra := halfSent(t, "127.0.0.1", addr)
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil {
		t.Error("the connection over the client's share got an answer")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("the connection over the client's share was kept open")
	}
	if err := get(t, other, addr); err != nil {
		t.Errorf("another client: %v", err)
	}
	if cl.Refused() < 1 {
		t.Errorf("refused %d", cl.Refused())
	}
	if err := get(t, "127.0.0.1", addr); err == nil {
		t.Error("the client at its share was served")
	}
	// A closed connection frees its place.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for get(t, "127.0.0.1", addr) != nil {
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not free its place")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTotalCap(t *testing.T) {
	cl, addr := serve(t, Limits{Total: 5})
	for i := 0; i < 5; i++ {
		halfSent(t, "127.0.0.1", addr)
	}
	// Each has a request under way once the server has read its start.
	// All five accepted first: none quiet is also true of connections the
	// listener has not accepted yet, and the sixth could then take a place
	// (it did once, under load).
	waitOpen(t, cl, 5)
	waitQuiet(t, cl, 0)
	// Past the total the listener accepts nothing more (the kernel queues
	// the connection): a request gets no answer while the five stay open.
	d := net.Dialer{Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a connection past the total was served")
	}
}

// waitOpen waits until the listener holds n connections.
func waitOpen(t *testing.T, l *Listener, n int) {
	t.Helper()
	waitListener(t, l, func(open, _ int) bool { return open == n }, fmt.Sprintf("%d open", n))
}

// waitQuiet waits until n of the listener's connections have no request
// under way.
func waitQuiet(t *testing.T, l *Listener, n int) {
	t.Helper()
	waitListener(t, l, func(_, quiet int) bool { return quiet == n }, fmt.Sprintf("%d quiet", n))
}

// waitListener waits up to 5 s until ok holds of the listener's open and
// quiet connections.
func waitListener(t *testing.T, l *Listener, ok func(open, quiet int) bool, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		open, quiet := l.open, l.quiet.Len()
		l.mu.Unlock()
		if ok(open, quiet) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, %d quiet; want %s", open, quiet, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// silentConn opens a connection from local that sends nothing.
func silentConn(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closed reports whether the server closed c (a read ends), rather than
// keeping it open (a read times out) within wait.
func closed(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

func needLoopback(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		if c, err := net.Listen("tcp", a+":0"); err != nil {
			t.Skipf("no loopback address %s: %v", a, err)
		} else {
			c.Close()
		}
	}
}

// A network's addresses share its cap: many addresses of one /24, each
// under the per-address cap, cannot together fill the total; another
// network is served.
func TestPerNetworkCap(t *testing.T) {
	needLoopback(t, "127.0.0.2", "127.0.1.1")
	cl, addr := serve(t, Limits{PerClient: 3, PerNetwork: 5})
	for range 3 {
		halfSent(t, "127.0.0.1", addr)
	}
	for range 2 {
		halfSent(t, "127.0.0.2", addr)
	}
	waitQuiet(t, cl, 0)
	if extra := halfSent(t, "127.0.0.2", addr); !closed(extra, 5*time.Second) {
		t.Error("a connection over its network's share (within its address's) was kept open")
	}
	if cl.Refused() != 1 {
		t.Errorf("refused %d; want 1", cl.Refused())
	}
	if err := get(t, "127.0.1.1", addr); err != nil {
		t.Errorf("another network: %v", err)
	}
}

// At the total, a new client is served at once in the place of the
// oldest connection with no request under way: silent ones first, an idle
// keep-alive too, rather than waiting in the kernel's queue until some
// connection ends. Connections with a request under way are never closed
// for it.
func TestRoomAtTheTotal(t *testing.T) {
	needLoopback(t, "127.0.1.1")
	for _, tt := range []struct {
		name string
		hold func(t *testing.T, addr string) net.Conn
	}{
		{"silent connections", func(t *testing.T, addr string) net.Conn { return silentConn(t, "127.0.0.1", addr) }},
		{"idle keep-alives", func(t *testing.T, addr string) net.Conn {
			c := silentConn(t, "127.0.0.1", addr)
			_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return c
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cl, addr := serve(t, Limits{Total: 6})
			busy := halfSent(t, "127.0.0.1", addr)
			waitQuiet(t, cl, 0)
			var held []net.Conn
			for i := range 5 {
				held = append(held, tt.hold(t, addr))
				// In order: a keep-alive is quiet once the server has
				// marked it idle, which may come after its client read
				// the answer.
				waitQuiet(t, cl, i+1)
			}
			if err := get(t, "127.0.1.1", addr); err != nil {
				t.Fatalf("a new client at the total: %v", err)
			}
			if cl.Evicted() != 1 {
				t.Errorf("evicted %d; want 1", cl.Evicted())
			}
			if !closed(held[0], 5*time.Second) {
				t.Error("the oldest quiet connection was not the one closed")
			}
			if closed(busy, 200*time.Millisecond) {
				t.Error("a connection with a request under way was closed")
			}
		})
	}
}

// Near the total, a new connection has Limits.FirstByte to send its first
// byte; below it, none is hurried.
func TestFirstByteNearTheTotal(t *testing.T) {
	cl, addr := serve(t, Limits{Total: 8, FirstByte: 200 * time.Millisecond})
	var early, late []net.Conn
	for range 5 {
		early = append(early, silentConn(t, "127.0.0.1", addr))
	}
	waitQuiet(t, cl, 5)
	for range 2 {
		late = append(late, silentConn(t, "127.0.0.1", addr))
	}
	talker := silentConn(t, "127.0.0.1", addr) // near the total, but it talks
	waitQuiet(t, cl, 8)
	_, _ = talker.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n"))
	for i, c := range late {
		if !closed(c, 5*time.Second) {
			t.Errorf("silent connection %d accepted near the total was kept open", i)
		}
	}
	for i, c := range early {
		if closed(c, 100*time.Millisecond) {
			t.Errorf("silent connection %d accepted below three quarters of the total was closed", i)
		}
	}
	if closed(talker, 300*time.Millisecond) {
		t.Error("a connection that sent its first byte in time was closed")
	}
	if cl.TimedOut() != 2 {
		t.Errorf("timed out %d; want 2", cl.TimedOut())
	}
}

// A file the server copies to a capped connection goes to the TCP
// connection's ReadFrom (sendfile): the capped connection passes it on,
// and the bytes arrive whole.
func TestFileThroughReadFrom(t *testing.T) {
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	p := filepath.Join(t.TempDir(), "f.bin")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := Wrap(ln, Limits{Total: 10})
	var viaReadFrom atomic.Bool
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, p)
	}), ReadHeaderTimeout: time.Minute, ConnState: func(nc net.Conn, s http.ConnState) {
		if _, ok := nc.(io.ReaderFrom); ok {
			viaReadFrom.Store(true)
		}
		cl.ConnState(nc, s)
	}}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes, not the file's %d", len(got), len(data))
	}
	if !viaReadFrom.Load() {
		t.Error("the capped connection has no ReadFrom: files are copied through the process")
	}
}
