package users_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/password"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/users"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// A right password whose hash outlasts the request's budget (a saturated
// machine) still signs in: the writes after the hash get their own.
func TestSignInAfterASlowHash(t *testing.T) {
	t.Parallel()
	db := store.NewDB(redistest.Start(t).Client(t), store.Options{})
	cfg := users.Defaults
	cfg.Params = password.Params{Memory: 32 * 1024, Time: 16, Threads: 1, SaltLen: 16, KeyLen: 32}
	svc, err := users.New(store.NewUsers(db), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acct, err := store.NewAccounts(db).Create(ctx, account.Spec{Name: "slow", Credits: 1})
	if err != nil {
		t.Fatal(err)
	}
	const pw = "a long enough password"
	if _, err := svc.Create(ctx, acct.ID, "slow@example.com", pw, false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := password.Hash(pw, cfg.Params); err != nil {
		t.Fatal(err)
	}
	hashTook := time.Since(start)
	// A budget that lasts through the counting and the look-up, not the
	// hash.
	rctx, cancel := context.WithTimeout(ctx, hashTook/4)
	defer cancel()
	signed, err := svc.SignIn(rctx, "slow@example.com", pw, "192.0.2.7")
	if err != nil {
		t.Fatalf("sign-in past its budget (a hash of %s): %v", hashTook, err)
	}
	if _, _, err := svc.Session(ctx, signed.Token); err != nil {
		t.Errorf("the session was not saved: %v", err)
	}
}

// signInEnv is a sign-in service on a private Redis with one user,
// whose store's look-ups of users fail while failLookups is set.
type signInEnv struct {
	svc         *users.Service
	failLookups atomic.Bool
}

type flakyUsers struct {
	*store.Users
	env *signInEnv
}

func (f flakyUsers) UserByEmail(ctx context.Context, email string) (*account.User, string, error) {
	if f.env.failLookups.Load() {
		return nil, "", apperr.New(apperr.Unavailable, "the test's Redis is down")
	}
	return f.Users.UserByEmail(ctx, email)
}

const (
	ownerEmail = "owner@example.com"
	ownerPW    = "the owner's password"
)

func newSignInEnv(t *testing.T, cfg users.Config) *signInEnv {
	t.Helper()
	db := store.NewDB(redistest.Start(t).Client(t), store.Options{})
	cfg.Params = password.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}
	e := &signInEnv{}
	var err error
	if e.svc, err = users.New(flakyUsers{store.NewUsers(db), e}, cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acct, err := store.NewAccounts(db).Create(ctx, account.Spec{Name: "owner", Credits: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(ctx, acct.ID, ownerEmail, ownerPW, false); err != nil {
		t.Fatal(err)
	}
	return e
}

// outcome is what a sign-in came to: "ok", "wrong", "throttled" or the
// error's code.
func (e *signInEnv) outcome(pw, addr string) string {
	_, err := e.svc.SignIn(context.Background(), ownerEmail, pw, addr)
	var th *users.ThrottledError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, users.ErrWrongCredentials):
		return "wrong"
	case errors.As(err, &th):
		return "throttled"
	}
	return string(apperr.CodeOf(err))
}

// A sign-in that was never checked (its dependency failed) or that was
// refused spends no budget: only checked passwords count.
func TestUncheckedSignInsCostNothing(t *testing.T) {
	t.Parallel()
	cfg := users.Defaults
	cfg.MaxPerPair, cfg.MaxPerEmail = 2, 4
	e := newSignInEnv(t, cfg)
	e.failLookups.Store(true)
	for range 5 {
		if got := e.outcome("a wrong guess", "192.0.2.1"); got != string(apperr.Unavailable) {
			t.Fatalf("a sign-in whose look-up failed: %s; want unavailable", got)
		}
	}
	e.failLookups.Store(false)
	if got := e.outcome(ownerPW, "192.0.2.1"); got != "ok" {
		t.Fatalf("the right password after sign-ins never checked: %s; want ok", got)
	}
	// Refusals do not count either: a network past its budget for the
	// email does not spend the email's.
	for i := range 6 {
		want := "wrong"
		if i >= 2 {
			want = "throttled"
		}
		if got := e.outcome("a wrong guess", "198.51.100.1"); got != want {
			t.Fatalf("guess %d: %s; want %s", i, got, want)
		}
	}
	if got := e.outcome(ownerPW, "203.0.113.1"); got != "ok" {
		t.Fatalf("the right password from elsewhere after 2 checked guesses and 4 refused (per-email budget 4): %s", got)
	}
}

// The owner signing in from a network they signed in from before is not
// locked out by failures from elsewhere; a network never signed in from
// is, and a loopback address is a network alone.
func TestKnownNetworkNotLockedOut(t *testing.T) {
	t.Parallel()
	cfg := users.Defaults
	cfg.MaxPerEmail = 5
	e := newSignInEnv(t, cfg)
	for _, addr := range []string{"192.0.2.7", "2001:db8:5:6::1", "127.0.0.2"} {
		if got := e.outcome(ownerPW, addr); got != "ok" {
			t.Fatalf("first sign-in from %s: %s", addr, got)
		}
	}
	for i := range 10 {
		e.outcome("a wrong guess", "198.51.100."+strconv.Itoa(i+1))
	}
	cases := []struct {
		addr, want string
	}{
		{"192.0.2.99", "ok"},         // the same /24
		{"2001:db8:5:6::abcd", "ok"}, // the same /64
		{"::ffff:192.0.2.8", "ok"},   // mapped: the same /24
		{"127.0.0.2", "ok"},          // the same loopback address
		{"127.0.0.3", "throttled"},   // another: the flood's kind
		{"203.0.113.1", "throttled"}, // a network never signed in from
		{"2001:db8:5:7::1", "throttled"},
	}
	for _, c := range cases {
		if got := e.outcome(ownerPW, c.addr); got != c.want {
			t.Errorf("the owner from %s after failures from elsewhere: %s; want %s", c.addr, got, c.want)
		}
	}
	// From a known network the owner's own budget still holds guesses.
	cfg.MaxPerKnown, cfg.MaxPerPair = 3, 100
	e = newSignInEnv(t, cfg)
	if got := e.outcome(ownerPW, "192.0.2.7"); got != "ok" {
		t.Fatal(got)
	}
	for i := range 3 {
		e.outcome("a wrong guess", "192.0.2."+strconv.Itoa(100+i))
	}
	if got := e.outcome(ownerPW, "192.0.2.7"); got != "throttled" {
		t.Errorf("a known network past its own budget: %s; want throttled", got)
	}
}

func TestKnownNetworkOf(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.7":        "192.0.2.0/24",
		"::ffff:192.0.2.7": "192.0.2.0/24",
		"2001:db8::1":      "2001:db8::/64",
		"127.0.0.9":        "127.0.0.9/32",
		"::1":              "::1/128",
		"not an address":   "not an address",
	} {
		if got := users.KnownNetwork(addr); got != want {
			t.Errorf("KnownNetwork(%q) = %q; want %q", addr, got, want)
		}
	}
}
