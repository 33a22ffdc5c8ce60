package upload

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/signedurl"
)

func TestKey(t *testing.T) {
	at := time.Date(2026, 11, 27, 14, 5, 0, 0, time.UTC)
	a, b := Key(at, "image/jpeg"), Key(at, "image/jpeg")
	if a == b || !strings.HasPrefix(a, "uploads/2026112714/") || !strings.HasSuffix(a, ".jpg") || !blob.ValidKey(a) || len(a) != len("uploads/2026112714/")+32+4 {
		t.Errorf("keys %q, %q", a, b)
	}
	// The S3 janitor removes only keys named as results are: an upload's
	// name has their shape, so it goes with them.
	if _, ok := blob.ContentHash(a); !ok {
		t.Errorf("an upload key %q is not named as results are: the S3 janitor would keep it", a)
	}
}

func TestFromURL(t *testing.T) {
	s := signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "https://api.example")
	now := time.Unix(1_800_000_000, 0)
	key := Key(now, "image/png")
	good := s.Sign(Path(key), now.Add(TTL))
	elsewhere := strings.Replace(good, "https://api.example", "http://10.0.0.7:8080", 1)
	result := s.Sign(FilesPrefix+"2026112714/0123456789abcdef0123456789abcdef.png", now.Add(TTL))
	u, _ := url.Parse(good)
	q := u.Query()
	q.Set("expires", "9999999999")
	u.RawQuery = q.Encode()
	tests := []struct {
		name    string
		raw     string
		at      time.Time
		wantKey string
		wantOK  bool
		code    apperr.Code
		msg     string
	}{
		{"an upload", good, now, key, true, "", ""},
		{"an upload on another host: told by path and signature", elsewhere, now, key, true, "", ""},
		{"an upload checked without the clock, past its expiry", good, time.Time{}, key, true, "", ""},
		{"expired", good, now.Add(TTL), "", true, apperr.Invalid, "has expired"},
		{"expiry extended", u.String(), now, "", true, apperr.Invalid, "without a valid signature"},
		{"expiry extended, without the clock", u.String(), time.Time{}, "", true, apperr.Invalid, "without a valid signature"},
		{"no signature", strings.Split(good, "?")[0], now, "", true, apperr.Invalid, "without a valid signature"},
		{"signature twice", good + "&sig=x", now, "", true, apperr.Invalid, "without a valid signature"},
		{"a result URL is not an upload", result, now, "", false, "", ""},
		{"another URL", "https://example.com/cat.png", now, "", false, "", ""},
		{"not http", "ftp://api.example" + Path(key), now, "", false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, ok, err := FromURL(s, tt.raw, tt.at)
			if k != tt.wantKey || ok != tt.wantOK || apperr.CodeOf(err) != tt.code || (tt.msg != "" && !strings.Contains(apperr.MessageOf(err), tt.msg)) {
				t.Errorf("FromURL = %q, %v, %v; want %q, %v, %s %q", k, ok, err, tt.wantKey, tt.wantOK, tt.code, tt.msg)
			}
		})
	}
}

// Whatever the URL, FromURL answers without panicking, and a key it
// returns is a valid blob key under Dir.
func FuzzFromURL(f *testing.F) {
	s := signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "https://api.example")
	now := time.Unix(1_800_000_000, 0)
	f.Add(s.Sign(Path(Key(now, "image/png")), now.Add(TTL)))
	f.Add("https://api.example/v1/files/uploads/../../etc/passwd?expires=1&sig=x")
	f.Add("http://x/v1/files/uploads/%2e%2e/a.png")
	f.Fuzz(func(t *testing.T, raw string) {
		k, ok, err := FromURL(s, raw, time.Time{})
		if err == nil && ok && (!blob.ValidKey(k) || !strings.HasPrefix(k, Dir)) {
			t.Fatalf("FromURL(%q) = %q", raw, k)
		}
	})
}
