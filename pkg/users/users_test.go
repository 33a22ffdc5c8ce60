package users_test

import (
	"context"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/password"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/users"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// A right password whose hash outlasts the request's budget (a saturated
// machine) still signs in: the writes after the hash get their own.
func TestSignInAfterASlowHash(t *testing.T) {
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
