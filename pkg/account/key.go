package account

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"
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
	CreatedAt time.Time `json:"created_at"`
	Revoked   bool      `json:"revoked"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
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
