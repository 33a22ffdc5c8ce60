// Package localnet is what tests need of the loopback network: a listener
// on a free port, and waiting for an HTTP endpoint to answer a given status
// (a service starting, a readiness probe turning).
package localnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
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

// FreeAddr returns a loopback address nobody listens on now, for a program
// the test starts to listen on (PickAddr's); it fails the test when there
// is none.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := PickAddr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

// PickAddr returns a loopback address nobody listens on now, for a program
// about to listen on it. Its port is below the kernel's ephemeral range
// (32768 and up on Linux), where a port is never handed to an outbound
// connection or a listener on port 0: one picked from that range and let
// go could be taken, before the program binds it, by any of the
// connections opened around it. Within the range a port is picked at
// random, and never twice by one process.
func PickAddr() (string, error) {
	freeMu.Lock()
	defer freeMu.Unlock()
	for range 1000 {
		port := freeLow + rand.IntN(freeHigh-freeLow)
		if freeGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		_ = ln.Close()
		freeGiven[port] = true
		return ln.Addr().String(), nil
	}
	return "", fmt.Errorf("no free loopback port in %d-%d", freeLow, freeHigh-1)
}

// ClosedAddr returns a loopback address that refuses connections until the
// test ends: a socket bound to it that never listens, so no other program
// can take the port meanwhile (a port merely let go can be bound by another
// test's server before the dial, and then the dial answers).
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// FreeAddr's ports, below Linux's default ephemeral range.
const freeLow, freeHigh = 20000, 32768

var (
	freeMu    sync.Mutex
	freeGiven = map[int]bool{}
)

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
