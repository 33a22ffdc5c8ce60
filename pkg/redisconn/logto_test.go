package redisconn

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/easelhq/easel/tools/testkit/localnet"
)

// While Redis refuses connections, go-redis reports a failed dial on every
// command; LogTo lets the first through and holds back the repeats.
func TestLogToHoldsBackRepeats(t *testing.T) {
	addr := localnet.ClosedAddr(t) // nothing listens there

	core, logs := observer.New(zap.DebugLevel)
	LogTo(zap.New(core))
	t.Cleanup(func() { LogTo(zap.NewNop()) })
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	for i := 0; i < 5; i++ {
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			t.Fatal("a ping to a closed port answered")
		}
	}
	n := 0
	for _, l := range logs.All() {
		if strings.Contains(l.Message, addr) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d lines about %s after 5 failed commands; want 1: %v", n, addr, logs.All())
	}
}
