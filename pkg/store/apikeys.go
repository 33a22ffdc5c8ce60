package store

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// An API key is kept as its SHA-256 (account.HashKey) only, with its
// visible prefix for listing.

// CreateKey makes a new key for an account and returns it: the only time
// it is ever shown.
func (s *Accounts) CreateKey(ctx context.Context, accountID string) (string, *account.Key, error) {
	key, err := account.NewKey()
	if err != nil {
		return "", nil, err
	}
	k, err := s.AddKey(ctx, accountID, key)
	if err != nil {
		return "", nil, err
	}
	return key, k, nil
}

// AddKey registers key (from account.NewKey, or chosen by an operator for
// a dev setup) for an account. Only its hash is kept.
func (s *Accounts) AddKey(ctx context.Context, accountID, key string) (*account.Key, error) {
	if !account.Presentable(key) {
		return nil, account.ErrBadKey()
	}
	if _, err := s.Get(ctx, accountID); err != nil {
		return nil, err
	}
	k, won, err := s.claim(ctx, accountID, key)
	if err != nil {
		return nil, err
	}
	if !won {
		return nil, apperr.New(apperr.Invalid, "this API key is already registered")
	}
	return k, nil
}

var claimKeyLua = newScript("claim_key", map[string]int64{"CLAIMED": 1, "TAKEN": 0})

type keyKeys struct {
	Key string `lua:"key"`
}

func (k keyKeys) list() []string { return []string{k.Key} }

type claimKeyArgs struct {
	AccountID string `lua:"account_id"`
	Hash      string `lua:"hash"`
	Prefix    string `lua:"prefix"`
	Created   int64  `lua:"created"`
}

func (a claimKeyArgs) list() []any { return []any{a.AccountID, a.Hash, a.Prefix, a.Created} }

// claim registers key for an account: its record and two indexes (the
// account's keys, keys by visible prefix). They live in three hash slots,
// on a cluster three nodes, so they cannot be written in one step. The
// indexes go first, the record last and only if there is none:
//
//   - a crash after the indexes and before the record leaves index entries
//     that point at no record, or at another account's (if that account
//     claimed the same key meanwhile); readers skip both (keysByHash with
//     an account), and a retry writes the same entries again;
//   - a key works only once its record exists, and by then it is listed:
//     no working key is ever missing from its account's list or its prefix.
func (s *Accounts) claim(ctx context.Context, accountID, key string) (*account.Key, bool, error) {
	h := account.HashKey(key)
	k := &account.Key{Prefix: account.VisibleOf(key), AccountID: accountID, CreatedAt: s.db.now().Truncate(time.Millisecond)}
	if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, accountKeysKey(accountID), h)
		p.SAdd(ctx, keyPrefixKey(k.Prefix), h)
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("store: index key: %w", err)
	}
	res, err := claimKeyLua.run(ctx, s.db, keyKeys{Key: apiKeyKey(h)}.list(),
		claimKeyArgs{AccountID: accountID, Hash: h, Prefix: k.Prefix, Created: k.CreatedAt.UnixMilli()}.list())
	if err != nil {
		return nil, false, fmt.Errorf("store: add key: %w", err)
	}
	code, err := claimKeyLua.reply(res).code()
	if err != nil {
		return nil, false, err
	}
	return k, code == 1, nil
}

// EnsureKey makes key work: if it already belongs to an account, that
// account is returned; otherwise a new active account made from spec gets
// it. It is safe to run from several processes at once (every gateway
// replica at start).
func (s *Accounts) EnsureKey(ctx context.Context, key string, spec account.Spec) (*account.Account, error) {
	if !account.Presentable(key) {
		return nil, account.ErrBadKey()
	}
	h := account.HashKey(key)
	owner := func() (*account.Account, error) {
		id, err := s.db.rdb.HGet(ctx, apiKeyKey(h), fKeyAccount).Result()
		if err != nil {
			return nil, fmt.Errorf("store: key owner: %w", err)
		}
		return s.Get(ctx, id)
	}
	if exists, err := s.db.rdb.Exists(ctx, apiKeyKey(h)).Result(); err != nil {
		return nil, fmt.Errorf("store: ensure key: %w", err)
	} else if exists == 1 {
		return owner()
	}
	a, err := s.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	if _, won, err := s.claim(ctx, a.ID, key); err != nil {
		return nil, err
	} else if !won {
		// Another process claimed it first: use its account, drop ours.
		_ = s.db.rdb.Del(ctx, accountKey(a.ID), ledgerKey(a.ID)).Err()
		_ = s.db.rdb.ZRem(ctx, accountsKey(), a.ID).Err()
		return owner()
	}
	return a, nil
}

// storedKey is a key record and its hash.
type storedKey struct {
	account.Key
	hash string
}

// keysByHash reads the key records of hashes, skipping hashes with no
// record and, when accountID is not "", records of another account (index
// entries a crash or a lost race left behind: see claim).
func (s *Accounts) keysByHash(ctx context.Context, accountID string, hashes []string) ([]storedKey, error) {
	keys := make([]string, len(hashes))
	for i, h := range hashes {
		keys[i] = apiKeyKey(h)
	}
	records, err := s.db.hgetAll(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("store: keys: %w", err)
	}
	out := make([]storedKey, 0, len(hashes))
	for _, m := range records {
		if len(m) == 0 {
			continue
		}
		if accountID != "" && m[fKeyAccount] != accountID {
			continue
		}
		created, _ := strconv.ParseInt(m[fKeyCreated], 10, 64)
		revoked, _ := strconv.ParseInt(m[fKeyRevoked], 10, 64)
		k := storedKey{Key: account.Key{Prefix: m[fKeyPrefix], AccountID: m[fKeyAccount], CreatedAt: time.UnixMilli(created), Revoked: revoked > 0}, hash: m[fKeyHash]}
		if revoked > 0 {
			k.RevokedAt = time.UnixMilli(revoked)
		}
		out = append(out, k)
	}
	return out, nil
}

// Keys returns an account's keys, oldest first.
func (s *Accounts) Keys(ctx context.Context, accountID string) ([]*account.Key, error) {
	if _, err := s.Get(ctx, accountID); err != nil {
		return nil, err
	}
	hashes, err := s.db.rdb.SMembers(ctx, accountKeysKey(accountID)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: keys: %w", err)
	}
	found, err := s.keysByHash(ctx, accountID, hashes)
	if err != nil {
		return nil, err
	}
	keys := make([]*account.Key, len(found))
	for i := range found {
		keys[i] = &found[i].Key
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].CreatedAt.Before(keys[j].CreatedAt) })
	return keys, nil
}

var revokeKeyLua = newScript("revoke_key", map[string]int64{"REVOKED": 1, "NO_KEY": 0, "WAS_REVOKED": 2})

type revokeKeyArgs struct {
	Now int64 `lua:"now"`
}

func (a revokeKeyArgs) list() []any { return []any{a.Now} }

// RevokeKey revokes a key, given whole or by its visible prefix (which
// must name exactly one key). It stops working on every gateway within the
// auth cache's lifetime.
func (s *Accounts) RevokeKey(ctx context.Context, keyOrPrefix string) (*account.Key, error) {
	var hash string
	switch {
	case len(keyOrPrefix) > account.VisiblePrefix:
		hash = account.HashKey(keyOrPrefix)
	case len(keyOrPrefix) == account.VisiblePrefix:
		listed, err := s.db.rdb.SMembers(ctx, keyPrefixKey(keyOrPrefix)).Result()
		if err != nil {
			return nil, fmt.Errorf("store: revoke: %w", err)
		}
		found, err := s.keysByHash(ctx, "", listed)
		if err != nil {
			return nil, err
		}
		switch len(found) {
		case 0:
			return nil, &apperr.NotFoundError{Kind: "key", By: "prefix", ID: keyOrPrefix}
		case 1:
			hash = found[0].hash
		default:
			return nil, apperr.Errorf(apperr.Invalid, "prefix %s matches %d keys: give the whole key", keyOrPrefix, len(found))
		}
	default:
		return nil, apperr.Errorf(apperr.Invalid, "give the whole key or its %d-character prefix (as listed)", account.VisiblePrefix)
	}
	res, err := revokeKeyLua.run(ctx, s.db, keyKeys{Key: apiKeyKey(hash)}.list(), revokeKeyArgs{Now: s.db.now().UnixMilli()}.list())
	if err != nil {
		return nil, fmt.Errorf("store: revoke: %w", err)
	}
	code, err := revokeKeyLua.reply(res).code()
	if err != nil {
		return nil, err
	}
	if code == 0 {
		return nil, &apperr.NotFoundError{Kind: "key"}
	}
	keys, err := s.keysByHash(ctx, "", []string{hash})
	if err != nil || len(keys) == 0 {
		return nil, errors.Join(err, errors.New("store: revoked key vanished"))
	}
	return &keys[0].Key, nil
}

// Authenticate returns the active account a key belongs to. A missing,
// unknown or revoked key is apperr.ErrUnknownKey or apperr.ErrKeyRevoked;
// a disabled account is apperr.ErrAccountDisabled. A Redis failure is
// returned as it is.
func (s *Accounts) Authenticate(ctx context.Context, key string) (*account.Account, error) {
	if !account.Presentable(key) {
		return nil, apperr.ErrUnknownKey
	}
	h := account.HashKey(key)
	rec, err := s.db.hot.HMGet(ctx, apiKeyKey(h), fKeyAccount, fKeyHash, fKeyRevoked).Result()
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
	a, err := s.Get(ctx, acct)
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			return nil, apperr.ErrUnknownKey
		}
		return nil, err
	}
	if a.Status != account.Active {
		return nil, apperr.ErrAccountDisabled
	}
	return a, nil
}
