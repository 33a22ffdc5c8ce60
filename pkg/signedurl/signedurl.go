// Package signedurl makes and checks expiring download URLs: an HMAC-SHA256,
// keyed with a server secret, over the URL path and its expiry time.
//
//	https://images.example.com/v1/files/<key>?expires=<unix seconds>&sig=<base64url MAC>
//
// A URL whose path, expiry or signature was altered is refused (403); a
// genuine URL past its expiry is gone (410). Only the form Sign writes
// verifies: the path byte for byte (a request's escaped path, as sent),
// expires in canonical decimal (no sign, no leading zero), and sig in
// unpadded base64url exactly as the MAC encodes (no other last character
// that decodes to the same bytes). Other spellings of the same URL are
// refused, so one result has one URL.
package signedurl

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"sync"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
)

// Signer signs and verifies URLs. It is safe for concurrent use.
type Signer struct {
	base string // scheme://host[:port], no trailing slash
	pool sync.Pool
}

// New returns a signer that keys its MACs with secret and makes URLs under
// base (e.g. "https://images.example.com").
func New(secret []byte, base string) *Signer {
	key := append([]byte(nil), secret...)
	s := &Signer{base: base}
	s.pool.New = func() any { return hmac.New(sha256.New, key) }
	return s
}

// sigLen is the length of a base64url-encoded SHA-256 MAC.
const sigLen = 43

func (s *Signer) mac(path string, expires int64) []byte {
	h := s.pool.Get().(hash.Hash)
	defer s.pool.Put(h)
	h.Reset()
	var buf [24]byte
	h.Write([]byte(path))
	h.Write([]byte{'\n'})
	h.Write(strconv.AppendInt(buf[:0], expires, 10))
	return h.Sum(nil)
}

// Sign returns the absolute URL of path, valid until expires (rounded down to
// a second).
func (s *Signer) Sign(path string, expires time.Time) string {
	exp := expires.Unix()
	sum := s.mac(path, exp)
	b := make([]byte, 0, len(s.base)+len(path)+len("?expires=&sig=")+20+sigLen)
	b = append(b, s.base...)
	b = append(b, path...)
	b = append(b, "?expires="...)
	b = strconv.AppendInt(b, exp, 10)
	b = append(b, "&sig="...)
	b = base64.RawURLEncoding.AppendEncode(b, sum)
	return string(b)
}

// Verify checks a request for path (its escaped path, as sent: the bytes
// that were signed) carrying the expires and sig query parameters. It
// returns apperr.Forbidden for a missing or wrong signature, or one not in
// the form Sign writes, and apperr.Expired for a genuine URL past its
// expiry.
func (s *Signer) Verify(path, expires, sig string, now time.Time) error {
	exp, err := s.signed(path, expires, sig)
	if err != nil {
		return err
	}
	if now.Unix() >= exp {
		return apperr.New(apperr.Expired, "this download URL has expired: result URLs are valid for 24 hours after the task completes")
	}
	return nil
}

// Signed checks that path, expires and sig are a URL this signer made,
// whether or not it has expired since: for a reader handed the URL by one
// that checked its expiry (a worker reading the uploads of a task the
// gateway accepted). It returns apperr.Forbidden as Verify does.
func (s *Signer) Signed(path, expires, sig string) error {
	_, err := s.signed(path, expires, sig)
	return err
}

// signed checks the signature and returns the expiry it covers.
func (s *Signer) signed(path, expires, sig string) (int64, error) {
	exp, ok := parseExpires(expires)
	if !ok || len(sig) != sigLen {
		return 0, apperr.New(apperr.Forbidden, "invalid or missing URL signature")
	}
	// Compare the encodings, not the decoded bytes: base64 decoding ignores
	// the unused low bits of the last character (and newlines), so several
	// strings decode to one MAC, and only the one Sign wrote is accepted.
	var want [sigLen]byte
	base64.RawURLEncoding.Encode(want[:], s.mac(path, exp))
	if !hmac.Equal([]byte(sig), want[:]) {
		return 0, apperr.New(apperr.Forbidden, "invalid or missing URL signature")
	}
	return exp, nil
}

// parseExpires reads expires in the one form Sign writes: decimal digits,
// no sign, and no leading zero.
func parseExpires(s string) (int64, bool) {
	if s == "" || s[0] == '0' && len(s) > 1 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	exp, err := strconv.ParseInt(s, 10, 64)
	return exp, err == nil
}
