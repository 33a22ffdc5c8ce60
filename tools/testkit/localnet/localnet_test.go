package localnet

import (
	"net"
	"strconv"
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
