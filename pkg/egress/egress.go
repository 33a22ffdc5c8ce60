// Package egress decides which network addresses Easel may connect to on a
// user's behalf (the source images of editing tasks, webhook callbacks), so a
// URL cannot make it reach its own network: loopback, private ranges, cloud
// metadata and the like.
//
// The check runs on the resolved address at connect time (Dialer), so DNS
// rebinding cannot get around it; NewClient is the HTTP client built on it,
// for every request to a user's URL. The gateway also refuses literal
// addresses at create time (CheckURL), in every form a resolver or browser
// reads as an address (127.1, 0x7f000001, １２７。０。０。１, 127.0.0.1., ...:
// see hostAddr).
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/net/idna"
)

// Policy is an egress policy.
type Policy struct {
	// AllowPrivate lifts the address-range and port rules (local development
	// and tests only).
	AllowPrivate bool
	// Ports allowed; empty means 80 and 443.
	Ports []int
	// Allow lists ranges reachable even though they are private or
	// reserved (an internal image store, say). The port rule still applies.
	Allow []netip.Prefix
}

// refused lists the ranges no user URL may reach, beyond what netip's
// predicates cover (loopback, private, link-local, multicast, unspecified).
var refused = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this" network
	netip.MustParsePrefix("100.64.0.0/10"),      // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),       // TEST-NET-1
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"),    // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),     // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b:1::/48"),     // local-use IPv4/IPv6 translation
	netip.MustParsePrefix("100::/64"),           // discard-only
	netip.MustParsePrefix("2001::/23"),          // IETF protocol assignments (Teredo, ORCHID, ...)
	netip.MustParsePrefix("2001:db8::/32"),      // documentation
	netip.MustParsePrefix("fec0::/10"),          // deprecated site-local
	netip.MustParsePrefix("::/96"),              // deprecated IPv4-compatible
	netip.MustParsePrefix("::ffff:0:0:0/96"),    // SIIT translated
	netip.MustParsePrefix("5f00::/16"),          // SRv6 SIDs
	netip.MustParsePrefix("3fff::/20"),          // documentation
	netip.MustParsePrefix("ff00::/8"),           // multicast (also by IsMulticast)
	netip.MustParsePrefix("fc00::/7"),           // unique local (also by IsPrivate)
	netip.MustParsePrefix("fe80::/10"),          // link-local (also by IsLinkLocalUnicast)
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, cloud metadata (also by IsLinkLocalUnicast)
	netip.MustParsePrefix("255.255.255.255/32"), // broadcast
}

// Embedded-IPv4 forms: the IPv4 address inside is checked too.
var (
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	sixTo = netip.MustParsePrefix("2002::/16")
)

// RefusedAddr reports why addr is not a public unicast address, or "" when it
// is.
func RefusedAddr(addr netip.Addr) string {
	addr = addr.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	switch {
	case !addr.IsValid():
		return "not an IP address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsPrivate():
		return "a private address"
	case addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast():
		return "a link-local address"
	case addr.IsMulticast(), addr.IsInterfaceLocalMulticast():
		return "a multicast address"
	case addr.IsUnspecified():
		return "an unspecified address"
	}
	if addr.Is6() {
		b := addr.As16()
		if nat64.Contains(addr) {
			if why := RefusedAddr(netip.AddrFrom4([4]byte(b[12:16]))); why != "" {
				return why + " (NAT64)"
			}
		}
		if sixTo.Contains(addr) {
			if why := RefusedAddr(netip.AddrFrom4([4]byte(b[2:6]))); why != "" {
				return why + " (6to4)"
			}
		}
	}
	for _, p := range refused {
		if p.Contains(addr) {
			return "a reserved address"
		}
	}
	return ""
}

func (p Policy) portAllowed(port int) bool {
	if len(p.Ports) == 0 {
		return port == 80 || port == 443
	}
	for _, q := range p.Ports {
		if q == port {
			return true
		}
	}
	return false
}

func (p Policy) allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, pre := range p.Allow {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefixes parses a comma-separated list of CIDR ranges or addresses.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or a CIDR range", item)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or a CIDR range", item)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (p Policy) ports() string {
	if len(p.Ports) == 0 {
		return "80, 443"
	}
	s := make([]string, len(p.Ports))
	for i, q := range p.Ports {
		s[i] = strconv.Itoa(q)
	}
	return strings.Join(s, ", ")
}

// CheckAddr returns a *RefusedError when the policy forbids connecting to
// ip:port.
func (p Policy) CheckAddr(addr netip.AddrPort) error {
	if p.AllowPrivate {
		return nil
	}
	if why := RefusedAddr(addr.Addr()); why != "" && !p.allowed(addr.Addr()) {
		return &RefusedError{Addr: addr, Why: why}
	}
	if !p.portAllowed(int(addr.Port())) {
		return &RefusedError{Addr: addr, Why: fmt.Sprintf("port %d, which is not allowed", addr.Port())}
	}
	return nil
}

// CheckURL checks what can be known of a URL without resolving it: a host
// that cannot be fetched (it fails IDNA mapping), a refused port, or a host
// that denotes an IP address in a refused range. The host is normalised
// first (hostAddr): UTS #46 mapping, one trailing dot removed, then the
// inet_aton forms, so 127.1, 0x7f000001, 2130706433, 0177.0.0.1, 0,
// 127.0.0.1. and １２７。０。０。１ are all checked as the address they denote.
// A host that is a name is left to the dial-time check.
//
// It returns a message for the client ("points to a loopback address", ...),
// which never contains the host or the address, or "". AllowPrivate lifts the
// port and range rules, not the IDNA one.
func (p Policy) CheckURL(u *url.URL) string {
	addr, isAddr, err := hostAddr(u.Hostname())
	switch {
	case errors.Is(err, errIPv6):
		return "has a host that is not a valid IPv6 address"
	case err != nil:
		return "has a host name that is not valid (it fails IDNA mapping)"
	}
	if p.AllowPrivate {
		return ""
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil {
			return "has an invalid port"
		}
		port = n
	}
	if !p.portAllowed(port) {
		return fmt.Sprintf("uses port %d; allowed ports: %s", port, p.ports())
	}
	if isAddr {
		if why := RefusedAddr(addr); why != "" && !p.allowed(addr) {
			return "points to " + why
		}
		return ""
	}
	if why, a := localName(u.Hostname()); why != "" && !p.allowed(a) {
		return "points to " + why
	}
	return ""
}

// localName reports a host name that always means an address in a refused
// range, whatever DNS says: localhost and its subdomains (RFC 6761, which
// resolvers answer themselves) and the cloud metadata services' names. a
// is the address it stands for, for the Allow ranges.
func localName(host string) (why string, a netip.Addr) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if !isASCII(h) {
		if m, err := idna.Lookup.ToASCII(h); err == nil {
			h = m
		}
	}
	switch {
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return "this machine (localhost)", netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case metadataNames[h]:
		return "a cloud metadata service", netip.AddrFrom4([4]byte{169, 254, 169, 254})
	}
	return "", netip.Addr{}
}

// metadataNames are the names of the cloud metadata services (169.254.169.254
// and its kin): Google Cloud's, and AWS's instance-data names.
var metadataNames = map[string]bool{
	"metadata":                   true,
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
}

// Control is a net.Dialer Control function enforcing the policy on the
// address actually being connected to, after DNS resolution.
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress: %s: %w", address, err)
	}
	return p.CheckAddr(ap)
}

// Dialer returns a dialer that enforces the policy on every connection.
func (p Policy) Dialer(base *net.Dialer) *net.Dialer {
	d := *base
	d.Control = p.Control
	return &d
}

// RefusedError is the dial error for an address the policy refuses. Why
// says what kind of address it is, without the address itself, for users.
type RefusedError struct {
	Addr netip.AddrPort
	Why  string
}

func (e *RefusedError) Error() string { return "egress refused: " + e.Addr.String() + " is " + e.Why }
