package connlimit

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"
)

// serve runs an HTTP server on a capped loopback listener.
func serve(t *testing.T, total, perClient int) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := Wrap(ln, total, perClient)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return cl, ln.Addr().String()
}

// halfSent opens a connection from local that sends half a request.
func halfSent(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
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
	cl, addr := serve(t, 0, 10)
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
	_, addr := serve(t, 5, 0)
	for i := 0; i < 5; i++ {
		halfSent(t, "127.0.0.1", addr)
	}
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
