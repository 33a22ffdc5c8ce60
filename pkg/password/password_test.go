package password

import (
	"strings"
	"testing"
)

// fast keeps the tests quick; Default is checked once.
var fast = Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

func TestHashVerify(t *testing.T) {
	h, err := Hash("correct horse battery", Default)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q does not state argon2id and the default parameters", h)
	}
	other, _ := Hash("correct horse battery", Default)
	if other == h {
		t.Fatal("two hashes of one password are equal: the salt is not fresh")
	}
	cases := []struct {
		name, pw, hash string
		ok             bool
		err            error
	}{
		{"right", "correct horse battery", h, true, nil},
		{"wrong", "correct horse batterz", h, false, nil},
		{"empty", "", h, false, nil},
		{"other params", "pw-of-ten-chars", must(Hash("pw-of-ten-chars", fast)), true, nil},
		{"not phc", "x", "plain", false, ErrMalformed},
		{"bcrypt", "x", "$2a$10$abcdefghijklmnopqrstuv", false, ErrMalformed},
		{"huge memory", "x", "$argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", false, ErrMalformed},
		{"argon2i", "x", strings.Replace(h, "argon2id", "argon2i", 1), false, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, err := Verify(c.pw, c.hash)
			if ok != c.ok || err != c.err {
				t.Fatalf("Verify = %v, %v; want %v, %v", ok, err, c.ok, c.err)
			}
		})
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		pw string
		ok bool
	}{{"short", false}, {"ten chars!", true}, {strings.Repeat("é", 10), true}, {strings.Repeat("a", 257), false}, {"\xff\xfe invalid utf8", false}} {
		if err := Check(c.pw); (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v; want ok %v", c.pw, err, c.ok)
		}
	}
}

func BenchmarkHashDefault(b *testing.B) {
	for b.Loop() {
		if _, err := Hash("correct horse battery", Default); err != nil {
			b.Fatal(err)
		}
	}
}
