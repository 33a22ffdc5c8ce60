package localnet

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
)

// FreeAddr's addresses are loopback, below the ephemeral range, free to
// listen on, and never the same twice.
func TestFreeAddr(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		addr := FreeAddr(t)
		host, p, err := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if err != nil || host != "127.0.0.1" || port < freeLow || port >= freeHigh {
			t.Fatalf("%s: want 127.0.0.1 and a port in %d-%d", addr, freeLow, freeHigh-1)
		}
		if seen[addr] {
			t.Fatalf("%s given twice", addr)
		}
		seen[addr] = true
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		_ = ln.Close()
	}
}

// ClosedAddr refuses connections, and nobody can listen on it while the
// test runs.
func TestClosedAddr(t *testing.T) {
	addr := ClosedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Fatalf("a dial to %s connected", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a dial to %s: %v; want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		_ = ln.Close()
		t.Errorf("another listener took %s", addr)
	}
}
