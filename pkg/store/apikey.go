package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
)

// API keys are "esk_" followed by 40 random base62 characters. Only their
// SHA-256 is stored, with a short visible prefix for listing; the key itself
// is shown once, when it is made.

// KeyPrefix starts every API key.
const KeyPrefix = "esk_"

const (
	keyRandLen     = 40
	visiblePrefix  = len(KeyPrefix) + 8 // "esk_AbCd1234"
	maxPresentable = 256                // longest credential we bother hashing
	base62         = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	base36         = "0123456789abcdefghijklmnopqrstuvwxyz"
)

// API key record fields.
const (
	fKeyAccount = "acct"
	fKeyHash    = "hash"
	fKeyPrefix  = "prefix"
	fKeyCreated = "ctime"
	fKeyRevoked = "revoked" // 0, or when it was revoked (Unix ms)
)

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

// Key describes an API key; the key itself is never stored.
type Key struct {
	Prefix    string    `json:"prefix"`
	AccountID string    `json:"account_id"`
	CreatedAt time.Time `json:"created_at"`
	Revoked   bool      `json:"revoked"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	hash      string
}

// CreateKey makes a new key for an account and returns it: the only time it
// is ever shown.
func (s *Store) CreateKey(ctx context.Context, accountID string) (string, *Key, error) {
	key, err := NewKey()
	if err != nil {
		return "", nil, err
	}
	k, err := s.AddKey(ctx, accountID, key)
	if err != nil {
		return "", nil, err
	}
	return key, k, nil
}

// claimKey writes a key record only if none exists. Returns 1 when written.
var claimKey = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

func errBadKey() error {
	return invalid("an API key must be 16 to 256 printable characters without spaces")
}

// AddKey registers key (from NewKey, or chosen by an operator for a dev
// setup) for an account. Only its hash is stored.
func (s *Store) AddKey(ctx context.Context, accountID, key string) (*Key, error) {
	if !presentable(key) {
		return nil, errBadKey()
	}
	if _, err := s.Account(ctx, accountID); err != nil {
		return nil, err
	}
	k, won, err := s.claim(ctx, accountID, key)
	if err != nil {
		return nil, err
	}
	if !won {
		return nil, invalid("this API key is already registered")
	}
	return k, nil
}

// claim registers key for an account: its record and two indexes (the
// account's keys, keys by visible prefix). They live in three hash slots,
// on a cluster three nodes, so they cannot be written in one step. The
// indexes go first, the record last and only if there is none:
//
//   - a crash after the indexes and before the record leaves index entries
//     that point at no record, or at another account's (if that account
//     claimed the same key meanwhile); readers skip both (keysByHash with
//     an account, liveHashes), and a retry writes the same entries again;
//   - a key works only once its record exists, and by then it is listed:
//     no working key is ever missing from its account's list or its prefix.
func (s *Store) claim(ctx context.Context, accountID, key string) (*Key, bool, error) {
	h := HashKey(key)
	k := &Key{Prefix: key[:min(len(key), visiblePrefix)], AccountID: accountID, CreatedAt: s.now().Truncate(time.Millisecond)}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, accountKeysKey(accountID), h)
		p.SAdd(ctx, keyPrefixKey(k.Prefix), h)
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("store: index key: %w", err)
	}
	won, err := claimKey.Run(ctx, s.rdb, []string{apiKeyKey(h)},
		fKeyAccount, accountID, fKeyHash, h, fKeyPrefix, k.Prefix, fKeyCreated, k.CreatedAt.UnixMilli(), fKeyRevoked, 0).Int()
	if err != nil {
		return nil, false, fmt.Errorf("store: add key: %w", err)
	}
	return k, won == 1, nil
}

// EnsureKey makes key work: if it already belongs to an account, that account
// is returned; otherwise a new active account made from n gets it. It is safe
// to run from several processes at once (every gateway replica at start).
func (s *Store) EnsureKey(ctx context.Context, key string, n NewAccount) (*Account, error) {
	if !presentable(key) {
		return nil, errBadKey()
	}
	h := HashKey(key)
	owner := func() (*Account, error) {
		id, err := s.rdb.HGet(ctx, apiKeyKey(h), fKeyAccount).Result()
		if err != nil {
			return nil, fmt.Errorf("store: key owner: %w", err)
		}
		return s.Account(ctx, id)
	}
	if exists, err := s.rdb.Exists(ctx, apiKeyKey(h)).Result(); err != nil {
		return nil, fmt.Errorf("store: ensure key: %w", err)
	} else if exists == 1 {
		return owner()
	}
	a, err := s.CreateAccount(ctx, n)
	if err != nil {
		return nil, err
	}
	if _, won, err := s.claim(ctx, a.ID, key); err != nil {
		return nil, err
	} else if !won {
		// Another process claimed it first: use its account, drop ours.
		_ = s.rdb.Del(ctx, accountKey(a.ID), ledgerKey(a.ID)).Err()
		_ = s.rdb.ZRem(ctx, accountsKey(), a.ID).Err()
		return owner()
	}
	return a, nil
}

// keysByHash reads the key records of hashes, skipping hashes with no
// record and, when accountID is not "", records of another account (index
// entries a crash or a lost race left behind: see claim).
func (s *Store) keysByHash(ctx context.Context, accountID string, hashes []string) ([]*Key, error) {
	keys := make([]string, len(hashes))
	for i, h := range hashes {
		keys[i] = apiKeyKey(h)
	}
	records, err := s.hgetAll(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("store: keys: %w", err)
	}
	out := make([]*Key, 0, len(hashes))
	for _, m := range records {
		if len(m) == 0 {
			continue
		}
		if accountID != "" && m[fKeyAccount] != accountID {
			continue
		}
		created, _ := strconv.ParseInt(m[fKeyCreated], 10, 64)
		revoked, _ := strconv.ParseInt(m[fKeyRevoked], 10, 64)
		k := &Key{Prefix: m[fKeyPrefix], AccountID: m[fKeyAccount], CreatedAt: time.UnixMilli(created), Revoked: revoked > 0, hash: m[fKeyHash]}
		if revoked > 0 {
			k.RevokedAt = time.UnixMilli(revoked)
		}
		out = append(out, k)
	}
	return out, nil
}

// Keys returns an account's keys, oldest first.
func (s *Store) Keys(ctx context.Context, accountID string) ([]*Key, error) {
	if _, err := s.Account(ctx, accountID); err != nil {
		return nil, err
	}
	hashes, err := s.rdb.SMembers(ctx, accountKeysKey(accountID)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: keys: %w", err)
	}
	keys, err := s.keysByHash(ctx, accountID, hashes)
	if err != nil {
		return nil, err
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].CreatedAt.Before(keys[j].CreatedAt) })
	return keys, nil
}

var revokeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'revoked') or '0') > 0 then return 2 end
redis.call('HSET', KEYS[1], 'revoked', ARGV[1])
return 1
`)

// RevokeKey revokes a key, given whole or by its visible prefix (which must
// name exactly one key). It stops working on every gateway within the auth
// cache's lifetime.
func (s *Store) RevokeKey(ctx context.Context, keyOrPrefix string) (*Key, error) {
	var hash string
	switch {
	case len(keyOrPrefix) > visiblePrefix:
		hash = HashKey(keyOrPrefix)
	case len(keyOrPrefix) == visiblePrefix:
		listed, err := s.rdb.SMembers(ctx, keyPrefixKey(keyOrPrefix)).Result()
		if err != nil {
			return nil, fmt.Errorf("store: revoke: %w", err)
		}
		found, err := s.keysByHash(ctx, "", listed)
		if err != nil {
			return nil, err
		}
		var hashes []string
		for _, k := range found {
			hashes = append(hashes, k.hash)
		}
		switch len(hashes) {
		case 0:
			return nil, &apperr.NotFoundError{Kind: "key", By: "prefix", ID: keyOrPrefix}
		case 1:
			hash = hashes[0]
		default:
			return nil, invalid("prefix %s matches %d keys: give the whole key", keyOrPrefix, len(hashes))
		}
	default:
		return nil, invalid("give the whole key or its %d-character prefix (as listed)", visiblePrefix)
	}
	n, err := revokeScript.Run(ctx, s.rdb, []string{apiKeyKey(hash)}, s.now().UnixMilli()).Int()
	if err != nil {
		return nil, fmt.Errorf("store: revoke: %w", err)
	}
	if n == 0 {
		return nil, &apperr.NotFoundError{Kind: "key"}
	}
	keys, err := s.keysByHash(ctx, "", []string{hash})
	if err != nil || len(keys) == 0 {
		return nil, errors.Join(err, errors.New("store: revoked key vanished"))
	}
	return keys[0], nil
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

// Authenticate returns the active account a key belongs to. A missing,
// unknown or revoked key is apperr.ErrUnknownKey or apperr.ErrKeyRevoked; a
// disabled account is apperr.ErrAccountDisabled. A Redis failure is returned
// as it is.
func (s *Store) Authenticate(ctx context.Context, key string) (*Account, error) {
	if !presentable(key) {
		return nil, apperr.ErrUnknownKey
	}
	h := HashKey(key)
	rec, err := s.rdb.HMGet(ctx, apiKeyKey(h), fKeyAccount, fKeyHash, fKeyRevoked).Result()
	if err != nil {
		return nil, fmt.Errorf("store: authenticate: %w", err)
	}
	acct, _ := rec[0].(string)
	stored, _ := rec[1].(string)
	revoked, _ := rec[2].(string)
	// The record is found by the hash; comparing the stored hash again, in
	// constant time, guards against a record written under the wrong name.
	if acct == "" || subtle.ConstantTimeCompare([]byte(stored), []byte(h)) != 1 {
		return nil, apperr.ErrUnknownKey
	}
	if revoked != "" && revoked != "0" {
		return nil, apperr.ErrKeyRevoked
	}
	a, err := s.Account(ctx, acct)
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			return nil, apperr.ErrUnknownKey
		}
		return nil, err
	}
	if a.Status != Active {
		return nil, apperr.ErrAccountDisabled
	}
	return a, nil
}
