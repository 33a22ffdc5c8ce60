package egress

import (
	"errors"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// hostAddr's errors, for hosts that cannot be fetched.
var (
	// errIDNA: the host fails IDNA (UTS #46) mapping.
	errIDNA = errors.New("egress: host fails IDNA mapping")
	// errIPv6: a bracketed literal that is not an IPv6 address (url.Parse
	// refuses those already).
	errIPv6 = errors.New("egress: host is not a valid IPv6 address")
)

// hostAddr normalises a URL host (url.URL.Hostname: brackets removed,
// percent-encoding decoded) the way resolvers and browsers do and reports the
// IP address it denotes, if any. ok is false for a name, which only the
// dial-time check can judge.
//
// The steps:
//
//  1. A host containing a colon is an IPv6 literal (the URL had it in
//     brackets) and is parsed as such, zone included.
//  2. A host with non-ASCII characters is mapped with idna.Lookup, the UTS #46
//     profile net/http applies to the same host before dialling: full-width
//     and other compatibility digits and letters become ASCII, and the dot
//     variants (U+3002, U+FF0E, U+FF61) become ".". A host that fails the
//     mapping is errIDNA. ASCII hosts are taken as they are: UTS #46
//     only lower-cases ASCII, which parseIPv4 does not need.
//  3. One trailing dot (the DNS root) is removed.
//  4. The result is parsed in the forms inet_aton accepts (parseIPv4).
func hostAddr(host string) (addr netip.Addr, ok bool, err error) {
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Addr{}, false, errIPv6
		}
		return a, true, nil
	}
	if !isASCII(host) {
		mapped, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return netip.Addr{}, false, errIDNA
		}
		host = mapped
	}
	host = strings.TrimSuffix(host, ".")
	addr, ok = parseIPv4(host)
	return addr, ok, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// parseIPv4 parses s in the forms inet_aton(3) accepts, which resolvers
// (getaddrinfo) and browsers (the WHATWG URL standard's IPv4 parser) also
// read as an address; Go's standard library only reads dotted decimal.
//
// s holds 1 to 4 parts separated by dots. Each part is a number: hexadecimal
// after "0x" or "0X" ("0x" alone is 0), octal after a leading "0", decimal
// otherwise; no sign, no spaces, no empty part. Every part but the last is
// one byte; the last fills the remaining bytes:
//
//	a.b.c.d  each 8 bits
//	a.b.c    c is 16 bits (127.0.1 is 127.0.0.1)
//	a.b      b is 24 bits (127.1 is 127.0.0.1)
//	a        32 bits      (2130706433 and 0x7f000001 are 127.0.0.1)
//
// A value out of range makes s not an address (ok false): 256.1.1.1 and
// 0x100000000 are names, as for inet_aton.
func parseIPv4(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint32
	for i, part := range parts {
		n, ok := parseIPv4Part(part)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 0xff {
				return netip.Addr{}, false
			}
			v |= uint32(n) << (8 * (3 - i))
			continue
		}
		// The last part fills the 4-i bytes left.
		if bits := 8 * (4 - i); n >= 1<<bits {
			return netip.Addr{}, false
		}
		v |= uint32(n)
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Part parses one part of an inet_aton address. Values above
// 2^32-1 are reported as 2^32 (out of range for any part).
func parseIPv4Part(s string) (uint64, bool) {
	const over = 1 << 32
	base := uint64(10)
	switch {
	case len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		base, s = 16, s[2:]
		if s == "" {
			return 0, true // "0x" is 0, for inet_aton and browsers alike
		}
	case len(s) >= 1 && s[0] == '0':
		base = 8
	case s == "":
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d, ok := digit(s[i])
		if !ok || d >= base {
			return 0, false
		}
		if n = n*base + d; n > over {
			n = over
		}
	}
	return n, true
}

func digit(c byte) (uint64, bool) {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0'), true
	case 'a' <= c && c <= 'f':
		return uint64(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return uint64(c-'A') + 10, true
	}
	return 0, false
}
