package account

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

func TestKeyAdmit(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	std := &catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}
	pro := &catalog.Model{ID: "lumen-3-pro-image-preview", Tier: catalog.Pro}
	limited := &Key{Prefix: "esk_AbCd1234", KeyLimits: KeyLimits{
		Models:     []catalog.Tier{catalog.Standard},
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		ExpiresAt:  now.Add(time.Hour),
	}}
	from := func(addr string) func() string { return func() string { return addr } }
	for _, tt := range []struct {
		name string
		key  *Key
		use  KeyUse
		code apperr.Code // "" for admitted
		msg  string
	}{
		{"a key without limits, anything", &Key{}, KeyUse{Now: now, Addr: from("192.0.2.1"), Model: pro}, "", ""},
		{"before its expiry, from its network, its model", limited, KeyUse{Now: now, Addr: from("10.1.2.3"), Model: std}, "", ""},
		{"at its expiry", limited, KeyUse{Now: now.Add(time.Hour)}, apperr.Unauthenticated, "API key esk_AbCd1234 expired at 2026-11-27T13:00:00Z"},
		{"from another address", limited, KeyUse{Now: now, Addr: from("192.0.2.1")}, apperr.Forbidden, "may not be used from this address (192.0.2.1): its owner limited the addresses it is accepted from"},
		{"from no address the rules could find", limited, KeyUse{Addr: from("")}, apperr.Forbidden, "this address (unknown)"},
		{"another model", limited, KeyUse{Model: pro}, apperr.Forbidden, "may not use model lumen-3-pro-image-preview: it is limited to standard"},
		{"nothing in question", limited, KeyUse{}, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.key.Admit(tt.use)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if apperr.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v (%s); want %s with %q", err, apperr.CodeOf(err), tt.code, tt.msg)
			}
			if strings.Contains(err.Error(), "10.0.0.0") {
				t.Errorf("%v names the networks the key is accepted from", err)
			}
		})
	}
}

// An address is looked for only for a key limited to some: the common
// request finds none.
func TestKeyAdmitFindsNoAddressForAnyKey(t *testing.T) {
	called := false
	err := (&Key{}).Admit(KeyUse{Addr: func() string { called = true; return "" }})
	if err != nil || called {
		t.Errorf("Admit: %v, address looked for: %t", err, called)
	}
}
