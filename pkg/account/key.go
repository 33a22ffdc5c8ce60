package account

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/catalog"
)

// API keys are "esk_" followed by 40 random base62 characters. Only their
// SHA-256 is kept, with a short visible prefix for listing; the key itself
// is shown once, when it is made.

// KeyPrefix starts every API key.
const KeyPrefix = "esk_"

const (
	keyRandLen     = 40
	maxPresentable = 256 // the longest credential worth hashing
	base62         = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	base36         = "0123456789abcdefghijklmnopqrstuvwxyz"
)

// VisiblePrefix is how many characters of a key are kept and listed:
// "esk_AbCd1234".
const VisiblePrefix = len(KeyPrefix) + 8

// Key describes an API key; the key itself is never kept.
type Key struct {
	Prefix    string    `json:"prefix"`
	AccountID string    `json:"account_id"`
	Name      string    `json:"name,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// LastUsedAt is when a gateway last looked the key up (to within a
	// minute, and a gateway's auth cache lifetime); zero: never.
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
	Revoked    bool      `json:"revoked"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
	// Spent is the credits the key's tasks cost, refunds deducted.
	Spent int64 `json:"spent"`
	KeyLimits
}

// KeyLimits are what one key may do, on top of its account's limits;
// zero values are no limit.
type KeyLimits struct {
	// Models: the tiers the key may create tasks with (empty: the
	// account's).
	Models []catalog.Tier `json:"models,omitempty"`
	// AllowedIPs: the client addresses the key is accepted from (empty:
	// any).
	AllowedIPs []netip.Prefix `json:"allowed_ips,omitempty"`
	// ExpiresAt: from then on the key is refused, 401.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// SpendLimit: a create that would take Spent past it is refused, 402.
	SpendLimit int64 `json:"spend_limit,omitempty"`
}

// Key statuses, as listed.
const (
	KeyActive  = "active"
	KeyRevoked = "revoked"
	KeyExpired = "expired"
)

// Status is the key's state at now.
func (k *Key) Status(now time.Time) string {
	switch {
	case k.Revoked:
		return KeyRevoked
	case k.Expired(now):
		return KeyExpired
	}
	return KeyActive
}

// Expired reports whether the key has expired at now.
func (l KeyLimits) Expired(now time.Time) bool {
	return !l.ExpiresAt.IsZero() && !now.Before(l.ExpiresAt)
}

// AllowsModel reports whether the key may use a model of tier t.
func (l KeyLimits) AllowsModel(t catalog.Tier) bool {
	if len(l.Models) == 0 {
		return true
	}
	for _, m := range l.Models {
		if m == t {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether the key is accepted from the client address
// addr (as the gateway's trusted-proxy rules found it).
func (l KeyLimits) AllowsAddr(addr string) bool {
	if len(l.AllowedIPs) == 0 {
		return true
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ip = ip.Unmap().WithZone("")
	for _, p := range l.AllowedIPs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Limits on the limits.
const (
	// MaxKeys bounds an account's keys, revoked ones included (they stay
	// listed); MaxActiveKeys those that work.
	MaxKeys       = 1000
	MaxActiveKeys = 100
	MaxKeyName    = 100
	MaxAllowedIPs = 50
	MaxSpendLimit = 1e12
)

// CheckKeyName trims a key's name and checks its length.
func CheckKeyName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if len(name) > MaxKeyName {
		return "", invalid("a key's name must be at most %d characters", MaxKeyName)
	}
	for _, r := range name {
		if r < ' ' || r == 0x7f {
			return "", invalid("a key's name must not hold control characters")
		}
	}
	return name, nil
}

// ParseAllowedIPs reads addresses and CIDR prefixes ("10.0.0.0/8",
// "2001:db8::/32", "203.0.113.7"): an address alone is the one address.
func ParseAllowedIPs(in []string) ([]netip.Prefix, error) {
	if len(in) > MaxAllowedIPs {
		return nil, invalid("at most %d allowed addresses or networks", MaxAllowedIPs)
	}
	out := make([]netip.Prefix, 0, len(in))
	for _, s := range in {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, invalid("allowed_ips: %q is neither an IP address nor a CIDR prefix (like 203.0.113.0/24)", clip(s))
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Check checks limits for a new key at now: known tiers, a spend limit
// in range, an expiry in the future.
func (l KeyLimits) Check(now time.Time) error {
	if err := CheckModels(l.Models); err != nil {
		return err
	}
	if len(l.AllowedIPs) > MaxAllowedIPs {
		return invalid("at most %d allowed addresses or networks", MaxAllowedIPs)
	}
	if l.SpendLimit < 0 || l.SpendLimit > MaxSpendLimit {
		return invalid("spend_limit must be 0 (none) to %d credits", int64(MaxSpendLimit))
	}
	if !l.ExpiresAt.IsZero() && !l.ExpiresAt.After(now) {
		return invalid("expires_at is not in the future")
	}
	return nil
}

// KeySpec describes a key to make: its name and limits.
type KeySpec struct {
	Name string
	KeyLimits
}

// KeyUpdate changes a key's name or limits; nil fields stay as they are.
type KeyUpdate struct {
	Name       *string
	Models     *[]catalog.Tier
	AllowedIPs *[]netip.Prefix
	ExpiresAt  *time.Time // a zero time: no expiry
	SpendLimit *int64
}

// Spec is the new key u describes: what it sets, zero values for the
// rest.
func (u KeyUpdate) Spec() KeySpec {
	var s KeySpec
	if u.Name != nil {
		s.Name = *u.Name
	}
	if u.Models != nil {
		s.Models = *u.Models
	}
	if u.AllowedIPs != nil {
		s.AllowedIPs = *u.AllowedIPs
	}
	if u.ExpiresAt != nil {
		s.ExpiresAt = *u.ExpiresAt
	}
	if u.SpendLimit != nil {
		s.SpendLimit = *u.SpendLimit
	}
	return s
}

// Empty reports whether u changes nothing.
func (u KeyUpdate) Empty() bool {
	return u.Name == nil && u.Models == nil && u.AllowedIPs == nil && u.ExpiresAt == nil && u.SpendLimit == nil
}

// NewKey returns a fresh random API key.
func NewKey() (string, error) {
	r, err := randomString(keyRandLen, base62)
	if err != nil {
		return "", err
	}
	return KeyPrefix + r, nil
}

// NewID returns a fresh account id: "acct_" and 20 random base36
// characters.
func NewID() (string, error) {
	r, err := randomString(20, base36)
	if err != nil {
		return "", err
	}
	return "acct_" + r, nil
}

// HashKey returns the hex SHA-256 of a key, the form in which it is kept.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// VisibleOf returns the part of a key that is kept and listed.
func VisibleOf(key string) string { return key[:min(len(key), VisiblePrefix)] }

// Presentable reports whether s could be an API key at all: 16 to 256
// printable characters without spaces. Anything else is refused before a
// lookup.
func Presentable(s string) bool {
	if len(s) < 16 || len(s) > maxPresentable {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// ErrBadKey is apperr.Invalid for a key that is not Presentable.
func ErrBadKey() error {
	return invalid("an API key must be 16 to 256 printable characters without spaces")
}

// randomString returns n characters drawn uniformly from alphabet.
func randomString(n int, alphabet string) (string, error) {
	// Rejection sampling keeps the draw uniform: use only bytes below the
	// largest multiple of len(alphabet).
	limit := byte(256 - 256%len(alphabet))
	out := make([]byte, 0, n)
	buf := make([]byte, n*2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}
