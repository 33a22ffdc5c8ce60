// Package account keeps customer accounts, their API keys and their credit
// ledgers in Redis, and authenticates API keys.
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
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
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
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	Status  Status         `json:"status"`
	Credits int64          `json:"credits"`
	Models  []catalog.Tier `json:"models,omitempty"` // empty: every model
	// Per-account limits; 0 means the deployment's default.
	RateLimit      int       `json:"rate_limit,omitempty"`       // creates per second, per key
	QueryRateLimit int       `json:"query_rate_limit,omitempty"` // queries per second, per key
	MaxInflight    int       `json:"max_inflight,omitempty"`     // pending + processing tasks
	CreatedAt      time.Time `json:"created_at"`
}

// Allows reports whether the account may use a model tier.
func (a *Account) Allows(t catalog.Tier) bool {
	if len(a.Models) == 0 {
		return true
	}
	for _, m := range a.Models {
		if m == t {
			return true
		}
	}
	return false
}

// KeyPrefix starts every API key.
const KeyPrefix = "esk_"

const (
	keyRandLen     = 40
	visiblePrefix  = len(KeyPrefix) + 8 // "esk_AbCd1234"
	maxPresentable = 256                // longest credential we bother hashing
	base62         = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	base36         = "0123456789abcdefghijklmnopqrstuvwxyz"
	maxLimit       = 1_000_000
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
	fName     = "name"
	fStatus   = "status"
	fCreated  = "ctime"
	fCredits  = "credits"
	fModels   = "models"
	fRate     = "rate"
	fQRate    = "qrate"
	fInflight = "inflight_max"
)

// Key record fields.
const (
	fKeyAccount = "acct"
	fKeyHash    = "hash"
	fKeyPrefix  = "prefix"
	fKeyRevoked = "revoked"
)

// New describes an account to create.
type New struct {
	Name           string
	Credits        int64
	Models         []catalog.Tier
	RateLimit      int
	QueryRateLimit int
	MaxInflight    int
}

func invalid(format string, args ...any) error { return apperr.Errorf(apperr.Invalid, format, args...) }

func checkLimit(name string, v int) error {
	if v < 0 || v > maxLimit {
		return invalid("%s must be 0 (the default) to %d", name, maxLimit)
	}
	return nil
}

func checkModels(models []catalog.Tier) error {
	for _, m := range models {
		if m != catalog.Standard && m != catalog.Pro {
			return invalid("unknown model tier %q: use standard or pro", m)
		}
	}
	return nil
}

func joinTiers(ts []catalog.Tier) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// CreateAccount makes an active account.
func (s *Store) CreateAccount(ctx context.Context, n New) (*Account, error) {
	n.Name = strings.TrimSpace(n.Name)
	if n.Name == "" || len(n.Name) > 200 {
		return nil, invalid("account name must be 1 to 200 characters")
	}
	if n.Credits < 0 {
		return nil, invalid("initial credits must not be negative")
	}
	for name, v := range map[string]int{"rate limit": n.RateLimit, "query rate limit": n.QueryRateLimit, "max in-flight": n.MaxInflight} {
		if err := checkLimit(name, v); err != nil {
			return nil, err
		}
	}
	if err := checkModels(n.Models); err != nil {
		return nil, err
	}
	suffix, err := randomString(20, base36)
	if err != nil {
		return nil, err
	}
	a := &Account{
		ID: "acct_" + suffix, Name: n.Name, Status: Active, Credits: n.Credits, Models: n.Models,
		RateLimit: n.RateLimit, QueryRateLimit: n.QueryRateLimit, MaxInflight: n.MaxInflight,
		CreatedAt: s.now().Truncate(time.Millisecond),
	}
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keyspace.Account(a.ID),
			fName, a.Name, fStatus, string(a.Status), fCreated, a.CreatedAt.UnixMilli(),
			fCredits, a.Credits, fModels, joinTiers(a.Models),
			fRate, a.RateLimit, fQRate, a.QueryRateLimit, fInflight, a.MaxInflight)
		if a.Credits > 0 {
			p.XAdd(ctx, &redis.XAddArgs{Stream: keyspace.Ledger(a.ID), Values: []any{
				LedgerKind, KindCredit, LedgerAmount, a.Credits, LedgerBalance, a.Credits, LedgerNote, "initial credits"}})
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("account: create: %w", err)
	}
	if err := s.rdb.ZAdd(ctx, keyspace.Accounts(), redis.Z{Score: float64(a.CreatedAt.UnixMilli()), Member: a.ID}).Err(); err != nil {
		return nil, fmt.Errorf("account: index: %w", err)
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
	return decodeAccount(id, m), nil
}

func decodeAccount(id string, m map[string]string) *Account {
	atoi := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	ms, _ := strconv.ParseInt(m[fCreated], 10, 64)
	credits, _ := strconv.ParseInt(m[fCredits], 10, 64)
	a := &Account{
		ID: id, Name: m[fName], Status: Status(m[fStatus]), Credits: credits,
		RateLimit: atoi(fRate), QueryRateLimit: atoi(fQRate), MaxInflight: atoi(fInflight),
		CreatedAt: time.UnixMilli(ms),
	}
	if v := m[fModels]; v != "" {
		for _, t := range strings.Split(v, ",") {
			a.Models = append(a.Models, catalog.Tier(t))
		}
	}
	return a
}

// List returns every account, oldest first.
func (s *Store) List(ctx context.Context) ([]*Account, error) {
	ids, err := s.rdb.ZRange(ctx, keyspace.Accounts(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("account: list: %w", err)
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = keyspace.Account(id)
	}
	records, err := s.hgetAll(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("account: list: %w", err)
	}
	out := make([]*Account, 0, len(ids))
	for i, id := range ids {
		if m := records[i]; len(m) > 0 {
			out = append(out, decodeAccount(id, m))
		}
	}
	return out, nil
}

// setIfExists sets fields of an existing hash; 0 when there is none.
var setIfExists = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

func (s *Store) update(ctx context.Context, id string, fields ...any) error {
	n, err := setIfExists.Run(ctx, s.rdb, []string{keyspace.Account(id)}, fields...).Int()
	if err != nil {
		return fmt.Errorf("account: update %s: %w", id, err)
	}
	if n == 0 {
		return apperr.Errorf(apperr.NotFound, "account %s not found", id)
	}
	return nil
}

// SetStatus enables or disables an account.
func (s *Store) SetStatus(ctx context.Context, id string, st Status) error {
	if st != Active && st != Disabled {
		return invalid("unknown account status %q", st)
	}
	return s.update(ctx, id, fStatus, string(st))
}

// Limits changes an account's limits and models; nil fields stay as they are.
type Limits struct {
	RateLimit      *int
	QueryRateLimit *int
	MaxInflight    *int
	Models         *[]catalog.Tier
}

// SetLimits changes an account's limits and returns the account.
func (s *Store) SetLimits(ctx context.Context, id string, l Limits) (*Account, error) {
	var fields []any
	for _, f := range []struct {
		name  string
		field string
		v     *int
	}{{"rate limit", fRate, l.RateLimit}, {"query rate limit", fQRate, l.QueryRateLimit}, {"max in-flight", fInflight, l.MaxInflight}} {
		if f.v == nil {
			continue
		}
		if err := checkLimit(f.name, *f.v); err != nil {
			return nil, err
		}
		fields = append(fields, f.field, *f.v)
	}
	if l.Models != nil {
		if err := checkModels(*l.Models); err != nil {
			return nil, err
		}
		fields = append(fields, fModels, joinTiers(*l.Models))
	}
	if len(fields) == 0 {
		return nil, invalid("nothing to change: give a rate limit, a query rate limit, a max in-flight or models")
	}
	if err := s.update(ctx, id, fields...); err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

// Ledger entry fields, written by AddCredits here and by the task store's
// debit and refund scripts.
const (
	LedgerKind    = "kind"
	LedgerAmount  = "amount"
	LedgerBalance = "balance"
	LedgerTask    = "task"
	LedgerNote    = "note"
)

// Ledger entry kinds.
const (
	KindDebit  = "debit"  // a task's price, at creation
	KindRefund = "refund" // a failed task's price, back
	KindCredit = "credit" // an operator's top-up or correction
)

// LedgerEntry is one credit movement.
type LedgerEntry struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Amount  int64     `json:"amount"` // signed: debits are negative
	Balance int64     `json:"balance"`
	TaskID  string    `json:"task_id,omitempty"`
	Note    string    `json:"note,omitempty"`
}

// addCredits adds ARGV[1] (maybe negative) unless the balance would go below
// zero; returns {ok, balance}.
var addCredits = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
local bal = tonumber(redis.call('HGET', KEYS[1], 'credits') or '0')
local n = tonumber(ARGV[1])
if bal + n < 0 then return {0, bal} end
bal = redis.call('HINCRBY', KEYS[1], 'credits', n)
redis.call('XADD', KEYS[2], '*', 'kind', 'credit', 'amount', n, 'balance', bal, 'note', ARGV[2])
return {1, bal}
`)

// AddCredits adds n credits (negative for a correction) and returns the new
// balance. A correction that would take the balance below zero is refused.
func (s *Store) AddCredits(ctx context.Context, id string, n int64, note string) (int64, error) {
	if n == 0 {
		return 0, invalid("the amount must not be zero")
	}
	if n > 1e12 || n < -1e12 {
		return 0, invalid("the amount is out of range")
	}
	if note == "" {
		note = "operator adjustment"
	}
	res, err := addCredits.Run(ctx, s.rdb, []string{keyspace.Account(id), keyspace.Ledger(id)}, n, note).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("account: credits %s: %w", id, err)
	}
	switch res[0] {
	case -1:
		return 0, apperr.Errorf(apperr.NotFound, "account %s not found", id)
	case 0:
		return res[1], invalid("the balance is %d; subtracting %d would take it below 0", res[1], -n)
	}
	return res[1], nil
}

// Ledger returns up to limit of the account's credit movements, newest first.
func (s *Store) Ledger(ctx context.Context, id string, limit int64) ([]LedgerEntry, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	msgs, err := s.rdb.XRevRangeN(ctx, keyspace.Ledger(id), "+", "-", limit).Result()
	if err != nil {
		return nil, fmt.Errorf("account: ledger %s: %w", id, err)
	}
	out := make([]LedgerEntry, 0, len(msgs))
	for _, m := range msgs {
		e := LedgerEntry{ID: m.ID}
		if ms, _, ok := strings.Cut(m.ID, "-"); ok {
			if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
				e.Time = time.UnixMilli(v)
			}
		}
		str := func(k string) string { v, _ := m.Values[k].(string); return v }
		e.Kind, e.TaskID, e.Note = str(LedgerKind), str(LedgerTask), str(LedgerNote)
		e.Amount, _ = strconv.ParseInt(str(LedgerAmount), 10, 64)
		e.Balance, _ = strconv.ParseInt(str(LedgerBalance), 10, 64)
		out = append(out, e)
	}
	return out, nil
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

// AddKey registers key (from NewKey, or chosen by an operator for a dev
// setup) for an account. Only its hash is stored.
func (s *Store) AddKey(ctx context.Context, accountID, key string) (*Key, error) {
	if !presentable(key) {
		return nil, invalid("an API key must be 16 to 256 printable characters without spaces")
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

func (s *Store) claim(ctx context.Context, accountID, key string) (*Key, bool, error) {
	h := HashKey(key)
	k := &Key{Prefix: key[:min(len(key), visiblePrefix)], AccountID: accountID, CreatedAt: s.now().Truncate(time.Millisecond), hash: h}
	won, err := claimKey.Run(ctx, s.rdb, []string{keyspace.APIKey(h)},
		fKeyAccount, accountID, fKeyHash, h, fKeyPrefix, k.Prefix, fCreated, k.CreatedAt.UnixMilli(), fKeyRevoked, 0).Int()
	if err != nil {
		return nil, false, fmt.Errorf("account: add key: %w", err)
	}
	if won == 0 {
		return nil, false, nil
	}
	// Indexes: the account's keys, and keys by visible prefix.
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, keyspace.AccountKeys(accountID), h)
		p.SAdd(ctx, keyspace.KeyPrefix(k.Prefix), h)
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("account: index key: %w", err)
	}
	return k, true, nil
}

// EnsureKey makes key work: if it already belongs to an account, that account
// is returned; otherwise a new active account made from n gets it. It is safe
// to run from several processes at once (every gateway replica at start).
func (s *Store) EnsureKey(ctx context.Context, key string, n New) (*Account, error) {
	if !presentable(key) {
		return nil, invalid("an API key must be 16 to 256 printable characters without spaces")
	}
	h := HashKey(key)
	owner := func() (*Account, error) {
		id, err := s.rdb.HGet(ctx, keyspace.APIKey(h), fKeyAccount).Result()
		if err != nil {
			return nil, fmt.Errorf("account: key owner: %w", err)
		}
		return s.Get(ctx, id)
	}
	if exists, err := s.rdb.Exists(ctx, keyspace.APIKey(h)).Result(); err != nil {
		return nil, fmt.Errorf("account: ensure key: %w", err)
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
		_ = s.rdb.Del(ctx, keyspace.Account(a.ID), keyspace.Ledger(a.ID)).Err()
		_ = s.rdb.ZRem(ctx, keyspace.Accounts(), a.ID).Err()
		return owner()
	}
	return a, nil
}

// hgetAll reads several hashes in one round trip (per slot, on a cluster).
func (s *Store) hgetAll(ctx context.Context, keys []string) ([]map[string]string, error) {
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HGetAll(ctx, k)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(keys))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

func (s *Store) keysByHash(ctx context.Context, hashes []string) ([]*Key, error) {
	keys := make([]string, len(hashes))
	for i, h := range hashes {
		keys[i] = keyspace.APIKey(h)
	}
	records, err := s.hgetAll(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("account: keys: %w", err)
	}
	out := make([]*Key, 0, len(hashes))
	for i, h := range hashes {
		m := records[i]
		if len(m) == 0 {
			continue
		}
		created, _ := strconv.ParseInt(m[fCreated], 10, 64)
		revoked, _ := strconv.ParseInt(m[fKeyRevoked], 10, 64)
		k := &Key{Prefix: m[fKeyPrefix], AccountID: m[fKeyAccount], CreatedAt: time.UnixMilli(created), Revoked: revoked > 0, hash: h}
		if revoked > 0 {
			k.RevokedAt = time.UnixMilli(revoked)
		}
		out = append(out, k)
	}
	return out, nil
}

// ListKeys returns an account's keys, oldest first.
func (s *Store) ListKeys(ctx context.Context, accountID string) ([]*Key, error) {
	if _, err := s.Get(ctx, accountID); err != nil {
		return nil, err
	}
	hashes, err := s.rdb.SMembers(ctx, keyspace.AccountKeys(accountID)).Result()
	if err != nil {
		return nil, fmt.Errorf("account: keys: %w", err)
	}
	keys, err := s.keysByHash(ctx, hashes)
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
		hashes, err := s.rdb.SMembers(ctx, keyspace.KeyPrefix(keyOrPrefix)).Result()
		if err != nil {
			return nil, fmt.Errorf("account: revoke: %w", err)
		}
		switch len(hashes) {
		case 0:
			return nil, apperr.Errorf(apperr.NotFound, "no key with prefix %s", keyOrPrefix)
		case 1:
			hash = hashes[0]
		default:
			return nil, invalid("prefix %s matches %d keys: give the whole key", keyOrPrefix, len(hashes))
		}
	default:
		return nil, invalid("give the whole key or its %d-character prefix (as listed)", visiblePrefix)
	}
	n, err := revokeScript.Run(ctx, s.rdb, []string{keyspace.APIKey(hash)}, s.now().UnixMilli()).Int()
	if err != nil {
		return nil, fmt.Errorf("account: revoke: %w", err)
	}
	if n == 0 {
		return nil, apperr.New(apperr.NotFound, "no such key")
	}
	keys, err := s.keysByHash(ctx, []string{hash})
	if err != nil || len(keys) == 0 {
		return nil, errors.Join(err, errors.New("account: revoked key vanished"))
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
// unknown or revoked key is apperr.Unauthenticated (the message says
// revoked when it was); a disabled account is apperr.PermissionDenied.
func (s *Store) Authenticate(ctx context.Context, key string) (*Account, error) {
	if !presentable(key) {
		return nil, apperr.New(apperr.Unauthenticated, "invalid API key")
	}
	h := HashKey(key)
	rec, err := s.rdb.HMGet(ctx, keyspace.APIKey(h), fKeyAccount, fKeyHash, fKeyRevoked).Result()
	if err != nil {
		return nil, apperr.Transient(err, apperr.Unavailable, "authentication is unavailable, try again")
	}
	acct, _ := rec[0].(string)
	stored, _ := rec[1].(string)
	revoked, _ := rec[2].(string)
	// The record is found by the hash; comparing the stored hash again, in
	// constant time, guards against a record written under the wrong name.
	if acct == "" || subtle.ConstantTimeCompare([]byte(stored), []byte(h)) != 1 {
		return nil, apperr.New(apperr.Unauthenticated, "invalid API key")
	}
	if revoked != "" && revoked != "0" {
		return nil, apperr.New(apperr.Unauthenticated, "this API key has been revoked")
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
