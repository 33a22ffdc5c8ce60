package account

import (
	"crypto/sha256"
	"encoding/hex"
	"net/mail"
	"strings"
	"time"
)

// User is a person who signs in to the account console for an account
// (its owner, or one of its owners). Their password is kept hashed
// (package password), never here.
type User struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	AccountID string    `json:"account_id"`
	Admin     bool      `json:"admin"` // sees the console's operator view
	Status    Status    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	// Gen changes whenever the user's password or status does: sessions
	// made before are over.
	Gen int64 `json:"-"`
}

// NormalizeEmail trims and lower-cases an email address and checks it is
// one.
func NormalizeEmail(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) > 254 {
		return "", invalid("an email address is at most 254 characters")
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return "", invalid("%q is not an email address", clip(s))
	}
	return s, nil
}

// HashEmail is the form an email address is indexed under.
func HashEmail(normalized string) string {
	sum := sha256.Sum256([]byte(normalized))
	return hex.EncodeToString(sum[:])
}

// NewUserID returns a fresh user id: "usr_" and 20 random base36
// characters.
func NewUserID() (string, error) {
	r, err := randomString(20, base36)
	if err != nil {
		return "", err
	}
	return "usr_" + r, nil
}
