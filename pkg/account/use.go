package account

import (
	"net/netip"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// KeyUse is one use of an API key, as far as the request is known: when
// it was made, from where and, once its body is read, for which model.
// The gateway admits a request's key in two steps, each rule once: the
// time and the address when it authenticates (before the rate limit),
// the model once a create names it.
type KeyUse struct {
	// Now is the request's time (zero: the expiry is not in question).
	Now time.Time
	// Addr finds the client's address, as the gateway's trusted-proxy
	// rules found it. It is called only for a key limited to some
	// addresses, so that the common request finds no address (nil: the
	// address is not in question).
	Addr func() string
	// Model is the model a create asks for (nil: not in question).
	Model *catalog.Model
}

// Admit decides whether the key may be used as u says: the one place
// that reads a key's limits for a request. A key past its expiry is
// apperr.Unauthenticated; from an address it is not accepted from, or for
// a model it may not use, apperr.Forbidden. Its spend limit is not here:
// it is checked where the key is charged, atomically with the charge
// (store.Tasks.Create), so racing creates never pass it together.
func (k *Key) Admit(u KeyUse) error {
	if !u.Now.IsZero() && k.Expired(u.Now) {
		return apperr.Errorf(apperr.Unauthenticated, "API key %s expired at %s", k.Prefix, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if u.Addr != nil && len(k.AllowedIPs) > 0 {
		if addr := u.Addr(); !k.AllowsAddr(addr) {
			if _, err := netip.ParseAddr(addr); err != nil {
				addr = "unknown"
			}
			// The networks it is accepted from are not said: a leaked key's
			// holder learns nothing of where to use it from.
			return apperr.Errorf(apperr.Forbidden, "API key %s may not be used from this address (%s): its owner limited the addresses it is accepted from", k.Prefix, addr)
		}
	}
	if u.Model != nil && !k.AllowsModel(u.Model.Tier) {
		return apperr.Errorf(apperr.Forbidden, "API key %s may not use model %s: it is limited to %s", k.Prefix, u.Model.ID, joinTiers(k.Models))
	}
	return nil
}

func joinTiers(ts []catalog.Tier) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}
