package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

func TestRevocationWithinTTL(t *testing.T) {
	srv := redistest.Start(t)
	st := store.NewAccounts(store.NewDB(srv.Client(t), store.Options{}))
	ctx := context.Background()
	a, _ := st.Create(ctx, account.Spec{Name: "acme"})
	key, _, _ := st.CreateKey(ctx, a.ID)
	other, _ := st.Create(ctx, account.Spec{Name: "other"})
	otherKey, _, _ := st.CreateKey(ctx, other.ID)

	const ttl = 300 * time.Millisecond
	c := New(st, 100, ttl)
	if got, err := c.Authenticate(ctx, key); err != nil || got.ID != a.ID {
		t.Fatalf("Authenticate = %v, %v", got, err)
	}
	if _, err := c.Authenticate(ctx, otherKey); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now()
	if _, err := st.RevokeKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := st.SetStatus(ctx, other.ID, account.Disabled); err != nil {
		t.Fatal(err)
	}
	// Poll until both changes show; they must within the TTL.
	var keyErr, acctErr error
	for time.Since(revokedAt) < 5*time.Second {
		_, keyErr = c.Authenticate(ctx, key)
		_, acctErr = c.Authenticate(ctx, otherKey)
		if keyErr != nil && acctErr != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(revokedAt)
	if !errors.Is(keyErr, apperr.ErrKeyRevoked) || !errors.Is(acctErr, apperr.ErrAccountDisabled) {
		t.Fatalf("after revoking and disabling: %v / %v", keyErr, acctErr)
	}
	// The promise is 5 s; with a 300 ms cache they show far sooner.
	if took > 5*time.Second {
		t.Errorf("changes took %v to show; the bound is 5s", took)
	}
}

type flaky struct {
	calls int
	err   error
}

func (f *flaky) Authenticate(context.Context, string) (*account.Account, error) {
	f.calls++
	return &account.Account{ID: "acct_x"}, f.err
}

func TestCaching(t *testing.T) {
	f := &flaky{err: apperr.Transient(errors.New("down"), apperr.Unavailable, "unavailable")}
	c := New(f, 10, time.Minute)
	for i := 0; i < 3; i++ {
		_, _ = c.Authenticate(context.Background(), "esk_somekey_0123456789")
	}
	if f.calls != 3 {
		t.Errorf("a transient failure was cached: %d calls", f.calls)
	}
	// A bare failure (Redis down) is no refusal either: unavailable, and
	// not cached.
	f.err, f.calls = errors.New("dial tcp: connection refused"), 0
	for i := 0; i < 3; i++ {
		if _, err := c.Authenticate(context.Background(), "esk_somekey_0123456789"); apperr.CodeOf(err) != apperr.Unavailable || !apperr.IsRetryable(err) {
			t.Fatalf("a Redis failure: %v; want a retryable Unavailable", err)
		}
	}
	if f.calls != 3 {
		t.Errorf("a Redis failure was cached: %d calls", f.calls)
	}
	f.err, f.calls = nil, 0
	for i := 0; i < 3; i++ {
		_, _ = c.Authenticate(context.Background(), "esk_somekey_0123456789")
	}
	if f.calls != 1 {
		t.Errorf("%d calls for three lookups of one key; want 1", f.calls)
	}
	f.err, f.calls = apperr.ErrUnknownKey, 0
	for i := 0; i < 3; i++ {
		_, _ = c.Authenticate(context.Background(), "esk_guess_0123456789abcd")
	}
	if f.calls != 1 {
		t.Errorf("refusals not cached: %d calls", f.calls)
	}
	off := New(f, 10, 0)
	f.calls = 0
	_, _ = off.Authenticate(context.Background(), "k")
	_, _ = off.Authenticate(context.Background(), "k")
	if f.calls != 2 {
		t.Errorf("TTL 0 still caches")
	}
}
