package account

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/keyspace"
	"github.com/easelhq/easel/pkg/redistest"
)

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		k, err := NewKey()
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
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := NewStore(rdb)
	ctx := context.Background()
	a, err := s.CreateAccount(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewKey()
	if err := s.AddKey(ctx, a.ID, key); err != nil {
		t.Fatal(err)
	}
	b, _ := s.CreateAccount(ctx, "off")
	offKey, _ := NewKey()
	if err := s.AddKey(ctx, b.ID, offKey); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStatus(ctx, b.ID, Disabled); err != nil {
		t.Fatal(err)
	}
	other, _ := NewKey()

	tests := []struct {
		name string
		key  string
		want apperr.Code
	}{
		{"valid", key, ""},
		{"unknown", other, apperr.Unauthenticated},
		{"empty", "", apperr.Unauthenticated},
		{"too short", "esk_abc", apperr.Unauthenticated},
		{"control characters", key + "\n", apperr.Unauthenticated},
		{"huge", strings.Repeat("k", 10_000), apperr.Unauthenticated},
		{"disabled account", offKey, apperr.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Authenticate(ctx, tt.key)
			if code := apperr.CodeOf(err); code != tt.want {
				t.Fatalf("Authenticate = %v; want code %q", err, tt.want)
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
	if rdb.Exists(ctx, keyspace.APIKey(HashKey(key))).Val() != 1 {
		t.Error("key record not stored under its hash")
	}
	// Re-enabling restores access.
	if err := s.SetStatus(ctx, b.ID, Active); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, offKey); err != nil {
		t.Errorf("re-enabled account: %v", err)
	}
}

func TestRedisDownIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := NewStore(rdb)
	_ = rdb.Close()
	key, _ := NewKey()
	if _, err := s.Authenticate(context.Background(), key); apperr.CodeOf(err) != apperr.Unavailable {
		t.Errorf("with Redis closed: %v; want Unavailable", err)
	}
}

func TestValidation(t *testing.T) {
	srv := redistest.Start(t)
	s := NewStore(srv.Client(t))
	ctx := context.Background()
	if _, err := s.CreateAccount(ctx, "  "); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("blank name: %v", err)
	}
	if err := s.AddKey(ctx, "acct_missing", "esk_0123456789012345678901234567890123456789"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("key for a missing account: %v", err)
	}
	a, _ := s.CreateAccount(ctx, "x")
	if err := s.AddKey(ctx, a.ID, "has space in it, long enough"); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("key with spaces: %v", err)
	}
	if err := s.SetStatus(ctx, a.ID, "paused"); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("unknown status: %v", err)
	}
}

func TestEnsureKey(t *testing.T) {
	srv := redistest.Start(t)
	s := NewStore(srv.Client(t))
	ctx := context.Background()
	key := "esk_local_dev_key_0123456789"
	// Every gateway replica runs EnsureKey at start, at the same time.
	ids := make(chan string, 8)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := s.EnsureKey(ctx, key, "dev")
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
	if err != nil || a.ID != first {
		t.Errorf("Authenticate = %v, %v; want %s", a, err, first)
	}
	// Losing claimants removed their accounts.
	if n := len(srv.Client(t).Keys(ctx, "easel:{a:*}:acct").Val()); n != 1 {
		t.Errorf("%d accounts; want 1", n)
	}
	if _, err := s.EnsureKey(ctx, "short", "dev"); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("short key: %v", err)
	}
}
