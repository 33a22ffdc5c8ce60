package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// A crash between the steps of a write that spans hash slots (on a cluster,
// nodes) leaves only what readers skip; redoing the write completes it.
func TestCrashBetweenSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("key claimed: indexes written, record not", func(t *testing.T) {
		st, _ := blankStore(t, Options{})
		s := st.accounts
		a, _ := s.Create(ctx, account.Spec{Name: "a"})
		key, _ := account.NewKey()
		h := account.HashKey(key)
		// The crash: claim's first step only.
		st.rdb.SAdd(ctx, accountKeysKey(a.ID), h)
		st.rdb.SAdd(ctx, keyPrefixKey(key[:account.VisiblePrefix]), h)
		if keys, err := s.Keys(ctx, a.ID); err != nil || len(keys) != 0 {
			t.Errorf("Keys = %v, %v; a key that never worked is listed", keys, err)
		}
		if _, err := s.Authenticate(ctx, key); err != apperr.ErrUnknownKey {
			t.Errorf("Authenticate = %v; the key must not work", err)
		}
		if _, err := s.RevokeKey(ctx, key[:account.VisiblePrefix]); apperr.CodeOf(err) != apperr.NotFound {
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
		st, _ := blankStore(t, Options{})
		s := st.accounts
		a, _ := s.Create(ctx, account.Spec{Name: "a"})
		b, _ := s.Create(ctx, account.Spec{Name: "b"})
		key, _ := account.NewKey()
		st.rdb.SAdd(ctx, accountKeysKey(a.ID), account.HashKey(key)) // a's claim, cut short
		if _, err := s.AddKey(ctx, b.ID, key); err != nil {
			t.Fatal(err)
		}
		if keys, _ := s.Keys(ctx, a.ID); len(keys) != 0 {
			t.Errorf("account a lists b's key: %+v", keys)
		}
		if keys, _ := s.Keys(ctx, b.ID); len(keys) != 1 {
			t.Errorf("account b lists %d keys", len(keys))
		}
		if k, err := s.RevokeKey(ctx, key[:account.VisiblePrefix]); err != nil || k.AccountID != b.ID {
			t.Errorf("revoke by prefix = %+v, %v", k, err)
		}
	})
	t.Run("account indexed, record not written", func(t *testing.T) {
		st, _ := blankStore(t, Options{})
		st.rdb.ZAdd(ctx, accountsKey(), redis.Z{Score: 1, Member: "acct_ghost"})
		real, _ := st.accounts.Create(ctx, account.Spec{Name: "real"})
		list, err := st.accounts.List(ctx)
		if err != nil || len(list) != 1 || list[0].ID != real.ID {
			t.Errorf("Accounts = %+v, %v; want the real one only", list, err)
		}
		// The recovery reads shards, never the account index: a ghost in
		// it costs nothing.
		for _, n := range []int{ShardOf("acct_ghost"), ShardOf(real.ID)} {
			if w, err := st.tasks.Due(ctx, n, time.Now(), 10); err != nil || len(w.Entries) != 0 {
				t.Errorf("Due(shard %d) = %+v, %v", n, w, err)
			}
		}
	})
}
