package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRefusedAddr(t *testing.T) {
	refused := []string{
		// IPv4
		"127.0.0.1", "127.255.255.254", "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255",
		"192.168.0.1", "192.168.255.255", "169.254.0.1", "169.254.169.254", "100.64.0.1", "100.127.255.254",
		"224.0.0.1", "239.255.255.250", "0.0.0.0", "0.1.2.3", "255.255.255.255", "240.0.0.1", "198.18.0.1",
		"192.0.2.1", "198.51.100.7", "203.0.113.9",
		// IPv6
		"::1", "::", "fc00::1", "fd00::1", "fd12:3456:789a::1", "fe80::1", "fe80::1%eth0", "ff02::1", "ff05::2",
		"fec0::1", "2001:db8::1", "64:ff9b:1::1", "100::1",
		// IPv4-mapped and embedded forms of refused IPv4 addresses
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:192.168.1.1", "::ffff:0.0.0.0",
		"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2002:a9fe:a9fe::1", "::127.0.0.1",
	}
	for _, s := range refused {
		a, err := netip.ParseAddr(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if RefusedAddr(a) == "" {
			t.Errorf("%s is allowed; want refused", s)
		}
	}
	allowed := []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "100.128.0.1", "172.32.0.1", "2001:4860:4860::8888", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"}
	for _, s := range allowed {
		if why := RefusedAddr(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s refused (%s); want allowed", s, why)
		}
	}
}

func TestCheckAddrPorts(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		addr string
		ok   bool
	}{
		{"public 443", Policy{}, "8.8.8.8:443", true},
		{"public 80", Policy{}, "8.8.8.8:80", true},
		{"public 8080", Policy{}, "8.8.8.8:8080", false},
		{"public 22", Policy{}, "[2606:4700::1111]:22", false},
		{"configured port", Policy{Ports: []int{8443}}, "8.8.8.8:8443", true},
		{"configured ports drop the defaults", Policy{Ports: []int{8443}}, "8.8.8.8:443", false},
		{"loopback", Policy{}, "127.0.0.1:80", false},
		{"metadata", Policy{}, "169.254.169.254:80", false},
		{"allow private: loopback", Policy{AllowPrivate: true}, "127.0.0.1:80", true},
		{"allow private: any port", Policy{AllowPrivate: true}, "10.0.0.1:6379", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.CheckAddr(netip.MustParseAddrPort(tt.addr))
			if (err == nil) != tt.ok {
				t.Errorf("CheckAddr(%s) = %v; want ok=%v", tt.addr, err, tt.ok)
			}
		})
	}
}

func TestCheckURL(t *testing.T) {
	tests := []struct {
		raw  string
		p    Policy
		want string // substring of the refusal; "" for accepted
	}{
		{"https://example.com/a.png", Policy{}, ""},
		{"http://example.com/a.png", Policy{}, ""},
		{"http://example.com:80/a.png", Policy{}, ""},
		{"https://localhost/a.png", Policy{}, ""}, // a name: checked when dialled, not here
		{"http://127.0.0.1/a.png", Policy{}, "loopback"},
		{"http://127.0.0.1:80/", Policy{}, "loopback"},
		{"http://[::1]/x", Policy{}, "loopback"},
		{"http://[::ffff:127.0.0.1]/x", Policy{}, "loopback"},
		{"http://169.254.169.254/latest/meta-data/", Policy{}, "link-local"},
		{"http://10.1.2.3/x", Policy{}, "private"},
		{"http://[fd00::1]/x", Policy{}, "private"},
		{"http://100.64.1.1/x", Policy{}, "reserved"},
		{"http://0.0.0.0/x", Policy{}, "unspecified"},
		{"http://example.com:8080/a.png", Policy{}, "port 8080"},
		{"https://example.com:8443/a.png", Policy{Ports: []int{8443}}, ""},
		{"http://8.8.8.8/a.png", Policy{}, ""},
		{"http://127.0.0.1:9000/a.png", Policy{AllowPrivate: true}, ""},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		got := tt.p.CheckURL(u)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("CheckURL(%s) = %q; want %q", tt.raw, got, tt.want)
		}
	}
}

// The dialer checks the address it actually connects to, after DNS: a name
// that resolves to loopback is refused like the literal address.
func TestDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	base := &net.Dialer{Timeout: time.Second}

	for _, addr := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		_, err := Policy{}.Dialer(base).DialContext(ctx, "tcp", addr)
		var refused *RefusedError
		if !errors.As(err, &refused) {
			t.Errorf("dial %s: %v; want a RefusedError", addr, err)
		}
	}
	// Same address with a permissive policy: it connects.
	conn, err := Policy{AllowPrivate: true}.Dialer(base).DialContext(ctx, "tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("AllowPrivate dial: %v", err)
	}
	conn.Close()
	// A public address on a refused port never gets a connection attempt.
	_, err = Policy{}.Dialer(base).DialContext(ctx, "tcp", "192.0.2.1:22")
	var refused *RefusedError
	if !errors.As(err, &refused) {
		t.Errorf("dial TEST-NET port 22: %v; want a RefusedError", err)
	}
}
