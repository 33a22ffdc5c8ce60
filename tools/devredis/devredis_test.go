package devredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// miniredis never expires keys on its own; the server's ticker must.
func TestTTLsExpire(t *testing.T) {
	s, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "short", "x", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "long", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(ctx, "short").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("a 1-second key still exists after 5 seconds")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rdb.Exists(ctx, "long").Val() != 1 {
		t.Error("a 1-hour key expired")
	}
}
