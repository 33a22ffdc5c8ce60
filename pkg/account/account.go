// Package account keeps accounts and their API keys in Redis and
// authenticates requests.
//
// API keys are "esk_" followed by 40 random base62 characters. Only their
// SHA-256 is stored (keyspace.APIKey), with a short visible prefix for
// listing; the key itself is shown once, when it is made.
package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/keyspace"
)

// Status is an account's state.
type Status string

// Statuses.
const (
	Active   Status = "active"
	Disabled Status = "disabled"
)

// Account is a customer account.
type Account struct {
	ID        string
	Name      string
	Status    Status
	CreatedAt time.Time
}

// KeyPrefix starts every API key.
const KeyPrefix = "esk_"

const (
	keyRandLen     = 40
	visiblePrefix  = len(KeyPrefix) + 6
	maxPresentable = 256 // longest credential we bother hashing
	base62         = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	base36         = "0123456789abcdefghijklmnopqrstuvwxyz"
)

// Store reads and writes accounts and keys.
type Store struct {
	rdb redis.UniversalClient
	now func() time.Time
}

// NewStore returns a store on rdb.
func NewStore(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, now: time.Now}
}

// randomString returns n characters drawn uniformly from alphabet.
func randomString(n int, alphabet string) (string, error) {
	// Rejection sampling keeps the draw uniform: use only bytes below the
	// largest multiple of len(alphabet).
	limit := byte(256 - 256%len(alphabet))
	out := make([]byte, 0, n)
	buf := make([]byte, n*2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}

// NewKey returns a fresh random API key.
func NewKey() (string, error) {
	r, err := randomString(keyRandLen, base62)
	if err != nil {
		return "", err
	}
	return KeyPrefix + r, nil
}

// HashKey returns the hex SHA-256 of a key, the form in which it is stored.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Account record fields.
const (
	fName    = "name"
	fStatus  = "status"
	fCreated = "ctime"
)

// Key record fields.
const (
	fKeyAccount = "acct"
	fKeyHash    = "hash"
	fKeyPrefix  = "prefix"
)

// CreateAccount makes an active account.
func (s *Store) CreateAccount(ctx context.Context, name string) (*Account, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return nil, apperr.New(apperr.Invalid, "account name must be 1 to 200 characters")
	}
	suffix, err := randomString(20, base36)
	if err != nil {
		return nil, err
	}
	a := &Account{ID: "acct_" + suffix, Name: name, Status: Active, CreatedAt: s.now().Truncate(time.Millisecond)}
	if err := s.rdb.HSet(ctx, keyspace.Account(a.ID),
		fName, a.Name, fStatus, string(a.Status), fCreated, a.CreatedAt.UnixMilli()).Err(); err != nil {
		return nil, fmt.Errorf("account: create: %w", err)
	}
	return a, nil
}

// Get returns an account; apperr.NotFound when there is none.
func (s *Store) Get(ctx context.Context, id string) (*Account, error) {
	m, err := s.rdb.HGetAll(ctx, keyspace.Account(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("account: get %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, apperr.Errorf(apperr.NotFound, "account %s not found", id)
	}
	ms, _ := strconv.ParseInt(m[fCreated], 10, 64)
	return &Account{ID: id, Name: m[fName], Status: Status(m[fStatus]), CreatedAt: time.UnixMilli(ms)}, nil
}

// SetStatus enables or disables an account.
func (s *Store) SetStatus(ctx context.Context, id string, st Status) error {
	if st != Active && st != Disabled {
		return apperr.Errorf(apperr.Invalid, "unknown account status %q", st)
	}
	if _, err := s.Get(ctx, id); err != nil {
		return err
	}
	return s.rdb.HSet(ctx, keyspace.Account(id), fStatus, string(st)).Err()
}

// AddKey registers key (from NewKey, or chosen by an operator for a dev
// setup) for an account. Only its hash is stored.
func (s *Store) AddKey(ctx context.Context, accountID, key string) error {
	if !presentable(key) {
		return apperr.New(apperr.Invalid, "an API key must be 16 to 256 printable characters without spaces")
	}
	if _, err := s.Get(ctx, accountID); err != nil {
		return err
	}
	h := HashKey(key)
	if err := s.rdb.HSet(ctx, keyspace.APIKey(h),
		fKeyAccount, accountID, fKeyHash, h, fKeyPrefix, key[:min(len(key), visiblePrefix)],
		fCreated, s.now().UnixMilli()).Err(); err != nil {
		return fmt.Errorf("account: add key: %w", err)
	}
	return nil
}

// claimKey writes a key record only if none exists. Returns 1 when written.
var claimKey = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

// EnsureKey makes key work: if it already belongs to an account, that account
// is returned; otherwise a new active account named name gets it. It is safe
// to run from several processes at once (every gateway replica at start).
func (s *Store) EnsureKey(ctx context.Context, key, name string) (*Account, error) {
	if !presentable(key) {
		return nil, apperr.New(apperr.Invalid, "an API key must be 16 to 256 printable characters without spaces")
	}
	h := HashKey(key)
	owner := func() (*Account, error) {
		id, err := s.rdb.HGet(ctx, keyspace.APIKey(h), fKeyAccount).Result()
		if err != nil {
			return nil, fmt.Errorf("account: key owner: %w", err)
		}
		return s.Get(ctx, id)
	}
	if n, err := s.rdb.Exists(ctx, keyspace.APIKey(h)).Result(); err != nil {
		return nil, fmt.Errorf("account: ensure key: %w", err)
	} else if n == 1 {
		return owner()
	}
	a, err := s.CreateAccount(ctx, name)
	if err != nil {
		return nil, err
	}
	won, err := claimKey.Run(ctx, s.rdb, []string{keyspace.APIKey(h)},
		fKeyAccount, a.ID, fKeyHash, h, fKeyPrefix, key[:min(len(key), visiblePrefix)], fCreated, s.now().UnixMilli()).Int()
	if err != nil {
		return nil, fmt.Errorf("account: ensure key: %w", err)
	}
	if won == 0 {
		// Another process claimed it first: use its account, drop ours.
		_ = s.rdb.Del(ctx, keyspace.Account(a.ID)).Err()
		return owner()
	}
	return a, nil
}

// presentable reports whether s could be an API key at all.
func presentable(s string) bool {
	if len(s) < 16 || len(s) > maxPresentable {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Authenticate returns the active account a key belongs to. A missing or
// unknown key is apperr.Unauthenticated; a disabled account is
// apperr.PermissionDenied.
func (s *Store) Authenticate(ctx context.Context, key string) (*Account, error) {
	if !presentable(key) {
		return nil, apperr.New(apperr.Unauthenticated, "invalid API key")
	}
	h := HashKey(key)
	rec, err := s.rdb.HMGet(ctx, keyspace.APIKey(h), fKeyAccount, fKeyHash).Result()
	if err != nil {
		return nil, apperr.Transient(err, apperr.Unavailable, "authentication is unavailable, try again")
	}
	acct, _ := rec[0].(string)
	stored, _ := rec[1].(string)
	// The record is found by the hash; comparing the stored hash again, in
	// constant time, guards against a record written under the wrong name.
	if acct == "" || subtle.ConstantTimeCompare([]byte(stored), []byte(h)) != 1 {
		return nil, apperr.New(apperr.Unauthenticated, "invalid API key")
	}
	a, err := s.Get(ctx, acct)
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			return nil, apperr.New(apperr.Unauthenticated, "invalid API key")
		}
		return nil, apperr.Transient(err, apperr.Unavailable, "authentication is unavailable, try again")
	}
	if a.Status != Active {
		return nil, apperr.New(apperr.PermissionDenied, "this account is disabled")
	}
	return a, nil
}
