// Package redisconn opens the Redis client every Easel process shares between
// its own stores and Asynq.
package redisconn

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Open parses a redis:// or rediss:// URL, connects and pings. The caller
// closes the client.
func Open(ctx context.Context, rawURL string) (*redis.Client, error) {
	return OpenPool(ctx, rawURL, 0)
}

// OpenPool is Open with a connection pool of poolSize (0: go-redis's
// default, 10 per CPU). A worker needs one per job it runs at once, and a
// few more for Asynq's own loops.
func OpenPool(ctx context.Context, rawURL string, poolSize int) (*redis.Client, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if poolSize > 0 {
		opts.PoolSize = poolSize
	}
	// Easel's stores only use RESP2-compatible replies; pinning the protocol
	// keeps replies identical across Redis versions and miniredis.
	opts.Protocol = 2
	opts.DisableIdentity = true
	rdb := redis.NewClient(opts)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	return rdb, nil
}

// LogTo sends go-redis's own messages (pool dial failures and the like),
// which it otherwise prints to stderr, to l at warn level. go-redis keeps
// one process-wide logger, so a main function calls this once.
func LogTo(l *zap.Logger) {
	redis.SetLogger(zapPrintf{l.Sugar().With("component", "go-redis")})
}

type zapPrintf struct{ s *zap.SugaredLogger }

func (z zapPrintf) Printf(_ context.Context, format string, v ...any) { z.s.Warnf(format, v...) }
