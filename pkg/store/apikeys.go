package store

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// An API key is kept as its SHA-256 (account.HashKey) only, with its
// visible prefix for listing.

// CreateKey makes a new key for an account and returns it: the only time
// it is ever shown.
func (s *Accounts) CreateKey(ctx context.Context, accountID string) (string, *account.Key, error) {
	return s.NewKey(ctx, accountID, account.KeySpec{})
}

// NewKey makes a new key for an account with a name and limits, and
// returns it: the only time it is ever shown.
func (s *Accounts) NewKey(ctx context.Context, accountID string, spec account.KeySpec) (string, *account.Key, error) {
	key, err := account.NewKey()
	if err != nil {
		return "", nil, err
	}
	k, err := s.addKey(ctx, accountID, key, spec)
	if err != nil {
		return "", nil, err
	}
	return key, k, nil
}

// AddKey registers key (from account.NewKey, or chosen by an operator for
// a dev setup) for an account. Only its hash is kept.
func (s *Accounts) AddKey(ctx context.Context, accountID, key string) (*account.Key, error) {
	return s.addKey(ctx, accountID, key, account.KeySpec{})
}

func (s *Accounts) addKey(ctx context.Context, accountID, key string, spec account.KeySpec) (*account.Key, error) {
	if !account.Presentable(key) {
		return nil, account.ErrBadKey()
	}
	name, err := account.CheckKeyName(spec.Name)
	if err != nil {
		return nil, err
	}
	spec.Name = name
	if err := spec.KeyLimits.Check(s.db.now()); err != nil {
		return nil, err
	}
	if _, err := s.Get(ctx, accountID); err != nil {
		return nil, err
	}
	if err := s.roomForKey(ctx, accountID); err != nil {
		return nil, err
	}
	k, won, err := s.claim(ctx, accountID, key, spec)
	if err != nil {
		return nil, err
	}
	if !won {
		return nil, apperr.New(apperr.Invalid, "this API key is already registered")
	}
	return k, nil
}

// roomForKey refuses a key past the account's bounds: MaxKeys in all,
// MaxActiveKeys working. (Two creates at once may both pass by one: the
// bounds keep an account's keys from growing without end, not exact.)
func (s *Accounts) roomForKey(ctx context.Context, accountID string) error {
	n, err := s.db.rdb.SCard(ctx, accountKeysKey(accountID)).Result()
	if err != nil {
		return fmt.Errorf("store: count keys: %w", err)
	}
	if n >= account.MaxKeys {
		return apperr.Errorf(apperr.LimitExceeded, "this account has %d API keys, the most it may have", n)
	}
	if n < account.MaxActiveKeys {
		return nil
	}
	keys, err := s.Keys(ctx, accountID)
	if err != nil {
		return err
	}
	now, active := s.db.now(), 0
	for _, k := range keys {
		if k.Status(now) == account.KeyActive {
			active++
		}
	}
	if active >= account.MaxActiveKeys {
		return apperr.Errorf(apperr.LimitExceeded, "this account has %d working API keys, the most it may have: revoke one first", active)
	}
	return nil
}

var claimKeyLua = newScript[keyKeys, claimKeyArgs, codeReply]("claim_key", map[string]int64{"CLAIMED": 1, "TAKEN": 0})

type keyKeys struct {
	Key string `lua:"key"`
}

type claimKeyArgs struct {
	AccountID  string `lua:"account_id"`
	Hash       string `lua:"hash"`
	Prefix     string `lua:"prefix"`
	Created    int64  `lua:"created"`
	Name       string `lua:"name"`
	Models     string `lua:"models"`
	IPs        string `lua:"ips"`
	Expires    int64  `lua:"expires"`
	SpendLimit int64  `lua:"spend_limit"`
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func unixMsOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

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
func (s *Accounts) claim(ctx context.Context, accountID, key string, spec account.KeySpec) (*account.Key, bool, error) {
	h := account.HashKey(key)
	k := &account.Key{Prefix: account.VisibleOf(key), AccountID: accountID, Name: spec.Name,
		CreatedAt: s.db.now().Truncate(time.Millisecond), KeyLimits: spec.KeyLimits}
	if !k.ExpiresAt.IsZero() {
		k.ExpiresAt = k.ExpiresAt.Truncate(time.Millisecond)
	}
	if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, accountKeysKey(accountID), h)
		p.SAdd(ctx, keyPrefixKey(k.Prefix), h)
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("store: index key: %w", err)
	}
	r, err := claimKeyLua.run(ctx, s.db, keyKeys{Key: apiKeyKey(h)},
		claimKeyArgs{AccountID: accountID, Hash: h, Prefix: k.Prefix, Created: k.CreatedAt.UnixMilli(), Name: k.Name,
			Models: joinTiers(k.Models), IPs: joinPrefixes(k.AllowedIPs), Expires: unixMsOrZero(k.ExpiresAt), SpendLimit: k.SpendLimit})
	if err != nil {
		return nil, false, fmt.Errorf("store: add key: %w", err)
	}
	return k, r.Code == 1, nil
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
	if _, won, err := s.claim(ctx, a.ID, key, account.KeySpec{}); err != nil {
		return nil, err
	} else if !won {
		// Another process claimed it first: use its account, drop ours.
		_ = s.db.rdb.Del(ctx, accountKey(a.ID), ledgerKey(a.ID), ledgerShortKey(a.ID)).Err()
		_ = s.db.rdb.ZRem(ctx, accountsKey(), a.ID).Err()
		_ = s.db.rdb.ZRem(ctx, accountNamesKey(), nameEntry(a.Name, a.ID)).Err()
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
		out = append(out, storedKey{Key: decodeKey(m), hash: m[fKeyHash]})
	}
	return out, nil
}

// decodeKey reads a key record (its spend apart).
func decodeKey(m map[string]string) account.Key {
	ms := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	k := account.Key{Prefix: m[fKeyPrefix], AccountID: m[fKeyAccount], Name: m[fKeyName], CreatedAt: time.UnixMilli(ms(fKeyCreated))}
	if r := ms(fKeyRevoked); r > 0 {
		k.Revoked, k.RevokedAt = true, time.UnixMilli(r)
	}
	if u := ms(fKeyUsed); u > 0 {
		k.LastUsedAt = time.UnixMilli(u)
	}
	k.KeyLimits = decodeKeyLimits(m[fKeyModels], m[fKeyIPs], m[fKeyExpires], m[fKeyLimit])
	return k
}

// decodeKeyLimits reads a key record's limits.
func decodeKeyLimits(models, ips, expires, limit string) account.KeyLimits {
	var l account.KeyLimits
	if models != "" {
		for _, t := range strings.Split(models, ",") {
			l.Models = append(l.Models, catalog.Tier(t))
		}
	}
	if ips != "" {
		for _, p := range strings.Split(ips, ",") {
			if pr, err := netip.ParsePrefix(p); err == nil {
				l.AllowedIPs = append(l.AllowedIPs, pr)
			}
		}
	}
	if e, _ := strconv.ParseInt(expires, 10, 64); e > 0 {
		l.ExpiresAt = time.UnixMilli(e)
	}
	l.SpendLimit, _ = strconv.ParseInt(limit, 10, 64)
	return l
}

// withSpend fills keys' Spent from their account's spend counters.
func (s *Accounts) withSpend(ctx context.Context, accountID string, keys []storedKey) error {
	if len(keys) == 0 {
		return nil
	}
	hashes := make([]string, len(keys))
	for i, k := range keys {
		hashes[i] = k.hash
	}
	spent, err := s.db.rdb.HMGet(ctx, spendKey(accountID), hashes...).Result()
	if err != nil {
		return fmt.Errorf("store: keys' spend: %w", err)
	}
	for i, v := range spent {
		if str, ok := v.(string); ok {
			keys[i].Spent, _ = strconv.ParseInt(str, 10, 64)
		}
	}
	return nil
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
	if err := s.withSpend(ctx, accountID, found); err != nil {
		return nil, err
	}
	keys := make([]*account.Key, len(found))
	for i := range found {
		keys[i] = &found[i].Key
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].CreatedAt.Before(keys[j].CreatedAt) })
	return keys, nil
}

var revokeKeyLua = newScript[keyKeys, revokeKeyArgs, codeReply]("revoke_key", map[string]int64{"REVOKED": 1, "NO_KEY": 0, "WAS_REVOKED": 2})

type revokeKeyArgs struct {
	Now int64 `lua:"now"`
}

// findKey finds the key given whole or by its visible prefix (which must
// name exactly one key), of accountID's when it is not "". Another
// account's key is not found.
func (s *Accounts) findKey(ctx context.Context, accountID, keyOrPrefix string) (storedKey, error) {
	var hashes []string
	switch {
	case len(keyOrPrefix) > account.VisiblePrefix:
		hashes = []string{account.HashKey(keyOrPrefix)}
	case len(keyOrPrefix) == account.VisiblePrefix:
		listed, err := s.db.rdb.SMembers(ctx, keyPrefixKey(keyOrPrefix)).Result()
		if err != nil {
			return storedKey{}, fmt.Errorf("store: key %s: %w", keyOrPrefix, err)
		}
		hashes = listed
	default:
		return storedKey{}, apperr.Errorf(apperr.Invalid, "give the whole key or its %d-character prefix (as listed)", account.VisiblePrefix)
	}
	found, err := s.keysByHash(ctx, accountID, hashes)
	if err != nil {
		return storedKey{}, err
	}
	switch len(found) {
	case 0:
		if len(keyOrPrefix) > account.VisiblePrefix {
			return storedKey{}, &apperr.NotFoundError{Kind: "key"}
		}
		return storedKey{}, &apperr.NotFoundError{Kind: "key", By: "prefix", ID: keyOrPrefix}
	case 1:
		return found[0], nil
	}
	return storedKey{}, apperr.Errorf(apperr.Invalid, "prefix %s matches %d keys: give the whole key", keyOrPrefix, len(found))
}

// RevokeKey revokes a key, given whole or by its visible prefix (which
// must name exactly one key). It stops working on every gateway within the
// auth cache's lifetime.
func (s *Accounts) RevokeKey(ctx context.Context, keyOrPrefix string) (*account.Key, error) {
	return s.RevokeKeyOf(ctx, "", keyOrPrefix)
}

// RevokeKeyOf is RevokeKey of one account's key ("": any account's).
func (s *Accounts) RevokeKeyOf(ctx context.Context, accountID, keyOrPrefix string) (*account.Key, error) {
	k, err := s.findKey(ctx, accountID, keyOrPrefix)
	if err != nil {
		return nil, err
	}
	r, err := revokeKeyLua.run(ctx, s.db, keyKeys{Key: apiKeyKey(k.hash)}, revokeKeyArgs{Now: s.db.now().UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("store: revoke: %w", err)
	}
	if r.Code == 0 {
		return nil, &apperr.NotFoundError{Kind: "key"}
	}
	return s.reread(ctx, k)
}

// reread reads a key again, with its spend.
func (s *Accounts) reread(ctx context.Context, k storedKey) (*account.Key, error) {
	keys, err := s.keysByHash(ctx, k.AccountID, []string{k.hash})
	if err != nil || len(keys) == 0 {
		return nil, errors.Join(err, errors.New("store: key vanished"))
	}
	if err := s.withSpend(ctx, k.AccountID, keys); err != nil {
		return nil, err
	}
	return &keys[0].Key, nil
}

// UpdateKey renames a key or changes its limits (of accountID's keys when
// it is not ""), and returns it. Every gateway applies the change within
// its auth cache's lifetime.
func (s *Accounts) UpdateKey(ctx context.Context, accountID, keyOrPrefix string, u account.KeyUpdate) (*account.Key, error) {
	if u.Empty() {
		return nil, apperr.New(apperr.Invalid, "nothing to change: give a name, models, allowed_ips, expires_at or spend_limit")
	}
	var fields []any
	if u.Name != nil {
		name, err := account.CheckKeyName(*u.Name)
		if err != nil {
			return nil, err
		}
		fields = append(fields, fKeyName, name)
	}
	l := account.KeyLimits{}
	if u.Models != nil {
		l.Models = *u.Models
		fields = append(fields, fKeyModels, joinTiers(*u.Models))
	}
	if u.AllowedIPs != nil {
		l.AllowedIPs = *u.AllowedIPs
		fields = append(fields, fKeyIPs, joinPrefixes(*u.AllowedIPs))
	}
	if u.SpendLimit != nil {
		l.SpendLimit = *u.SpendLimit
		fields = append(fields, fKeyLimit, *u.SpendLimit)
	}
	if u.ExpiresAt != nil {
		l.ExpiresAt = *u.ExpiresAt
		fields = append(fields, fKeyExpires, unixMsOrZero(*u.ExpiresAt))
	}
	if err := l.Check(s.db.now()); err != nil {
		return nil, err
	}
	k, err := s.findKey(ctx, accountID, keyOrPrefix)
	if err != nil {
		return nil, err
	}
	// Only an existing record is changed (a revoke or a crash between the
	// lookup and the write leaves nothing half-made: HSET on a record
	// that vanished would make a key-less one, which keysByHash skips, but
	// the script is not worth it: records are never deleted).
	if err := s.db.rdb.HSet(ctx, apiKeyKey(k.hash), fields...).Err(); err != nil {
		return nil, fmt.Errorf("store: update key: %w", err)
	}
	return s.reread(ctx, k)
}

// keyUsedEvery is how stale a key's last use may be before a lookup
// writes it again: at most one write a minute a key.
const keyUsedEvery = time.Minute

// Authenticate returns the active account a key belongs to, with the key
// and its limits (Via). A missing, unknown or revoked key is
// apperr.ErrUnknownKey or apperr.ErrKeyRevoked; a disabled account is
// apperr.ErrAccountDisabled. A Redis failure is returned as it is. The
// key's expiry, addresses and models are the caller's to apply (they
// depend on the time, the client and the request).
func (s *Accounts) Authenticate(ctx context.Context, key string) (*account.Account, error) {
	if !account.Presentable(key) {
		return nil, apperr.ErrUnknownKey
	}
	h := account.HashKey(key)
	rec, err := s.db.hot.HMGet(ctx, apiKeyKey(h), fKeyAccount, fKeyHash, fKeyRevoked,
		fKeyPrefix, fKeyModels, fKeyIPs, fKeyExpires, fKeyLimit, fKeyUsed).Result()
	if err != nil {
		return nil, fmt.Errorf("store: authenticate: %w", err)
	}
	str := func(i int) string { v, _ := rec[i].(string); return v }
	acct, stored, revoked := str(0), str(1), str(2)
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
	a.Via = &account.Key{Prefix: str(3), AccountID: acct, KeyLimits: decodeKeyLimits(str(4), str(5), str(6), str(7))}
	now := s.db.now()
	if used, _ := strconv.ParseInt(str(8), 10, 64); now.Sub(time.UnixMilli(used)) >= keyUsedEvery {
		// Best effort: a key that works is not refused for want of this.
		_ = s.db.hot.HSet(ctx, apiKeyKey(h), fKeyUsed, now.UnixMilli()).Err()
	}
	return a, nil
}
