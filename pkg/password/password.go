// Package password hashes and checks console users' passwords with
// argon2id (RFC 9106), in the PHC string format
// "$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>", so that
// a stored hash carries its own parameters and stronger ones can be
// adopted without breaking the old.
package password

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id's costs.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
	SaltLen uint32
	KeyLen  uint32
}

// Default follows OWASP's Password Storage Cheat Sheet's second
// recommendation for argon2id: 19 MiB, 2 passes, 1 lane, a 16-byte salt
// and a 32-byte hash. BenchmarkHashDefault times one hash (BENCHMARKS.md):
// slow enough to make guessing dear, quick enough for a sign-in.
var Default = Params{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// Lengths a password may have, in characters.
const (
	MinLen = 10
	MaxLen = 256
)

// ErrWeak is returned by Check for a password outside the lengths.
var ErrWeak = fmt.Errorf("a password must be %d to %d characters", MinLen, MaxLen)

// Check reports whether pw is acceptable as a new password.
func Check(pw string) error {
	n := utf8.RuneCountInString(pw)
	if n < MinLen || n > MaxLen || !utf8.ValidString(pw) {
		return ErrWeak
	}
	return nil
}

var b64 = base64.RawStdEncoding

// Hash returns the PHC string of pw under p, with a fresh salt.
func Hash(pw string, p Params) (string, error) {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// ErrMalformed is a stored hash that is not an argon2id PHC string.
var ErrMalformed = errors.New("password: malformed hash")

// Bounds on what a stored hash may ask for, so a corrupted or hostile
// record cannot make a check take gigabytes.
const (
	maxMemory = 1 << 20 // KiB: 1 GiB
	maxTime   = 16
)

// Verify reports whether pw matches the PHC string encoded, comparing in
// constant time.
func Verify(pw, encoded string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, ErrMalformed
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false, ErrMalformed
	}
	var p Params
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil ||
		p.Memory == 0 || p.Memory > maxMemory || p.Time == 0 || p.Time > maxTime || p.Threads == 0 {
		return false, ErrMalformed
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil || len(salt) < 8 {
		return false, ErrMalformed
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) < 16 || len(want) > 64 {
		return false, ErrMalformed
	}
	got := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
