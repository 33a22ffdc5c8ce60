package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// Accounts keeps accounts: their records, credits and ledgers, and their
// API keys (apikeys.go).
type Accounts struct{ db *DB }

// NewAccounts returns the account store on db.
func NewAccounts(db *DB) *Accounts { return &Accounts{db: db} }

func joinTiers(ts []catalog.Tier) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// Create makes an active account.
func (s *Accounts) Create(ctx context.Context, spec account.Spec) (*account.Account, error) {
	spec, err := spec.Check()
	if err != nil {
		return nil, err
	}
	id, err := account.NewID()
	if err != nil {
		return nil, err
	}
	a := &account.Account{
		ID: id, Name: spec.Name, Status: account.Active, Credits: spec.Credits, Models: spec.Models,
		RateLimit: spec.RateLimit, QueryRateLimit: spec.QueryRateLimit, MaxInflight: spec.MaxInflight, Weight: spec.Weight,
		CreatedAt: s.db.now().Truncate(time.Millisecond),
	}
	// The index of every account and the account live in two hash slots
	// (two nodes of a cluster): the index first. A crash between the two
	// leaves an id in the index with no account, which every reader of the
	// index skips; the account, written last with its first ledger entry
	// (fAcctOpen) in one command, exists only once it is listed.
	if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, accountsKey(), redis.Z{Score: float64(a.CreatedAt.UnixMilli()), Member: a.ID})
		p.ZAdd(ctx, accountNamesKey(), redis.Z{Member: nameEntry(a.Name, a.ID)})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: index account: %w", err)
	}
	fields := []any{fAcctName, a.Name, fAcctStatus, string(a.Status), fAcctCreated, a.CreatedAt.UnixMilli(),
		fAcctCredits, a.Credits, fAcctModels, joinTiers(a.Models),
		fAcctRate, a.RateLimit, fAcctQRate, a.QueryRateLimit, fAcctInflight, a.MaxInflight, fAcctWeight, a.Weight}
	if a.Credits > 0 {
		fields = append(fields, fAcctOpen, a.Credits)
	}
	if err := s.db.rdb.HSet(ctx, accountKey(a.ID), fields...).Err(); err != nil {
		return nil, fmt.Errorf("store: create account: %w", err)
	}
	return a, nil
}

// Get returns an account; *apperr.NotFoundError when there is none.
func (s *Accounts) Get(ctx context.Context, id string) (*account.Account, error) {
	m, err := s.db.hot.HGetAll(ctx, accountKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: account %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, &apperr.NotFoundError{Kind: "account", ID: id}
	}
	return decodeAccount(id, m), nil
}

func decodeAccount(id string, m map[string]string) *account.Account {
	atoi := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	ms, _ := strconv.ParseInt(m[fAcctCreated], 10, 64)
	credits, _ := strconv.ParseInt(m[fAcctCredits], 10, 64)
	a := &account.Account{
		ID: id, Name: m[fAcctName], Status: account.Status(m[fAcctStatus]), Credits: credits,
		RateLimit: atoi(fAcctRate), QueryRateLimit: atoi(fAcctQRate), MaxInflight: atoi(fAcctInflight), Weight: atoi(fAcctWeight),
		CreatedAt: time.UnixMilli(ms),
	}
	if v := m[fAcctModels]; v != "" {
		for _, t := range strings.Split(v, ",") {
			a.Models = append(a.Models, catalog.Tier(t))
		}
	}
	return a
}

// List returns every account, oldest first.
func (s *Accounts) List(ctx context.Context) ([]*account.Account, error) {
	ids, err := s.db.rdb.ZRange(ctx, accountsKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("store: accounts: %w", err)
	}
	return s.getMany(ctx, ids)
}

var updateAccountLua = newScript[accountKeys, updateAccountArgs, codeReply]("update_account", map[string]int64{"UPDATED": 1, "NO_ACCOUNT": 0})

type accountKeys struct {
	Account string `lua:"account"`
}

// updateAccountArgs: the script's one argument is the list of fields and
// values, spread over ARGV.
type updateAccountArgs struct {
	Fields []any `lua:"fields"`
}

// update sets fields of an existing account record (field, value, ...).
func (s *Accounts) update(ctx context.Context, id string, fields ...any) error {
	r, err := updateAccountLua.run(ctx, s.db, accountKeys{Account: accountKey(id)}, updateAccountArgs{Fields: fields})
	if err != nil {
		return fmt.Errorf("store: update account %s: %w", id, err)
	}
	if r.Code == 0 {
		return &apperr.NotFoundError{Kind: "account", ID: id}
	}
	return nil
}

// SetStatus enables or disables an account.
func (s *Accounts) SetStatus(ctx context.Context, id string, st account.Status) error {
	if err := account.CheckStatus(st); err != nil {
		return err
	}
	return s.update(ctx, id, fAcctStatus, string(st))
}

// SetLimits changes an account's limits and returns the account.
func (s *Accounts) SetLimits(ctx context.Context, id string, l account.LimitsUpdate) (*account.Account, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	var fields []any
	for _, f := range []struct {
		field string
		v     *int
	}{{fAcctRate, l.RateLimit}, {fAcctQRate, l.QueryRateLimit}, {fAcctInflight, l.MaxInflight}, {fAcctWeight, l.Weight}} {
		if f.v != nil {
			fields = append(fields, f.field, *f.v)
		}
	}
	if l.Models != nil {
		fields = append(fields, fAcctModels, joinTiers(*l.Models))
	}
	if err := s.update(ctx, id, fields...); err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

// nameEntry is an account's entry in the index of names: its lower-cased
// name, a NUL, its id.
func nameEntry(name, id string) string { return strings.ToLower(name) + "\x00" + id }

// MaxPage bounds a page of accounts.
const MaxPage = 100

// Page returns up to limit accounts, newest first, from the cursor of a
// page before ("" for the first), and the cursor of the next page ("" at
// the end): a few round trips whatever the number of accounts.
func (s *Accounts) Page(ctx context.Context, cursor string, limit int) ([]*account.Account, string, error) {
	off := int64(0)
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n < 0 {
			return nil, "", apperr.New(apperr.Invalid, "cursor must be what a page's next gave")
		}
		off = n
	}
	limit = max(1, min(limit, MaxPage))
	ids, err := s.db.rdb.ZRevRange(ctx, accountsKey(), off, off+int64(limit)).Result()
	if err != nil {
		return nil, "", fmt.Errorf("store: accounts: %w", err)
	}
	next := ""
	if len(ids) > limit {
		ids, next = ids[:limit], strconv.FormatInt(off+int64(limit), 10)
	}
	out, err := s.getMany(ctx, ids)
	return out, next, err
}

// SearchNames returns up to limit accounts whose name starts with q
// (case-insensitively), by name. Accounts made before the index of names
// existed (Easel before the console) are found by id only.
func (s *Accounts) SearchNames(ctx context.Context, q string, limit int) ([]*account.Account, error) {
	q = strings.ToLower(q)
	limit = max(1, min(limit, MaxPage))
	entries, err := s.db.rdb.ZRangeByLex(ctx, accountNamesKey(), &redis.ZRangeBy{Min: "[" + q, Max: "[" + q + "\xff", Count: int64(limit)}).Result()
	if err != nil {
		return nil, fmt.Errorf("store: search accounts: %w", err)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if _, id, ok := strings.Cut(e, "\x00"); ok {
			ids = append(ids, id)
		}
	}
	return s.getMany(ctx, ids)
}

// getMany reads accounts by id, skipping those that are gone.
func (s *Accounts) getMany(ctx context.Context, ids []string) ([]*account.Account, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = accountKey(id)
	}
	records, err := s.db.hgetAll(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("store: accounts: %w", err)
	}
	out := make([]*account.Account, 0, len(ids))
	for i, id := range ids {
		if m := records[i]; len(m) > 0 {
			out = append(out, decodeAccount(id, m))
		}
	}
	return out, nil
}
