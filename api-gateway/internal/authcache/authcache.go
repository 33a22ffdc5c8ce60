// Package authcache remembers, for a short time, what an API key resolved
// to, so most requests authenticate without a Redis round trip. The lifetime
// bounds how long a revoked key or a disabled account keeps working on a
// gateway (the default is 2 s; at most 5 s).
package authcache

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// Authenticator is the source of truth.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (*account.Account, error)
}

type entry struct {
	acct *account.Account
	err  error
}

// Cache is an Authenticator that caches another's answers, successes and
// refusals alike (so guessing keys costs Redis nothing), but never a
// transient failure.
type Cache struct {
	next Authenticator
	lru  *expirable.LRU[[32]byte, entry]
}

// New returns a cache of up to size keys, each kept for ttl. A ttl of 0
// disables caching.
func New(next Authenticator, size int, ttl time.Duration) *Cache {
	c := &Cache{next: next}
	if ttl > 0 {
		c.lru = expirable.NewLRU[[32]byte, entry](size, nil, ttl)
	}
	return c
}

// Authenticate resolves key.
func (c *Cache) Authenticate(ctx context.Context, key string) (*account.Account, error) {
	if c.lru == nil {
		return c.next.Authenticate(ctx, key)
	}
	// Keys are cached under their hash: no key lingers in memory in clear.
	h := sha256.Sum256([]byte(key))
	if e, ok := c.lru.Get(h); ok {
		return e.acct, e.err
	}
	a, err := c.next.Authenticate(ctx, key)
	if err != nil && apperr.IsRetryable(err) {
		return nil, err
	}
	c.lru.Add(h, entry{a, err})
	return a, err
}
