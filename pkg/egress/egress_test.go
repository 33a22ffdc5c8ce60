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
		{"https://example.net/a.png", Policy{}, ""}, // a name: checked when dialled, not here
		// Names that always mean this machine or a metadata service are
		// refused here too, so that a create refuses them before any
		// charge rather than the worker after it.
		{"https://localhost/a.png", Policy{}, "this machine (localhost)"},
		{"https://LocalHost./a.png", Policy{}, "this machine (localhost)"},
		{"http://app.localhost/a.png", Policy{}, "this machine (localhost)"},
		{"http://a.b.localhost:80/a.png", Policy{}, "this machine (localhost)"},
		{"http://ｌｏｃａｌｈｏｓｔ/a.png", Policy{}, "this machine (localhost)"}, // full-width: IDNA maps it
		{"http://notlocalhost/a.png", Policy{}, ""},
		{"http://localhost.example.com/a.png", Policy{}, ""},
		{"http://metadata.google.internal/computeMetadata/v1/", Policy{}, "cloud metadata service"},
		{"http://METADATA.GOOGLE.INTERNAL./x", Policy{}, "cloud metadata service"},
		{"http://metadata/x", Policy{}, "cloud metadata service"},
		{"http://metadata.goog/x", Policy{}, "cloud metadata service"},
		{"http://instance-data.ec2.internal/latest/", Policy{}, "cloud metadata service"},
		{"http://localhost:9000/a.png", Policy{AllowPrivate: true}, ""},
		{"http://localhost/a.png", Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, ""},
		{"http://metadata.google.internal/x", Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "cloud metadata service"},
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

// Hosts that resolvers and browsers read as an IPv4 address although they are
// not in dotted-decimal form (inet_aton's shorter and octal/hex forms, a
// trailing dot, full-width digits, ideographic full stops) are checked as the
// address they denote. addr is that address, which the message must not
// contain.
func TestCheckURLHostForms(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		p    Policy
		addr string // the address the host denotes; "" for a name
		want string // substring of the refusal; "" for accepted
	}{
		// inet_aton forms of loopback.
		{"two parts", "http://127.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"three parts", "http://127.0.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"one hex part", "http://0x7f000001/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"one hex part, upper case", "http://0X7F000001/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"one decimal part", "http://2130706433/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"one octal part", "http://017700000001/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"octal first part", "http://0177.0.0.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"octal with many zeros", "http://00000177.0.0.01/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"hex parts", "http://0x7f.0x0.0x0.0x1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"hex and 24-bit parts", "http://0x7f.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"mixed bases", "http://0x7f.0.00.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"with a port", "http://127.1:80/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"https", "https://0x7f000001/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		// Zero: the unspecified address, which connects to the local host.
		{"zero", "http://0/a.png", Policy{}, "0.0.0.0", "points to an unspecified address"},
		{"hex zero", "http://0x0/a.png", Policy{}, "0.0.0.0", "points to an unspecified address"},
		{"empty hex", "http://0x/a.png", Policy{}, "0.0.0.0", "points to an unspecified address"},
		{"zero, two parts", "http://0.0/a.png", Policy{}, "0.0.0.0", "points to an unspecified address"},
		// A trailing dot (the root of the DNS), once.
		{"trailing dot", "http://127.0.0.1./a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"trailing dot and port", "http://127.0.0.1.:80/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"trailing dot, short form", "http://0x7f000001./a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		// UTS-46 mapping: full-width digits and letters, the dot variants.
		{"full-width digits", "http://１２７.０.０.１/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"full-width digits, percent-encoded", "http://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"full-width hex", "http://０ｘ７Ｆ０００００１/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"ideographic full stop", "http://127。0。0。1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"full-width full stop", "http://127．0．0．1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"half-width ideographic full stop", "http://127｡0｡0｡1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"mapped trailing dot", "http://127.0.0.1。/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"full-width short form", "http://１２７。１/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"superscript digits", "http://¹²⁷.0.0.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"mathematical digits", "http://𝟏𝟐𝟕.0.0.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"circled digits", "http://①②⑦.0.0.①/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"soft hyphen, ignored", "http://12\u00ad7.0.0.1/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"zero-width space, ignored", "http://127.0.0.1\u200b/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		// The other refused ranges, in these forms.
		{"metadata, one decimal part", "http://2852039166/latest/meta-data/", Policy{}, "169.254.169.254", "points to a link-local address"},
		{"metadata, one hex part", "http://0xA9FEA9FE/latest/meta-data/", Policy{}, "169.254.169.254", "points to a link-local address"},
		{"metadata, octal parts", "http://0251.0376.0251.0376/latest/meta-data/", Policy{}, "169.254.169.254", "points to a link-local address"},
		{"metadata, three parts", "http://169.254.43518/latest/meta-data/", Policy{}, "169.254.169.254", "points to a link-local address"},
		{"metadata, full-width", "http://１６９.２５４.１６９.２５４/latest/meta-data/", Policy{}, "169.254.169.254", "points to a link-local address"},
		{"private, two parts", "http://10.1/a.png", Policy{}, "10.0.0.1", "points to a private address"},
		{"private, hex", "http://0xc0a80001/a.png", Policy{}, "192.168.0.1", "points to a private address"},
		{"private, octal", "http://012.0.0.1/a.png", Policy{}, "10.0.0.1", "points to a private address"},
		{"private, trailing dot", "http://192.168.1.1./a.png", Policy{}, "192.168.1.1", "points to a private address"},
		{"reserved, carrier-grade NAT", "http://100.64.1/a.png", Policy{}, "100.64.0.1", "points to a reserved address"},
		{"broadcast, one part", "http://4294967295/a.png", Policy{}, "255.255.255.255", "points to a reserved address"},
		{"broadcast, hex", "http://0xffffffff/a.png", Policy{}, "255.255.255.255", "points to a reserved address"},
		// The port rule still comes first.
		{"refused port", "http://0x7f000001:8080/a.png", Policy{}, "", "uses port 8080"},
		// IPv6 literals in brackets keep working.
		{"ipv6 loopback", "http://[::1]/a.png", Policy{}, "::1", "points to a loopback address"},
		{"ipv6 mapped hex", "http://[::ffff:7f00:1]/a.png", Policy{}, "127.0.0.1", "points to a loopback address"},
		{"ipv6 link-local with zone", "http://[fe80::1%25eth0]/a.png", Policy{}, "fe80::1", "points to a link-local address"},
		{"ipv6 metadata, mapped", "http://[::ffff:a9fe:a9fe]/a.png", Policy{}, "169.254.169.254", "points to a link-local address"},
		{"ipv6 public", "http://[2606:4700::1111]/a.png", Policy{}, "2606:4700::1111", ""},
		// Public addresses in these forms are allowed.
		{"public, one hex part", "http://0x08080808/a.png", Policy{}, "8.8.8.8", ""},
		{"public, one decimal part", "http://134744072/a.png", Policy{}, "8.8.8.8", ""},
		{"public, octal parts", "http://010.010.010.010/a.png", Policy{}, "8.8.8.8", ""}, // not 10.10.10.10
		{"public, three parts", "http://8.8.2056/a.png", Policy{}, "8.8.8.8", ""},
		{"public, two parts", "http://1.65793/a.png", Policy{}, "1.1.1.1", ""},
		{"public, trailing dot", "https://8.8.8.8./a.png", Policy{}, "8.8.8.8", ""},
		{"public, full-width", "https://８.８.８.８/a.png", Policy{}, "8.8.8.8", ""},
		{"public, ideographic full stops", "https://1。1。1。1/a.png", Policy{}, "1.1.1.1", ""},
		// Out of range, or not inet_aton syntax: a name, left to the dialer.
		{"first part over 255", "http://256.1.1.1/a.png", Policy{}, "", ""},
		{"last part over 255", "http://1.2.3.256/a.png", Policy{}, "", ""},
		{"three parts, last over 16 bits", "http://127.0.65536/a.png", Policy{}, "", ""},
		{"two parts, last over 24 bits", "http://127.16777216/a.png", Policy{}, "", ""},
		{"one part over 32 bits", "http://0x100000000/a.png", Policy{}, "", ""},
		{"one decimal part over 32 bits", "http://4294967296/a.png", Policy{}, "", ""},
		{"huge part", "http://99999999999999999999999999/a.png", Policy{}, "", ""},
		{"octal part with an 8", "http://08.0.0.1/a.png", Policy{}, "", ""},
		{"bad hex digit", "http://0x7g.0.0.1/a.png", Policy{}, "", ""},
		{"five parts", "http://127.0.0.0.1/a.png", Policy{}, "", ""},
		{"empty part", "http://127..0.1/a.png", Policy{}, "", ""},
		{"two trailing dots", "http://127.0.0.1../a.png", Policy{}, "", ""},
		{"leading dot", "http://.127.0.0.1/a.png", Policy{}, "", ""},
		{"sign", "http://+127.0.0.1/a.png", Policy{}, "", ""},
		{"a name ending in digits", "http://127.0.0.1.example.com/a.png", Policy{}, "", ""},
		{"a name with an underscore", "https://my_bucket.example.com/a.png", Policy{}, "", ""},
		{"an IDN", "https://bücher.example/a.png", Policy{}, "", ""},
		{"full-width name", "https://ｅｘａｍｐｌｅ.com/a.png", Policy{}, "", ""},
		// Hosts that fail IDNA mapping cannot be fetched: refused.
		{"disallowed character", "http://a\u2488.example/a.png", Policy{}, "", "host name that is not valid"},
		{"non-ASCII with an underscore", "http://bü_cher.example/a.png", Policy{}, "", "host name that is not valid"},
		{"dot-like character", "http://127.0.0\u2488/a.png", Policy{}, "", "host name that is not valid"},
		{"small full stop", "http://127\ufe520.0.1/a.png", Policy{}, "", "host name that is not valid"},
		{"full-width colon", "http://127.0.0.1\uff1a80/a.png", Policy{}, "", "host name that is not valid"},
		{"invalid IDNA, allow private", "http://a\u2488.example/a.png", Policy{AllowPrivate: true}, "", "host name that is not valid"},
		// Allow and AllowPrivate still lift the range check.
		{"allow range", "http://127.1/a.png", Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, "127.0.0.1", ""},
		{"allow range, full-width", "http://１０.１/a.png", Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "10.0.0.1", ""},
		{"allow range, other address", "http://127.1/a.png", Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "127.0.0.1", "points to a loopback address"},
		{"allow private", "http://0x7f000001:9000/a.png", Policy{AllowPrivate: true}, "127.0.0.1", ""},
		{"allow private, full-width", "http://１２７。０。０。１:6379/a.png", Policy{AllowPrivate: true}, "127.0.0.1", ""},
		{"allow private, metadata", "http://2852039166/latest/meta-data/", Policy{AllowPrivate: true}, "169.254.169.254", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			got := tt.p.CheckURL(u)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("CheckURL(%s) = %q; want %q", tt.raw, got, tt.want)
			}
			if got == "" {
				return
			}
			if strings.Contains(got, u.Hostname()) || (tt.addr != "" && strings.Contains(got, tt.addr)) {
				t.Errorf("CheckURL(%s) = %q: the message names the host or its address", tt.raw, got)
			}
		})
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
