// Package taskstore keeps task records in Redis hashes with a 24-hour TTL,
// together with what they cost.
//
// State changes run as Lua scripts, so each is atomic and the rules hold
// whatever the number of gateways and workers:
//
//   - creating a task checks the account (active, model allowed, tasks in
//     flight, balance), debits its price, writes the record and a ledger
//     entry, all at once: the balance never goes below zero and a task is
//     never charged twice;
//   - a task moves pending → processing → completed | failed, and a final
//     state never changes;
//   - a task that fails is refunded exactly once (the refund is part of the
//     one transition to failed); a completed task never is;
//   - progress never goes back and reaches 100 only on completion;
//   - a record that has expired or been removed is never brought back by a
//     late worker.
//
// Every key a script touches carries the account's hash tag (package
// keyspace), so the scripts run unchanged on Redis Cluster.
package taskstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/keyspace"
	"github.com/easelhq/easel/pkg/task"
)

// Hash fields. Short names keep a record small; Redis stores a small hash as
// one compact listpack.
const (
	fType     = "type"
	fModel    = "model"
	fStatus   = "status"
	fProgress = "progress"
	fCreated  = "ctime"
	fEnded    = "etime"
	fResults  = "results"
	fErrCode  = "ecode"
	fErrMsg   = "emsg"
	fPrice    = "price"
	fRefunded = "refunded"
	fStarted  = "stime"
)

// Store reads and writes task records.
type Store struct {
	rdb redis.UniversalClient
	ttl time.Duration
	now func() time.Time
}

// New returns a store on rdb.
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, ttl: task.ResultTTL, now: time.Now}
}

// Outcome of a state change.
type Outcome int

// Outcomes.
const (
	// Applied: the change was made.
	Applied Outcome = iota
	// AlreadyFinal: the task had already completed or failed; nothing changed.
	AlreadyFinal
	// Missing: no such record (never created, expired or removed).
	Missing
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case AlreadyFinal:
		return "already_final"
	case Missing:
		return "missing"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// keys are the keys of a task's scripts, all in the account's slot.
func keys(accountID, taskID string) []string {
	return []string{
		keyspace.Task(accountID, taskID),
		keyspace.Account(accountID),
		keyspace.Inflight(accountID),
		keyspace.Ledger(accountID),
	}
}

// Charge is what creating a task costs and the limits it must fit.
type Charge struct {
	// Price in credits, debited from the account.
	Price int64
	// Tier of the model, checked against the account's allowed models.
	Tier string
	// MaxInflight applies when the account sets no limit of its own; 0
	// means no limit.
	MaxInflight int
	// CountUntil is when the task stops counting as in flight even if no
	// worker ever finishes it (its deadline, with a margin).
	CountUntil time.Time
}

// KEYS: task, account, inflight, ledger.
// ARGV: now, ttl, price, default max in flight, count-until, tier, task id,
// then the record's fields and values.
// Returns {code, n}: 1 created (n = balance), -1 no account, -2 disabled,
// -3 model not allowed, -4 task exists, -5 too many in flight (n = limit),
// -6 insufficient credits (n = balance).
var createScript = redis.NewScript(`
local a = redis.call('HMGET', KEYS[2], 'status', 'credits', 'models', 'inflight_max')
if not a[1] then return {-1, 0} end
if a[1] ~= 'active' then return {-2, 0} end
if a[3] and a[3] ~= '' then
  local allowed = false
  for m in string.gmatch(a[3], '[^,]+') do
    if m == ARGV[6] then allowed = true end
  end
  if not allowed then return {-3, 0} end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {-4, 0} end
local limit = tonumber(a[4] or '0') or 0
if limit == 0 then limit = tonumber(ARGV[4]) end
if limit > 0 and redis.call('ZCOUNT', KEYS[3], ARGV[1], '+inf') >= limit then return {-5, limit} end
local bal = tonumber(a[2] or '0') or 0
local price = tonumber(ARGV[3])
if bal < price then return {-6, bal} end
if price > 0 then
  bal = redis.call('HINCRBY', KEYS[2], 'credits', -price)
  redis.call('XADD', KEYS[4], '*', 'kind', 'debit', 'amount', -price, 'balance', bal, 'task', ARGV[7])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[7])
return {1, bal}
`)

// Create writes a new pending task record (24-hour TTL), debiting its price
// from the account, in one step. It returns the balance left. Refusals are
// apperr errors with messages for the client: PaymentRequired (price and
// balance), PermissionDenied (disabled account, model not allowed),
// RateLimited (too many tasks in flight).
func (s *Store) Create(ctx context.Context, t *task.Task, c Charge) (int64, error) {
	now := s.now()
	res, err := createScript.Run(ctx, s.rdb, keys(t.AccountID, t.ID),
		now.UnixMilli(), s.ttl.Milliseconds(), c.Price, c.MaxInflight, c.CountUntil.UnixMilli(), c.Tier, t.ID,
		fType, t.Type,
		fModel, t.Model,
		fStatus, string(task.Pending),
		fProgress, 0,
		fCreated, t.CreateTime.UnixMilli(),
		fPrice, c.Price,
	).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("taskstore: create %s: %w", t.ID, err)
	}
	switch res[0] {
	case 1:
		return res[1], nil
	case -1:
		return 0, apperr.New(apperr.Unauthenticated, "invalid API key")
	case -2:
		return 0, apperr.New(apperr.PermissionDenied, "this account is disabled")
	case -3:
		return 0, apperr.Errorf(apperr.PermissionDenied, "this account may not use model %s", t.Model)
	case -4:
		return 0, fmt.Errorf("taskstore: task %s already exists", t.ID)
	case -5:
		return 0, apperr.Errorf(apperr.RateLimited, "too many tasks in flight: this account may have %d tasks pending or processing at once; wait for some to finish", res[1])
	case -6:
		return res[1], apperr.Errorf(apperr.PaymentRequired, "insufficient credits: this task costs %d credits and the balance is %d", c.Price, res[1])
	}
	return 0, fmt.Errorf("taskstore: create %s: unexpected reply %v", t.ID, res)
}

// Get returns a task of an account. A task that does not exist, has expired or
// belongs to another account is apperr.NotFound.
func (s *Store) Get(ctx context.Context, accountID, taskID string) (*task.Task, error) {
	m, err := s.rdb.HGetAll(ctx, keyspace.Task(accountID, taskID)).Result()
	if err != nil {
		return nil, fmt.Errorf("taskstore: get %s: %w", taskID, err)
	}
	if len(m) == 0 {
		return nil, apperr.Errorf(apperr.NotFound, "task %s not found", taskID)
	}
	return decode(accountID, taskID, m)
}

func decode(accountID, taskID string, m map[string]string) (*task.Task, error) {
	t := &task.Task{
		ID:        taskID,
		AccountID: accountID,
		Type:      m[fType],
		Model:     m[fModel],
		Status:    task.Status(m[fStatus]),
		Results:   []task.Result{},
		Refunded:  m[fRefunded] == "1",
	}
	var err error
	if t.Progress, err = strconv.Atoi(m[fProgress]); err != nil {
		return nil, fmt.Errorf("taskstore: %s: bad progress %q", taskID, m[fProgress])
	}
	ms, err := strconv.ParseInt(m[fCreated], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("taskstore: %s: bad ctime %q", taskID, m[fCreated])
	}
	t.CreateTime = time.UnixMilli(ms)
	if v := m[fEnded]; v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("taskstore: %s: bad etime %q", taskID, v)
		}
		t.CompleteTime = time.UnixMilli(ms)
	}
	if v := m[fStarted]; v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("taskstore: %s: bad stime %q", taskID, v)
		}
		t.StartTime = time.UnixMilli(ms)
	}
	if v := m[fPrice]; v != "" {
		if t.Price, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, fmt.Errorf("taskstore: %s: bad price %q", taskID, v)
		}
	}
	if v := m[fResults]; v != "" {
		if err := json.Unmarshal([]byte(v), &t.Results); err != nil {
			return nil, fmt.Errorf("taskstore: %s: bad results: %w", taskID, err)
		}
	}
	if code := m[fErrCode]; code != "" {
		t.Failure = &task.Failure{Code: code, Message: m[fErrMsg]}
	}
	return t, nil
}

// ARGV: now. Returns 0 applied, 1 already final, 2 missing.
var startScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 2 end
if st == 'completed' or st == 'failed' then return 1 end
if st == 'pending' then
  redis.call('HSET', KEYS[1], 'status', 'processing', 'stime', ARGV[1])
end
return 0
`)

// Start moves a task to processing and records when (the first time). A task
// already processing (a retry after a crash) stays processing and its
// progress is kept.
func (s *Store) Start(ctx context.Context, accountID, taskID string) (Outcome, error) {
	return s.run(ctx, startScript, accountID, taskID, s.now().UnixMilli())
}

var progressScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'status', 'progress')
if v[1] ~= 'processing' then return 0 end
if tonumber(ARGV[1]) <= tonumber(v[2]) then return 0 end
redis.call('HSET', KEYS[1], 'progress', ARGV[1])
return 1
`)

// MaxProgress is the highest progress a task reports before completion.
const MaxProgress = 99

// SetProgress raises a processing task's progress to pct, clamped to 1..99.
// It never lowers progress and ignores tasks that are not processing.
func (s *Store) SetProgress(ctx context.Context, accountID, taskID string, pct int) error {
	pct = min(max(pct, 1), MaxProgress)
	if err := progressScript.Run(ctx, s.rdb, []string{keyspace.Task(accountID, taskID)}, pct).Err(); err != nil {
		return fmt.Errorf("taskstore: progress %s: %w", taskID, err)
	}
	return nil
}

// ARGV: ttl, now, results, task id.
var completeScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 2 end
if st == 'completed' or st == 'failed' then return 1 end
redis.call('HSET', KEYS[1], 'status', 'completed', 'progress', 100, 'etime', ARGV[2], 'results', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[4])
return 0
`)

// Complete marks a task completed with its results, sets complete_time and
// restarts the record's 24-hour TTL. It returns when the task completed.
func (s *Store) Complete(ctx context.Context, accountID, taskID string, results []task.Result) (Outcome, time.Time, error) {
	if results == nil {
		results = []task.Result{}
	}
	enc, err := json.Marshal(results)
	if err != nil {
		return 0, time.Time{}, err
	}
	now := s.now()
	o, err := s.run(ctx, completeScript, accountID, taskID, s.ttl.Milliseconds(), now.UnixMilli(), enc, taskID)
	return o, now, err
}

// refund is shared by the fail and abort scripts: it returns a task's price
// to its account once, writing the ledger. ARGV[5] is the task id, ARGV[6]
// the ledger note.
const refund = `
local function refund()
  local v = redis.call('HMGET', KEYS[1], 'price', 'refunded')
  local price = tonumber(v[1] or '0') or 0
  if price <= 0 or v[2] == '1' or redis.call('EXISTS', KEYS[2]) == 0 then return end
  local bal = redis.call('HINCRBY', KEYS[2], 'credits', price)
  redis.call('HSET', KEYS[1], 'refunded', 1)
  redis.call('XADD', KEYS[4], '*', 'kind', 'refund', 'amount', price, 'balance', bal, 'task', ARGV[5], 'note', ARGV[6])
end
`

// ARGV: ttl, now, code, message, task id, note.
var failScript = redis.NewScript(refund + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 2 end
if st == 'completed' or st == 'failed' then return 1 end
redis.call('HSET', KEYS[1], 'status', 'failed', 'etime', ARGV[2], 'ecode', ARGV[3], 'emsg', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[5])
refund()
return 0
`)

// Fail marks a task failed with a code and a user-facing message, refunds
// its price (once: only the transition to failed refunds) and restarts the
// record's 24-hour TTL.
func (s *Store) Fail(ctx context.Context, accountID, taskID string, f task.Failure) (Outcome, error) {
	return s.run(ctx, failScript, accountID, taskID, s.ttl.Milliseconds(), s.now().UnixMilli(), f.Code, f.Message, taskID, f.Code)
}

// ARGV: -, -, -, -, task id, note.
var abortScript = redis.NewScript(refund + `
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then return 1 end
refund()
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[5])
return 0
`)

// Abort undoes the creation of a task that is still pending: the gateway's
// undo when it could not enqueue the task. The price is refunded (the ledger
// keeps the debit and the refund) and the record removed. It reports whether
// the task was aborted.
func (s *Store) Abort(ctx context.Context, accountID, taskID string) (bool, error) {
	o, err := s.run(ctx, abortScript, accountID, taskID, 0, 0, 0, 0, taskID, "enqueue_failed")
	return o == Applied, err
}

// Overdue is an unfinished task past its deadline.
type Overdue struct{ AccountID, TaskID string }

// Overdue lists up to limit tasks, across all accounts, still pending or
// processing past the time they were to stop counting as in flight (their
// deadline plus a margin): tasks whose worker died on the last attempt, or
// whose job expired in the queue.
func (s *Store) Overdue(ctx context.Context, limit int64) ([]Overdue, error) {
	ids, err := s.rdb.ZRange(ctx, keyspace.Accounts(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("taskstore: overdue: %w", err)
	}
	now := strconv.FormatInt(s.now().UnixMilli(), 10)
	cmds := make([]*redis.StringSliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.ZRangeByScore(ctx, keyspace.Inflight(id), &redis.ZRangeBy{Min: "-inf", Max: "(" + now, Count: limit})
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("taskstore: overdue: %w", err)
	}
	var out []Overdue
	for i, id := range ids {
		for _, t := range cmds[i].Val() {
			out = append(out, Overdue{AccountID: id, TaskID: t})
			if int64(len(out)) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

// Expire fails an overdue task with code timeout (refunding it) and takes it
// off its account's in-flight set, whatever state its record is in.
func (s *Store) Expire(ctx context.Context, o Overdue) (Outcome, error) {
	out, err := s.Fail(ctx, o.AccountID, o.TaskID, task.Failure{Code: "timeout", Message: "the task did not finish within its deadline"})
	if err != nil {
		return out, err
	}
	if out != Applied {
		// Already final, or the record is gone: just forget it.
		if err := s.rdb.ZRem(ctx, keyspace.Inflight(o.AccountID), o.TaskID).Err(); err != nil {
			return out, fmt.Errorf("taskstore: expire %s: %w", o.TaskID, err)
		}
	}
	return out, nil
}

func (s *Store) run(ctx context.Context, script *redis.Script, accountID, taskID string, args ...any) (Outcome, error) {
	n, err := script.Run(ctx, s.rdb, keys(accountID, taskID), args...).Int()
	if err != nil {
		return 0, fmt.Errorf("taskstore: %s: %w", taskID, err)
	}
	return Outcome(n), nil
}
