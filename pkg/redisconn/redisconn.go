// Package redisconn opens the Redis client every Easel process shares between
// its own stores and Asynq.
package redisconn

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Open parses a redis:// or rediss:// URL, connects and pings. The caller
// closes the client.
func Open(ctx context.Context, rawURL string) (*redis.Client, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
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
