package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/password"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// newAccount makes an account with easelctl and returns its id.
func newAccount(t *testing.T, url, name string) string {
	t.Helper()
	r := ctl(t, url, "account", "create", "--name", name)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "acct_") {
		t.Fatalf("account create: %+v", r)
	}
	return id
}

// userStore opens the store easelctl writes to, for checking what it did.
func userStore(t *testing.T, url string) *store.Users {
	t.Helper()
	rdb, err := redisconn.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return store.NewUsers(store.NewDB(rdb, store.Options{}))
}

func TestUsers(t *testing.T) {
	t.Parallel()
	url := redistest.Start(t).URL
	ctx := context.Background()
	id := newAccount(t, url, "Acme")
	other := newAccount(t, url, "Other")
	st := userStore(t, url)
	const (
		first  = "correct horse battery"
		second = "staple the horse, again"
	)

	// Every command's output, checked at the end for a password.
	var outputs []result
	run := func(stdin string, args ...string) result {
		t.Helper()
		r := ctlIn(t, url, stdin, args...)
		outputs = append(outputs, r)
		return r
	}
	decode := func(r result) account.User {
		t.Helper()
		var u account.User
		if r.code != 0 {
			t.Fatalf("exit %d: %+v", r.code, r)
		}
		if err := json.Unmarshal([]byte(r.stdout), &u); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		return u
	}

	u := decode(run(first+"\n", "user", "create", "--account", id, "--email", " Ann@Example.com ", "--password-stdin", "--json"))
	if !strings.HasPrefix(u.ID, "usr_") || u.Email != "ann@example.com" || u.AccountID != id || u.Admin || u.Status != account.Active {
		t.Errorf("user create --json: %+v", u)
	}
	// The first line of stdin, a CRLF line end trimmed, and the rest ignored.
	if r := run(first+"\r\nsecond line\n", "user", "create", "--account", id, "--email", "bo@example.com", "--password-stdin", "--admin"); r.code != 0 ||
		!strings.Contains(r.stdout, "bo@example.com") || !strings.Contains(r.stdout, "admin    true") {
		t.Errorf("user create --admin: %+v", r)
	}
	if _, hash, err := st.UserByEmail(ctx, "bo@example.com"); err != nil {
		t.Fatal(err)
	} else if ok, err := password.Verify(first, hash); !ok || err != nil {
		t.Errorf("bo's password is not the first line of stdin: %v %v", ok, err)
	}
	// Without a line end at all.
	if r := run(first, "user", "create", "--account", other, "--email", "cy@example.com", "--password-stdin"); r.code != 0 {
		t.Errorf("user create, stdin without a newline: %+v", r)
	}

	var listed []account.User
	r := run("", "user", "list", "--account", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 2 || listed[0].Email != "ann@example.com" || listed[1].Email != "bo@example.com" || !listed[1].Admin {
		t.Errorf("user list --json: %+v %v", r, err)
	}
	if r := run("", "user", "list", "--account", id); r.code != 0 || !strings.Contains(r.stdout, "EMAIL") || !strings.Contains(r.stdout, "ann@example.com") ||
		!strings.Contains(r.stdout, "bo@example.com") || strings.Contains(r.stdout, "cy@example.com") {
		t.Errorf("user list: %+v", r)
	}
	if r := run("", "user", "list", "--account", newAccount(t, url, "Empty"), "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("user list of an account without users: %+v", r)
	}

	_, before, err := st.UserByEmail(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if r := run(second+"\n", "user", "reset-password", "--email", "ann@example.com", "--password-stdin"); r.code != 0 || !strings.Contains(r.stdout, u.ID) {
		t.Errorf("reset-password: %+v", r)
	}
	_, after, err := st.UserByEmail(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Error("reset-password left the hash as it was")
	}
	if ok, _ := password.Verify(second, after); !ok {
		t.Error("the new hash is not of the new password")
	}
	if ok, _ := password.Verify(first, after); ok {
		t.Error("the old password still matches")
	}

	steps := []struct {
		args   []string
		status account.Status
		admin  bool
	}{
		{[]string{"disable", "--email", "ann@example.com"}, account.Disabled, false},
		{[]string{"enable", "--email", "ANN@example.com"}, account.Active, false},
		{[]string{"admin", "--email", "ann@example.com", "--on"}, account.Active, true},
		{[]string{"disable", "--email", "ann@example.com"}, account.Disabled, true},
		{[]string{"admin", "--email", "ann@example.com", "--off"}, account.Disabled, false},
		{[]string{"enable", "--email", "ann@example.com"}, account.Active, false},
	}
	for _, s := range steps {
		got := decode(run("", append([]string{"user"}, append(s.args, "--json")...)...))
		stored, _, err := st.UserByEmail(ctx, "ann@example.com")
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != s.status || got.Admin != s.admin || stored.Status != s.status || stored.Admin != s.admin || got.ID != u.ID {
			t.Errorf("user %v: printed %+v, stored %+v; want status %s, admin %t", s.args, got, stored, s.status, s.admin)
		}
	}
	if r := run("", "user", "disable", "--email", "ann@example.com"); r.code != 0 || !strings.Contains(r.stdout, "disabled") {
		t.Errorf("user disable: %+v", r)
	}

	for _, r := range outputs {
		for _, pw := range []string{first, second} {
			if strings.Contains(r.stdout, pw) || strings.Contains(r.stderr, pw) {
				t.Errorf("a password was printed: %+v", r)
			}
		}
	}
}

func TestUserErrors(t *testing.T) {
	t.Parallel()
	url := redistest.Start(t).URL
	id := newAccount(t, url, "Acme")
	const pw = "a good long password\n"
	if r := ctlIn(t, url, pw, "user", "create", "--account", id, "--email", "ann@example.com", "--password-stdin"); r.code != 0 {
		t.Fatalf("user create: %+v", r)
	}
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"duplicate email", pw, []string{"user", "create", "--account", id, "--email", "Ann@Example.com", "--password-stdin"}, 1, "a user with the email ann@example.com exists already"},
		{"short password", "short\n", []string{"user", "create", "--account", id, "--email", "bo@example.com", "--password-stdin"}, 1, "a password must be 10 to 256 characters"},
		{"short password on reset", "short\n", []string{"user", "reset-password", "--email", "ann@example.com", "--password-stdin"}, 1, "a password must be 10 to 256 characters"},
		{"empty password line", "\n", []string{"user", "create", "--account", id, "--email", "bo@example.com", "--password-stdin"}, 1, "a password must be 10 to 256 characters"},
		{"nothing on stdin", "", []string{"user", "create", "--account", id, "--email", "bo@example.com", "--password-stdin"}, 1, "no password on stdin"},
		{"too long a line", strings.Repeat("x", 5000), []string{"user", "create", "--account", id, "--email", "bo@example.com", "--password-stdin"}, 1, "too long"},
		{"no --password-stdin", pw, []string{"user", "create", "--account", id, "--email", "bo@example.com"}, 2, "--password-stdin is required"},
		{"no --password-stdin on reset", pw, []string{"user", "reset-password", "--email", "ann@example.com"}, 2, "--password-stdin is required"},
		{"a password on the command line", pw, []string{"user", "create", "--account", id, "--email", "bo@example.com", "--password", "xyz"}, 2, "unknown flag"},
		{"no email", pw, []string{"user", "create", "--account", id, "--password-stdin"}, 2, "--email is required"},
		{"no account", pw, []string{"user", "create", "--email", "bo@example.com", "--password-stdin"}, 2, "--account is required"},
		{"unknown account", pw, []string{"user", "create", "--account", "acct_nope", "--email", "bo@example.com", "--password-stdin"}, 1, "account acct_nope not found"},
		{"not an email", pw, []string{"user", "create", "--account", id, "--email", "bo at example", "--password-stdin"}, 1, "is not an email address"},
		{"reset of an unknown user", pw, []string{"user", "reset-password", "--email", "zed@example.com", "--password-stdin"}, 1, "no user with email zed@example.com"},
		{"disable an unknown user", "", []string{"user", "disable", "--email", "zed@example.com"}, 1, "no user with email zed@example.com"},
		{"enable without an email", "", []string{"user", "enable"}, 2, "--email is required"},
		{"admin without --on or --off", "", []string{"user", "admin", "--email", "ann@example.com"}, 2, "give one of --on, --off"},
		{"admin with both", "", []string{"user", "admin", "--email", "ann@example.com", "--on", "--off"}, 2, "give one of --on, --off"},
		{"list without an account", "", []string{"user", "list"}, 2, "--account is required"},
		{"list of an unknown account", "", []string{"user", "list", "--account", "acct_nope"}, 1, "account acct_nope not found"},
		{"an argument too many", "", []string{"user", "disable", "ann@example.com"}, 2, "accepts 0 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ctlIn(t, url, tt.stdin, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.msg) || r.stdout != "" {
				t.Errorf("%v: %+v; want exit %d and %q on stderr", tt.args, r, tt.code, tt.msg)
			}
		})
	}
	// None of them made or changed a user.
	var listed []account.User
	r := ctl(t, url, "user", "list", "--account", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 1 || listed[0].Email != "ann@example.com" || listed[0].Admin {
		t.Errorf("users after the errors: %+v %v", r, err)
	}
}
