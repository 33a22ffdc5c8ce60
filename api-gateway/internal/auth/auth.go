// Package auth authenticates API keys for the gateway. Cache remembers, for
// a short time, what a key resolved to, so most requests authenticate without
// a Redis round trip; the lifetime bounds how long a revoked key or a
// disabled account keeps working on a gateway (the default is 2 s; at most
// 5 s).
package auth

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// Authenticator resolves an API key to its account: the one interface of
// authentication on the gateway, which the store, the cache and the HTTP
// middleware share.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (*account.Account, error)
}

type entry struct {
	acct *account.Account
	err  error
}

// Cache is an Authenticator that caches another's answers, successes and
// refusals alike (so guessing keys costs Redis nothing), but never a failure
// to answer, which it reports as apperr.Unavailable.
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

// refusal reports whether err is an answer about the key (unknown, revoked,
// a disabled account) rather than a failure to find out.
func refusal(err error) bool {
	switch apperr.CodeOf(err) {
	case apperr.Unauthenticated, apperr.Forbidden:
		return true
	}
	return false
}

// Known returns the account of key if the cache holds it resolved (not
// refused): a check that costs nothing and cannot fail, so the Guard need
// not count it.
func (c *Cache) Known(key string) (*account.Account, bool) {
	if c.lru == nil {
		return nil, false
	}
	e, ok := c.lru.Get(sha256.Sum256([]byte(key)))
	if !ok || e.err != nil {
		return nil, false
	}
	return e.acct, true
}

// Authenticate resolves key.
func (c *Cache) Authenticate(ctx context.Context, key string) (*account.Account, error) {
	var h [32]byte
	if c.lru != nil {
		// Keys are cached under their hash: no key lingers in memory in clear.
		h = sha256.Sum256([]byte(key))
		if e, ok := c.lru.Get(h); ok {
			return e.acct, e.err
		}
	}
	a, err := c.next.Authenticate(ctx, key)
	if err != nil && !refusal(err) {
		if apperr.CodeOf(err) == apperr.Unavailable {
			return nil, err
		}
		return nil, apperr.Transient(err, apperr.Unavailable, "authentication is unavailable, try again")
	}
	if c.lru != nil {
		c.lru.Add(h, entry{a, err})
	}
	return a, err
}
