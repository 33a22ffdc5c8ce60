package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// AccountStatus is an account's state.
type AccountStatus string

// Account statuses.
const (
	Active   AccountStatus = "active"
	Disabled AccountStatus = "disabled"
)

// Account is a customer account.
type Account struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	Status  AccountStatus  `json:"status"`
	Credits int64          `json:"credits"`
	Models  []catalog.Tier `json:"models,omitempty"` // empty: every model
	// Per-account limits; 0 means the deployment's default.
	RateLimit      int       `json:"rate_limit,omitempty"`       // creates per second, per key
	QueryRateLimit int       `json:"query_rate_limit,omitempty"` // queries per second, per key
	MaxInflight    int       `json:"max_inflight,omitempty"`     // pending + processing tasks
	CreatedAt      time.Time `json:"created_at"`
}

// Account record fields. The create-task script reads status, credits,
// models and inflight_max through luaAdmit below.
const (
	fAcctName     = "name"
	fAcctStatus   = "status"
	fAcctCreated  = "ctime"
	fAcctCredits  = "credits"
	fAcctModels   = "models" // comma-separated tiers; empty: all
	fAcctRate     = "rate"
	fAcctQRate    = "qrate"
	fAcctInflight = "inflight_max"
)

// luaAdmit decides whether an account may start a task: the one authority
// for the account's rules (active, model allowed, in-flight limit, balance).
// It returns {0, balance} to admit, else {code, n}: -1 no account, -2
// disabled, -3 model not allowed, -5 too many in flight (n = the limit), -6
// insufficient credits (n = the balance).
const luaAdmit = `
local function admit(acct, inflight, tier, price, now, default_max)
  local a = redis.call('HMGET', acct, 'status', 'credits', 'models', 'inflight_max')
  if not a[1] then return {-1, 0} end
  if a[1] ~= 'active' then return {-2, 0} end
  if a[3] and a[3] ~= '' then
    local allowed = false
    for m in string.gmatch(a[3], '[^,]+') do
      if m == tier then allowed = true end
    end
    if not allowed then return {-3, 0} end
  end
  local limit = tonumber(a[4] or '0') or 0
  if limit == 0 then limit = tonumber(default_max) end
  if limit > 0 and redis.call('ZCOUNT', inflight, now, '+inf') >= limit then return {-5, limit} end
  local bal = tonumber(a[2] or '0') or 0
  if bal < tonumber(price) then return {-6, bal} end
  return {0, bal}
end
`

// NewAccount describes an account to create.
type NewAccount struct {
	Name           string
	Credits        int64
	Models         []catalog.Tier
	RateLimit      int
	QueryRateLimit int
	MaxInflight    int
}

// maxLimit bounds every per-account limit.
const maxLimit = 1_000_000

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
func (s *Store) CreateAccount(ctx context.Context, n NewAccount) (*Account, error) {
	n.Name = strings.TrimSpace(n.Name)
	if n.Name == "" || len(n.Name) > 200 {
		return nil, invalid("account name must be 1 to 200 characters")
	}
	if n.Credits < 0 {
		return nil, invalid("initial credits must not be negative")
	}
	for _, l := range []struct {
		name string
		v    int
	}{{"rate limit", n.RateLimit}, {"query rate limit", n.QueryRateLimit}, {"max in-flight", n.MaxInflight}} {
		if err := checkLimit(l.name, l.v); err != nil {
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
	// The index of every account and the account live in two hash slots
	// (two nodes of a cluster): the index first. A crash between the two
	// leaves an id in the index with no account, which every reader of the
	// index skips (Accounts, Overdue, QueueChecks); the account, written last
	// in one transaction with its first ledger entry, exists only once it is
	// listed.
	if err := s.rdb.ZAdd(ctx, accountsKey(), redis.Z{Score: float64(a.CreatedAt.UnixMilli()), Member: a.ID}).Err(); err != nil {
		return nil, fmt.Errorf("store: index account: %w", err)
	}
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, accountKey(a.ID),
			fAcctName, a.Name, fAcctStatus, string(a.Status), fAcctCreated, a.CreatedAt.UnixMilli(),
			fAcctCredits, a.Credits, fAcctModels, joinTiers(a.Models),
			fAcctRate, a.RateLimit, fAcctQRate, a.QueryRateLimit, fAcctInflight, a.MaxInflight)
		if a.Credits > 0 {
			p.XAdd(ctx, ledgerEntry(a.ID, KindCredit, a.Credits, a.Credits, "", "initial credits"))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: create account: %w", err)
	}
	return a, nil
}

// Account returns an account; *apperr.NotFoundError when there is none.
func (s *Store) Account(ctx context.Context, id string) (*Account, error) {
	m, err := s.rdb.HGetAll(ctx, accountKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: account %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, &apperr.NotFoundError{Kind: "account", ID: id}
	}
	return decodeAccount(id, m), nil
}

func decodeAccount(id string, m map[string]string) *Account {
	atoi := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	ms, _ := strconv.ParseInt(m[fAcctCreated], 10, 64)
	credits, _ := strconv.ParseInt(m[fAcctCredits], 10, 64)
	a := &Account{
		ID: id, Name: m[fAcctName], Status: AccountStatus(m[fAcctStatus]), Credits: credits,
		RateLimit: atoi(fAcctRate), QueryRateLimit: atoi(fAcctQRate), MaxInflight: atoi(fAcctInflight),
		CreatedAt: time.UnixMilli(ms),
	}
	if v := m[fAcctModels]; v != "" {
		for _, t := range strings.Split(v, ",") {
			a.Models = append(a.Models, catalog.Tier(t))
		}
	}
	return a
}

// Accounts returns every account, oldest first.
func (s *Store) Accounts(ctx context.Context) ([]*Account, error) {
	ids, err := s.accountIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: accounts: %w", err)
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = accountKey(id)
	}
	records, err := s.hgetAll(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("store: accounts: %w", err)
	}
	out := make([]*Account, 0, len(ids))
	for i, id := range ids {
		if m := records[i]; len(m) > 0 {
			out = append(out, decodeAccount(id, m))
		}
	}
	return out, nil
}

// accountIDs lists every account id, oldest first.
func (s *Store) accountIDs(ctx context.Context) ([]string, error) {
	return s.rdb.ZRange(ctx, accountsKey(), 0, -1).Result()
}

// dueByAccount reads, for every account, up to limit members of its sorted
// set key(account) scored at most max (a Redis score bound: "(" makes it
// exclusive), in one pipeline: what the recoveries (queue checks, overdue
// tasks, webhooks due) scan. It returns the account ids and, for each, its
// members with their scores.
func (s *Store) dueByAccount(ctx context.Context, key func(accountID string) string, max string, limit int64) ([]string, [][]redis.Z, error) {
	ids, err := s.accountIDs(ctx)
	if err != nil {
		return nil, nil, err
	}
	cmds := make([]*redis.ZSliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.ZRangeByScoreWithScores(ctx, key(id), &redis.ZRangeBy{Min: "-inf", Max: max, Count: limit})
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	due := make([][]redis.Z, len(ids))
	for i, c := range cmds {
		due[i] = c.Val()
	}
	return ids, due, nil
}

// setIfExists sets fields of an existing hash; 0 when there is none.
var setIfExists = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

func (s *Store) updateAccount(ctx context.Context, id string, fields ...any) error {
	n, err := setIfExists.Run(ctx, s.rdb, []string{accountKey(id)}, fields...).Int()
	if err != nil {
		return fmt.Errorf("store: update account %s: %w", id, err)
	}
	if n == 0 {
		return &apperr.NotFoundError{Kind: "account", ID: id}
	}
	return nil
}

// SetAccountStatus enables or disables an account.
func (s *Store) SetAccountStatus(ctx context.Context, id string, st AccountStatus) error {
	if st != Active && st != Disabled {
		return invalid("unknown account status %q", st)
	}
	return s.updateAccount(ctx, id, fAcctStatus, string(st))
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
	}{{"rate limit", fAcctRate, l.RateLimit}, {"query rate limit", fAcctQRate, l.QueryRateLimit}, {"max in-flight", fAcctInflight, l.MaxInflight}} {
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
		fields = append(fields, fAcctModels, joinTiers(*l.Models))
	}
	if len(fields) == 0 {
		return nil, invalid("nothing to change: give a rate limit, a query rate limit, a max in-flight or models")
	}
	if err := s.updateAccount(ctx, id, fields...); err != nil {
		return nil, err
	}
	return s.Account(ctx, id)
}

// Inflight returns how many of an account's tasks count as in flight now.
func (s *Store) Inflight(ctx context.Context, accountID string) (int64, error) {
	n, err := s.rdb.ZCount(ctx, inflightKey(accountID), strconv.FormatInt(s.now().UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("store: inflight %s: %w", accountID, err)
	}
	return n, nil
}
