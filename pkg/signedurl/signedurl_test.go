package signedurl

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestSignAndVerify(t *testing.T) {
	s := New(secret, "https://img.example.com")
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(24 * time.Hour)
	raw := s.Sign("/v1/files/2026112214/task_lumen_1-0-0123456789abcdef.png", exp)
	if !strings.HasPrefix(raw, "https://img.example.com/v1/files/2026112214/task_lumen_1-0-0123456789abcdef.png?expires=") {
		t.Fatalf("URL %s", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	other := New([]byte("another secret, also 32 bytes long"), "https://img.example.com")
	tests := []struct {
		name               string
		signer             *Signer
		path, expires, sig string
		at                 time.Time
		want               apperr.Code
	}{
		{"genuine", s, u.Path, q.Get("expires"), q.Get("sig"), now, ""},
		{"genuine, a second before expiry", s, u.Path, q.Get("expires"), q.Get("sig"), exp.Add(-time.Second), ""},
		{"expired", s, u.Path, q.Get("expires"), q.Get("sig"), exp, apperr.Expired},
		{"long expired", s, u.Path, q.Get("expires"), q.Get("sig"), exp.Add(48 * time.Hour), apperr.Expired},
		{"path changed", s, strings.Replace(u.Path, "-0-", "-1-", 1), q.Get("expires"), q.Get("sig"), now, apperr.Forbidden},
		{"expiry extended", s, u.Path, "9999999999", q.Get("sig"), now, apperr.Forbidden},
		{"expired URL with extended expiry is refused, not gone", s, u.Path, "9999999999", q.Get("sig"), exp.Add(time.Hour), apperr.Forbidden},
		{"signature flipped", s, u.Path, q.Get("expires"), flip(q.Get("sig")), now, apperr.Forbidden},
		{"signature missing", s, u.Path, q.Get("expires"), "", now, apperr.Forbidden},
		{"expires missing", s, u.Path, "", q.Get("sig"), now, apperr.Forbidden},
		{"expires not a number", s, u.Path, "soon", q.Get("sig"), now, apperr.Forbidden},
		{"signature not base64", s, u.Path, q.Get("expires"), strings.Repeat("!", 43), now, apperr.Forbidden},
		{"other secret", other, u.Path, q.Get("expires"), q.Get("sig"), now, apperr.Forbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.signer.Verify(tt.path, tt.expires, tt.sig, tt.at)
			if got := apperr.CodeOf(err); got != tt.want {
				t.Errorf("Verify = %v; want code %q", err, tt.want)
			}
		})
	}
}

// Exactly one form of a signed URL verifies: the one Sign wrote. Forms
// that parse to the same expiry or decode to the same MAC are refused, so a
// URL cannot be varied (past caches, logs and rate limits keyed on it) and
// still work.
func TestVerifyAcceptsOnlyTheCanonicalForm(t *testing.T) {
	s := New(secret, "https://img.example.com")
	now := time.Unix(1_800_000_000, 0)
	u, err := url.Parse(s.Sign("/v1/files/2026112214/0123456789abcdef0123456789abcdef.png", now.Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	path, exp, sig := u.Path, u.Query().Get("expires"), u.Query().Get("sig")
	if err := s.Verify(path, exp, sig, now); err != nil {
		t.Fatalf("the signed form: %v", err)
	}
	tests := []struct{ name, expires, sig string }{
		{"expires with a plus sign", "+" + exp, sig},
		{"expires with a leading zero", "0" + exp, sig},
		{"expires with leading zeros", "000" + exp, sig},
		{"expires with a minus zero", "-0", sig},
		{"expires with a space", " " + exp, sig},
		{"expires in hex", "0x" + strconv.FormatInt(now.Add(time.Hour).Unix(), 16), sig},
		{"sig with padding", exp, sig + "="},
		{"sig with a newline", exp, sig[:20] + "\n" + sig[20:]},
		{"sig with a trailing newline", exp, sig + "\n"},
		{"sig in standard base64", exp, strings.NewReplacer("-", "+", "_", "/").Replace(sig)},
		{"sig cut short", exp, sig[:42]},
		{"sig lower-cased", exp, strings.ToLower(sig)},
	}
	// The last of 43 characters carries 4 bits of the MAC and 2 unused
	// ones: three other characters decode to the same MAC.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	for v := last &^ 3; v < last&^3+4; v++ {
		if v != last {
			tests = append(tests, struct{ name, expires, sig string }{"sig ending in " + alphabet[v:v+1] + ", the same MAC", exp, sig[:len(sig)-1] + alphabet[v:v+1]})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.expires == exp && tt.sig == sig {
				t.Fatal("not a variant")
			}
			if err := s.Verify(path, tt.expires, tt.sig, now); apperr.CodeOf(err) != apperr.Forbidden {
				t.Errorf("Verify(expires %q, sig %q) = %v; want code %q", tt.expires, tt.sig, err, apperr.Forbidden)
			}
		})
	}
}

func flip(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func TestSignIsDeterministic(t *testing.T) {
	s := New(secret, "http://localhost:8080")
	exp := time.Unix(1_800_000_000, 999_000_000)
	if a, b := s.Sign("/v1/files/x.png", exp), s.Sign("/v1/files/x.png", exp); a != b {
		t.Errorf("two signatures of one URL differ: %s %s", a, b)
	}
}

func BenchmarkSign(b *testing.B) {
	s := New(secret, "https://img.example.com")
	exp := time.Now().Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Sign("/v1/files/2026112214/task_lumen_2170455969821192122696478843056611060-0-a75d6ee8b6feafeb.png", exp)
	}
}

func BenchmarkVerify(b *testing.B) {
	s := New(secret, "https://img.example.com")
	now := time.Now()
	u, _ := url.Parse(s.Sign("/v1/files/a/b.png", now.Add(time.Hour)))
	q := u.Query()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Verify(u.Path, q.Get("expires"), q.Get("sig"), now); err != nil {
			b.Fatal(err)
		}
	}
}

// Signed holds a URL to its signature alone: an expired URL the signer
// made passes, an altered one does not.
func TestSignedIgnoresOnlyTheExpiry(t *testing.T) {
	s := New(secret, "https://img.example.com")
	now := time.Unix(1_800_000_000, 0)
	u, err := url.Parse(s.Sign("/v1/files/uploads/2026112214/0123456789abcdef0123456789abcdef.png", now.Add(-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	path, exp, sig := u.Path, u.Query().Get("expires"), u.Query().Get("sig")
	for _, tt := range []struct {
		name               string
		path, expires, sig string
		want               apperr.Code
	}{
		{"expired but genuine", path, exp, sig, ""},
		{"path changed", strings.Replace(path, "uploads", "upload", 1), exp, sig, apperr.Forbidden},
		{"expiry extended", path, "9999999999", sig, apperr.Forbidden},
		{"signature flipped", path, exp, flip(sig), apperr.Forbidden},
		{"no signature", path, exp, "", apperr.Forbidden},
	} {
		if got := apperr.CodeOf(s.Signed(tt.path, tt.expires, tt.sig)); got != tt.want {
			t.Errorf("%s: Signed = %q; want %q", tt.name, got, tt.want)
		}
	}
	if apperr.CodeOf(s.Verify(path, exp, sig, now)) != apperr.Expired {
		t.Error("Verify took the expired URL")
	}
}
