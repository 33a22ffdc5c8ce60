package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// A crash between the steps of a write that spans hash slots (on a cluster,
// nodes) leaves only what readers skip; redoing the write completes it.
func TestCrashBetweenSteps(t *testing.T) {
	ctx := context.Background()
	t.Run("key claimed: indexes written, record not", func(t *testing.T) {
		srv := redistest.Start(t)
		s := New(srv.Client(t))
		a, _ := s.CreateAccount(ctx, NewAccount{Name: "a"})
		key, _ := NewKey()
		h := HashKey(key)
		// The crash: claim's first step only.
		s.rdb.SAdd(ctx, accountKeysKey(a.ID), h)
		s.rdb.SAdd(ctx, keyPrefixKey(key[:visiblePrefix]), h)
		if keys, err := s.Keys(ctx, a.ID); err != nil || len(keys) != 0 {
			t.Errorf("Keys = %v, %v; a key that never worked is listed", keys, err)
		}
		if _, err := s.Authenticate(ctx, key); err != apperr.ErrUnknownKey {
			t.Errorf("Authenticate = %v; the key must not work", err)
		}
		if _, err := s.RevokeKey(ctx, key[:visiblePrefix]); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("revoke by prefix = %v; want not found", err)
		}
		// Done again: it works and is listed once.
		if _, err := s.AddKey(ctx, a.ID, key); err != nil {
			t.Fatal(err)
		}
		if keys, _ := s.Keys(ctx, a.ID); len(keys) != 1 {
			t.Errorf("%d keys listed; want 1", len(keys))
		}
		if got, err := s.Authenticate(ctx, key); err != nil || got.ID != a.ID {
			t.Errorf("Authenticate = %v, %v", got, err)
		}
	})
	t.Run("key claimed by another account meanwhile", func(t *testing.T) {
		srv := redistest.Start(t)
		s := New(srv.Client(t))
		a, _ := s.CreateAccount(ctx, NewAccount{Name: "a"})
		b, _ := s.CreateAccount(ctx, NewAccount{Name: "b"})
		key, _ := NewKey()
		s.rdb.SAdd(ctx, accountKeysKey(a.ID), HashKey(key)) // a's claim, cut short
		if _, err := s.AddKey(ctx, b.ID, key); err != nil {
			t.Fatal(err)
		}
		if keys, _ := s.Keys(ctx, a.ID); len(keys) != 0 {
			t.Errorf("account a lists b's key: %+v", keys)
		}
		if keys, _ := s.Keys(ctx, b.ID); len(keys) != 1 {
			t.Errorf("account b lists %d keys", len(keys))
		}
		if k, err := s.RevokeKey(ctx, key[:visiblePrefix]); err != nil || k.AccountID != b.ID {
			t.Errorf("revoke by prefix = %+v, %v", k, err)
		}
	})
	t.Run("account indexed, record not written", func(t *testing.T) {
		srv := redistest.Start(t)
		s := New(srv.Client(t))
		s.rdb.ZAdd(ctx, accountsKey(), redis.Z{Score: 1, Member: "acct_ghost"})
		real, _ := s.CreateAccount(ctx, NewAccount{Name: "real"})
		list, err := s.Accounts(ctx)
		if err != nil || len(list) != 1 || list[0].ID != real.ID {
			t.Errorf("Accounts = %+v, %v; want the real one only", list, err)
		}
		if _, err := s.Overdue(ctx, 10); err != nil {
			t.Errorf("Overdue: %v", err)
		}
		if _, err := s.QueueChecks(ctx, time.Now(), 10); err != nil {
			t.Errorf("QueueChecks: %v", err)
		}
	})
}
