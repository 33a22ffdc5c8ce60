package egress

import (
	"errors"
	"net/netip"
	"testing"
)

// The inet_aton forms, with the exact address each denotes.
func TestParseIPv4(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" for not an address
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0x7f.0x00.0x00.0x01", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"00", "0.0.0.0"},
		{"0.0", "0.0.0.0"},
		{"010.010.010.010", "8.8.8.8"},
		{"0x08080808", "8.8.8.8"},
		{"8.8.2056", "8.8.8.8"},
		{"8.526344", "8.8.8.8"},
		{"169.254.43518", "169.254.169.254"},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
		{"1.2.3.4", "1.2.3.4"},
		{"1.2.772", "1.2.3.4"},
		{"1.131844", "1.2.3.4"},
		{"16909060", "1.2.3.4"},
		{"255.255.255.255", "255.255.255.255"},
		{"4294967295", "255.255.255.255"},
		{"0xffffffff", "255.255.255.255"},
		{"255.16777215", "255.255.255.255"},
		{"255.255.65535", "255.255.255.255"},
		{"0x00000000000000007f000001", "127.0.0.1"},
		// Out of range.
		{"256.1.1.1", ""},
		{"1.256.1.1", ""},
		{"1.1.256.1", ""},
		{"1.1.1.256", ""},
		{"1.1.65536", ""},
		{"1.16777216", ""},
		{"4294967296", ""},
		{"0x100000000", ""},
		{"040000000000", ""},
		{"99999999999999999999999999999999", ""},
		{"0xffffffffffffffffffffffff", ""},
		// Not the syntax.
		{"", ""},
		{".", ""},
		{"1.2.3.4.5", ""},
		{"1..2", ""},
		{".1.2.3", ""},
		{"1.2.3.", ""}, // hostAddr removes one trailing dot before parsing
		{"08", ""},
		{"09.1", ""},
		{"0x1g", ""},
		{"0xx1", ""},
		{"+1", ""},
		{"-1", ""},
		{" 1", ""},
		{"1 ", ""},
		{"1e3", ""},
		{"a", ""},
		{"example.com", ""},
		{"１２７.0.0.1", ""}, // hostAddr maps first
	}
	for _, tt := range tests {
		got, ok := parseIPv4(tt.in)
		switch {
		case tt.want == "" && ok:
			t.Errorf("parseIPv4(%q) = %s; want not an address", tt.in, got)
		case tt.want != "" && (!ok || got != netip.MustParseAddr(tt.want)):
			t.Errorf("parseIPv4(%q) = %s, %v; want %s", tt.in, got, ok, tt.want)
		}
	}
}

// hostAddr: IPv6 literals, IDNA mapping, the trailing dot, then parseIPv4.
func TestHostAddr(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" for a name
		err  error
	}{
		{"127.0.0.1", "127.0.0.1", nil},
		{"127.0.0.1.", "127.0.0.1", nil},
		{"127.1.", "127.0.0.1", nil},
		{"127.0.0.1..", "", nil},
		{"１２７.０.０.１", "127.0.0.1", nil},
		{"１２７．０．０．１．", "127.0.0.1", nil},
		{"127。0。0。1", "127.0.0.1", nil},
		{"127｡0｡0｡1", "127.0.0.1", nil},
		{"０ｘ７ｆ０００００１", "127.0.0.1", nil},
		{"８.８.８.８", "8.8.8.8", nil},
		{"::1", "::1", nil},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1", nil},
		{"fe80::1%eth0", "fe80::1%eth0", nil},
		{"example.com", "", nil},
		{"example.com.", "", nil},
		{"my_bucket.example.com", "", nil},
		{"bücher.example", "", nil},
		{"256.1.1.1", "", nil},
		{"a\u2488.example", "", errIDNA},
		{"127.0.0\u2488", "", errIDNA},
		{"bü_cher.example", "", errIDNA},
		{"foo:bar", "", errIPv6},
		{"::ffff:127.1", "", errIPv6},
	}
	for _, tt := range tests {
		got, ok, err := hostAddr(tt.in)
		if !errors.Is(err, tt.err) {
			t.Errorf("hostAddr(%q): error %v; want %v", tt.in, err, tt.err)
			continue
		}
		switch {
		case tt.want == "" && ok:
			t.Errorf("hostAddr(%q) = %s; want a name", tt.in, got)
		case tt.want != "" && (!ok || got != netip.MustParseAddr(tt.want)):
			t.Errorf("hostAddr(%q) = %s, %v; want %s", tt.in, got, ok, tt.want)
		}
	}
}
