package store

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// An attempt given back is taken off its count, never below zero and
// never where nothing was counted; the count keeps its window.
func TestSignInAttemptsGivenBack(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	u := NewUsers(s.db)
	ctx := context.Background()
	names := []string{"pair:e:192.0.2.1", "email:e"}
	for range 3 {
		if _, _, err := u.Attempt(ctx, time.Minute, names, []int64{0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.GiveBackAttempts(ctx, append(names, "email:never-counted")...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want string
	}{{names[0], "2"}, {names[1], "2"}} {
		got, err := s.rdb.Get(ctx, signInKey(c.name)).Result()
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v; want %s", c.name, got, err, c.want)
		}
		if ttl := s.rdb.PTTL(ctx, signInKey(c.name)).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s: ttl %v after a give-back; want its window's", c.name, ttl)
		}
	}
	if n := s.rdb.Exists(ctx, signInKey("email:never-counted")).Val(); n != 0 {
		t.Error("a give-back made a count where there was none")
	}
	for range 5 {
		if err := u.GiveBackAttempts(ctx, names[1]); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.rdb.Get(ctx, signInKey(names[1])).Val(); got != "0" {
		t.Errorf("count after more give-backs than attempts: %q; want 0", got)
	}
}

// An email keeps the networks it signed in from for their time, at most
// keep of them (the latest), in one key that goes with its last network.
func TestKnownNetworksBounded(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, _ := newStoreWith(t, Options{Now: func() time.Time { return now }})
	u := NewUsers(s.db)
	ctx := context.Background()
	const keep = 3
	for i := range 5 {
		now = now.Add(time.Second)
		if err := u.RememberNetwork(ctx, "e", "192.0.2."+strconv.Itoa(i)+"/32", time.Hour, keep); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		known, err := u.KnownNetwork(ctx, "e", "192.0.2."+strconv.Itoa(i)+"/32")
		if err != nil {
			t.Fatal(err)
		}
		if want := i >= 5-keep; known != want {
			t.Errorf("network %d known %v; want %v (the last %d kept)", i, known, want, keep)
		}
	}
	if n := s.rdb.ZCard(ctx, knownNetworksKey("e")).Val(); n != keep {
		t.Errorf("%d networks kept; want %d", n, keep)
	}
	if known, _ := u.KnownNetwork(ctx, "other", "192.0.2.4/32"); known {
		t.Error("a network known for another email")
	}
	// Past their time they are not known, and the key goes.
	now = now.Add(time.Hour)
	if known, _ := u.KnownNetwork(ctx, "e", "192.0.2.4/32"); known {
		t.Error("a network known past its time")
	}
	if ttl := s.rdb.PTTL(ctx, knownNetworksKey("e")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("the networks' key's ttl %v; want at most their time", ttl)
	}
}
