// Package localnet is what tests need of the loopback network: a listener
// on a free port, and waiting for an HTTP endpoint to answer a given status
// (a service starting, a readiness probe turning).
package localnet

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// Listen returns a TCP listener on a free loopback port, closed at the
// test's end if nothing else closed it.
func Listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	return ln
}

// WaitStatus asks url every 20 ms until it answers want, and returns that
// response (its body closed); it fails the test when within runs out.
func WaitStatus(tb testing.TB, url string, want int, within time.Duration) *http.Response {
	tb.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return resp
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not %d within %s (last: %v %v)", url, want, within, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// HoldsStatus asks url every 50 ms for d and fails the test at the first
// answer that is not want: a state that must last, checked all along
// rather than once after a wait.
func HoldsStatus(tb testing.TB, url string, want int, d time.Duration) {
	tb.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		resp, err := client.Get(url)
		if err != nil {
			tb.Fatalf("%s: %v; want %d throughout %s", url, err, want, d)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			tb.Fatalf("%s: %d; want %d throughout %s", url, resp.StatusCode, want, d)
		}
	}
}
