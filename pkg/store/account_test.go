package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// base62 is the alphabet of an API key's random part.
const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func TestNewKey(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		k, err := account.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(k, "esk_") || len(k) != 4+40 {
			t.Fatalf("key %q", k)
		}
		for _, c := range k[4:] {
			if !strings.ContainsRune(base62, c) {
				t.Fatalf("key %q has %q", k, c)
			}
		}
		if seen[k] {
			t.Fatal("duplicate key")
		}
		seen[k] = true
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	st, srv := blankStore(t, Options{})
	rdb := srv.Client(t)
	s := st.accounts
	ctx := context.Background()
	a, err := s.Create(ctx, account.Spec{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := s.CreateKey(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Create(ctx, account.Spec{Name: "off"})
	offKey, _, err := s.CreateKey(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	revokedKey, _, _ := s.CreateKey(ctx, a.ID)
	if _, err := s.RevokeKey(ctx, revokedKey); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStatus(ctx, b.ID, account.Disabled); err != nil {
		t.Fatal(err)
	}
	other, _ := account.NewKey()

	tests := []struct {
		name string
		key  string
		want error
	}{
		{"valid", key, nil},
		{"unknown", other, apperr.ErrUnknownKey},
		{"empty", "", apperr.ErrUnknownKey},
		{"too short", "esk_abc", apperr.ErrUnknownKey},
		{"control characters", key + "\n", apperr.ErrUnknownKey},
		{"huge", strings.Repeat("k", 10_000), apperr.ErrUnknownKey},
		{"disabled account", offKey, apperr.ErrAccountDisabled},
		{"revoked", revokedKey, apperr.ErrKeyRevoked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Authenticate(ctx, tt.key)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("Authenticate = %v; want %v", err, tt.want)
			}
			if err == nil && got.ID != a.ID {
				t.Errorf("account %s; want %s", got.ID, a.ID)
			}
		})
	}

	// Only the hash is stored, never the key.
	keys := rdb.Keys(ctx, "*").Val()
	for _, k := range keys {
		if strings.Contains(k, key) {
			t.Errorf("Redis key %q contains the API key", k)
		}
		for _, v := range rdb.HGetAll(ctx, k).Val() {
			if strings.Contains(v, key) {
				t.Errorf("Redis hash %q holds the API key", k)
			}
		}
	}
	if rdb.Exists(ctx, apiKeyKey(account.HashKey(key))).Val() != 1 {
		t.Error("key record not stored under its hash")
	}
	// Re-enabling restores access.
	if err := s.SetStatus(ctx, b.ID, account.Active); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, offKey); err != nil {
		t.Errorf("re-enabled account: %v", err)
	}
}

// A Redis failure is no refusal: it must not read as an unknown key (which
// a cache would remember); the gateway calls it unavailable.
func TestRedisDownIsNoRefusal(t *testing.T) {
	t.Parallel()
	st, _ := blankStore(t, Options{})
	_ = st.rdb.Close()
	key, _ := account.NewKey()
	_, err := st.accounts.Authenticate(context.Background(), key)
	if err == nil || apperr.CodeOf(err) != apperr.Internal {
		t.Errorf("with Redis closed: %v; want the Redis error, uncoded", err)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	st, _ := blankStore(t, Options{})
	s := st.accounts
	ctx := context.Background()
	if _, err := s.Create(ctx, account.Spec{Name: "  "}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("blank name: %v", err)
	}
	if _, err := s.Create(ctx, account.Spec{Name: "x", Credits: -1}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("negative credits: %v", err)
	}
	if _, err := s.Create(ctx, account.Spec{Name: "x", RateLimit: -5}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("negative rate limit: %v", err)
	}
	if _, err := s.Create(ctx, account.Spec{Name: "x", Models: []catalog.Tier{"turbo"}}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("unknown tier: %v", err)
	}
	if _, err := s.AddKey(ctx, "acct_missing", "esk_0123456789012345678901234567890123456789"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("key for a missing account: %v", err)
	}
	a, _ := s.Create(ctx, account.Spec{Name: "x"})
	if _, err := s.AddKey(ctx, a.ID, "has space in it, long enough"); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("key with spaces: %v", err)
	}
	if _, err := s.AddKey(ctx, a.ID, "esk_0123456789012345678901234567890123456789"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddKey(ctx, a.ID, "esk_0123456789012345678901234567890123456789"); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("same key twice: %v", err)
	}
	if err := s.SetStatus(ctx, a.ID, "paused"); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("unknown status: %v", err)
	}
}

func TestEnsureKey(t *testing.T) {
	t.Parallel()
	st, srv := blankStore(t, Options{})
	s := st.accounts
	ctx := context.Background()
	key := "esk_local_dev_key_0123456789"
	// Every gateway replica runs EnsureKey at start, at the same time.
	ids := make(chan string, 8)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := s.EnsureKey(ctx, key, account.Spec{Name: "dev", Credits: 500})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- a.ID
		}()
	}
	wg.Wait()
	close(ids)
	first := ""
	for id := range ids {
		if first == "" {
			first = id
		}
		if id != first {
			t.Errorf("EnsureKey gave accounts %s and %s", first, id)
		}
	}
	a, err := s.Authenticate(ctx, key)
	if err != nil || a.ID != first || a.Credits != 500 {
		t.Errorf("Authenticate = %+v, %v; want %s with 500 credits", a, err, first)
	}
	// Losing claimants removed their accounts.
	if n := len(srv.Client(t).Keys(ctx, "easel:{s*}:a:*:acct").Val()); n != 1 {
		t.Errorf("%d accounts; want 1", n)
	}
	// The account's first ledger entry is in its record: no ledger key.
	if keys := srv.Client(t).Keys(ctx, "easel:{s*}:a:*:ledger*").Val(); len(keys) != 0 {
		t.Errorf("ledger keys %v; want none", keys)
	}
	if l, err := s.Ledger(ctx, first, 10); err != nil || len(l) != 1 || l[0].Amount != 500 {
		t.Errorf("Ledger = %+v, %v; want the initial credits", l, err)
	}
	if list, _ := s.List(ctx); len(list) != 1 {
		t.Errorf("List has %d accounts; want 1", len(list))
	}
	if _, err := s.EnsureKey(ctx, "short", account.Spec{Name: "dev"}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("short key: %v", err)
	}
}

func TestAccountsAndLimits(t *testing.T) {
	t.Parallel()
	st, srv := blankStore(t, Options{})
	s := st.accounts
	ctx := context.Background()
	a, err := s.Create(ctx, account.Spec{Name: " Acme Inc ", Credits: 100, RateLimit: 5, MaxInflight: 3, Weight: 3, Models: []catalog.Tier{catalog.Pro}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "Acme Inc" || got.Credits != 100 || got.RateLimit != 5 || got.QueryRateLimit != 0 || got.MaxInflight != 3 ||
		got.Weight != 3 || got.Status != account.Active || !slices.Equal(got.Models, []catalog.Tier{catalog.Pro}) || got.CreatedAt.IsZero() {
		t.Errorf("account %+v", got)
	}
	q := 40
	models := []catalog.Tier{}
	got, err = s.SetLimits(ctx, a.ID, account.LimitsUpdate{QueryRateLimit: &q, Models: &models})
	if err != nil {
		t.Fatal(err)
	}
	if got.QueryRateLimit != 40 || got.RateLimit != 5 || got.Weight != 3 || len(got.Models) != 0 {
		t.Errorf("after SetLimits: %+v", got)
	}
	w := 7
	if got, err = s.SetLimits(ctx, a.ID, account.LimitsUpdate{Weight: &w}); err != nil || got.Weight != 7 || got.QueryRateLimit != 40 {
		t.Errorf("SetLimits(weight 7) = %+v, %v", got, err)
	}
	for _, bad := range []int{-1, account.MaxWeight + 1} {
		if _, err := s.SetLimits(ctx, a.ID, account.LimitsUpdate{Weight: &bad}); apperr.CodeOf(err) != apperr.Invalid {
			t.Errorf("SetLimits(weight %d) = %v; want invalid", bad, err)
		}
		if _, err := s.Create(ctx, account.Spec{Name: "x", Weight: bad}); apperr.CodeOf(err) != apperr.Invalid {
			t.Errorf("Create(weight %d) = %v; want invalid", bad, err)
		}
	}
	if got, _ := s.Get(ctx, a.ID); got.Weight != 7 {
		t.Errorf("weight %d after refused updates; want 7", got.Weight)
	}
	if _, err := s.SetLimits(ctx, a.ID, account.LimitsUpdate{}); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("empty SetLimits: %v", err)
	}
	if _, err := s.SetLimits(ctx, "acct_nope", account.LimitsUpdate{QueryRateLimit: &q}); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("SetLimits of a missing account: %v", err)
	}
	if err := s.SetStatus(ctx, "acct_nope", account.Disabled); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("SetStatus of a missing account: %v", err)
	}
	if _, err := srv.Client(t).Exists(ctx, accountKey("acct_nope")).Result(); err != nil {
		t.Fatal(err)
	}
	if n := srv.Client(t).Exists(ctx, accountKey("acct_nope")).Val(); n != 0 {
		t.Error("updating a missing account created it")
	}
	b, _ := s.Create(ctx, account.Spec{Name: "second"})
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Errorf("List = %v, %v", list, err)
	}
}

func TestCreditsAndLedger(t *testing.T) {
	t.Parallel()
	st, _ := blankStore(t, Options{})
	s := st.accounts
	ctx := context.Background()
	a, _ := s.Create(ctx, account.Spec{Name: "acme", Credits: 10})
	if bal, err := s.AddCredits(ctx, a.ID, 90, "top-up"); err != nil || bal != 100 {
		t.Fatalf("AddCredits = %d, %v", bal, err)
	}
	if bal, err := s.AddCredits(ctx, a.ID, -30, ""); err != nil || bal != 70 {
		t.Fatalf("correction = %d, %v", bal, err)
	}
	if _, err := s.AddCredits(ctx, a.ID, -71, ""); apperr.CodeOf(err) != apperr.Invalid || !strings.Contains(apperr.MessageOf(err), "below 0") {
		t.Errorf("overdraw: %v", err)
	}
	if _, err := s.AddCredits(ctx, a.ID, 0, ""); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("zero: %v", err)
	}
	if _, err := s.AddCredits(ctx, "acct_nope", 5, ""); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("missing account: %v", err)
	}
	entries, err := s.Ledger(ctx, a.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		amount, balance int64
		note            string
	}{{-30, 70, "operator adjustment"}, {90, 100, "top-up"}, {10, 10, "initial credits"}}
	if len(entries) != len(want) {
		t.Fatalf("%d entries: %+v", len(entries), entries)
	}
	for i, w := range want {
		e := entries[i]
		if e.Kind != account.Credit || e.Amount != w.amount || e.Balance != w.balance || e.Note != w.note || e.Time.IsZero() {
			t.Errorf("entry %d = %+v; want %+v", i, e, w)
		}
	}
	if got, _ := s.Get(ctx, a.ID); got.Credits != 70 {
		t.Errorf("balance %d", got.Credits)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	st, _ := blankStore(t, Options{})
	s := st.accounts
	ctx := context.Background()
	a, _ := s.Create(ctx, account.Spec{Name: "acme"})
	k1, info, err := s.CreateKey(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Prefix != k1[:12] || info.AccountID != a.ID || info.Revoked {
		t.Errorf("key info %+v", info)
	}
	k2, _, _ := s.CreateKey(ctx, a.ID)
	keys, err := s.Keys(ctx, a.ID)
	if err != nil || len(keys) != 2 {
		t.Fatalf("ListKeys = %v, %v", keys, err)
	}
	for _, k := range keys {
		if strings.Contains(k.Prefix, k1[12:]) || len(k.Prefix) != 12 {
			t.Errorf("listing shows more than the prefix: %q", k.Prefix)
		}
	}
	// Revoke by prefix.
	r, err := s.RevokeKey(ctx, k2[:12])
	if err != nil || !r.Revoked || r.Prefix != k2[:12] {
		t.Fatalf("RevokeKey(prefix) = %+v, %v", r, err)
	}
	if _, err := s.Authenticate(ctx, k2); !errors.Is(err, apperr.ErrKeyRevoked) {
		t.Errorf("revoked key: %v", err)
	}
	if _, err := s.Authenticate(ctx, k1); err != nil {
		t.Errorf("other key stopped working: %v", err)
	}
	if _, err := s.RevokeKey(ctx, k2); err != nil {
		t.Errorf("revoking twice: %v", err)
	}
	// Two keys sharing a visible prefix: the prefix is ambiguous.
	for _, k := range []string{"esk_samepref_AAAAAAAAAAAAAAAA", "esk_samepref_BBBBBBBBBBBBBBBB"} {
		if _, err := s.AddKey(ctx, a.ID, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.RevokeKey(ctx, "esk_samepref"); apperr.CodeOf(err) != apperr.Invalid || !strings.Contains(apperr.MessageOf(err), "matches 2 keys") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	for in, want := range map[string]apperr.Code{
		"esk_":            apperr.Invalid,
		"esk_zzzzzzzz":    apperr.NotFound,
		k1 + "x":          apperr.NotFound,
		"esk_" + k1[4:10]: apperr.Invalid,
	} {
		if _, err := s.RevokeKey(ctx, in); apperr.CodeOf(err) != want {
			t.Errorf("RevokeKey(%q) = %v; want %s", in, err, want)
		}
	}
}
