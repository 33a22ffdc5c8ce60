package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// Task record fields. Short names keep a record small; Redis stores a small
// hash as one compact listpack.
const (
	fTaskType     = "type"
	fTaskModel    = "model"
	fTaskStatus   = "status"
	fTaskProgress = "progress"
	fTaskCreated  = "ctime"
	fTaskStarted  = "stime"
	fTaskEnded    = "etime"
	fTaskResults  = "results" // JSON array of task.Result
	fTaskErrCode  = "ecode"
	fTaskErrMsg   = "emsg"
	fTaskPrice    = "price"
	fTaskRefunded = "refunded"
)

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

// taskKeys are the keys of a task's scripts, all in the account's slot.
func taskKeys(accountID, taskID string) []string {
	return []string{taskKey(accountID, taskID), accountKey(accountID), inflightKey(accountID), ledgerKey(accountID)}
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
// Returns {code, n}: 1 created (n = balance), -4 task exists, or admit's
// refusal.
var createScript = redis.NewScript(luaAdmit + luaLedger + `
if redis.call('EXISTS', KEYS[1]) == 1 then return {-4, 0} end
local r = admit(KEYS[2], KEYS[3], ARGV[6], ARGV[3], ARGV[1], ARGV[4])
if r[1] ~= 0 then return r end
local bal = r[2]
local price = tonumber(ARGV[3])
if price > 0 then
  bal = redis.call('HINCRBY', KEYS[2], 'credits', -price)
  ledger(KEYS[4], 'debit', -price, bal, ARGV[7], '')
end
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[7])
return {1, bal}
`)

// CreateTask writes a new pending task record (24-hour TTL), debiting its
// price from the account, in one step. It returns the balance left.
// Refusals: apperr.ErrAccountDisabled, *apperr.ModelNotAllowedError,
// *apperr.InflightLimitError, *apperr.InsufficientCreditsError, and
// apperr.ErrUnknownKey when the account is gone.
func (s *Store) CreateTask(ctx context.Context, t *task.Task, c Charge) (int64, error) {
	now := s.now()
	res, err := createScript.Run(ctx, s.rdb, taskKeys(t.AccountID, t.ID),
		now.UnixMilli(), s.ttl.Milliseconds(), c.Price, c.MaxInflight, c.CountUntil.UnixMilli(), c.Tier, t.ID,
		fTaskType, t.Type,
		fTaskModel, t.Model,
		fTaskStatus, string(task.Pending),
		fTaskProgress, 0,
		fTaskCreated, t.CreateTime.UnixMilli(),
		fTaskPrice, c.Price,
	).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("store: create %s: %w", t.ID, err)
	}
	switch res[0] {
	case 1:
		return res[1], nil
	case -1:
		return 0, apperr.ErrUnknownKey
	case -2:
		return 0, apperr.ErrAccountDisabled
	case -3:
		return 0, &apperr.ModelNotAllowedError{Model: t.Model}
	case -4:
		return 0, fmt.Errorf("store: task %s already exists", t.ID)
	case -5:
		return 0, &apperr.InflightLimitError{Limit: res[1]}
	case -6:
		return res[1], &apperr.InsufficientCreditsError{Price: c.Price, Balance: res[1]}
	}
	return 0, fmt.Errorf("store: create %s: unexpected reply %v", t.ID, res)
}

// Task returns a task of an account. A task that does not exist, has expired
// or belongs to another account is *apperr.NotFoundError.
func (s *Store) Task(ctx context.Context, accountID, taskID string) (*task.Task, error) {
	m, err := s.rdb.HGetAll(ctx, taskKey(accountID, taskID)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: task %s: %w", taskID, err)
	}
	if len(m) == 0 {
		return nil, &apperr.NotFoundError{Kind: "task", ID: taskID}
	}
	return decodeTask(accountID, taskID, m)
}

func decodeTask(accountID, taskID string, m map[string]string) (*task.Task, error) {
	t := &task.Task{
		ID:        taskID,
		AccountID: accountID,
		Type:      m[fTaskType],
		Model:     m[fTaskModel],
		Status:    task.Status(m[fTaskStatus]),
		Results:   []task.Result{},
		Refunded:  m[fTaskRefunded] == "1",
	}
	var err error
	if t.Progress, err = strconv.Atoi(m[fTaskProgress]); err != nil {
		return nil, fmt.Errorf("store: %s: bad progress %q", taskID, m[fTaskProgress])
	}
	ms, err := strconv.ParseInt(m[fTaskCreated], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("store: %s: bad ctime %q", taskID, m[fTaskCreated])
	}
	t.CreateTime = time.UnixMilli(ms)
	for _, f := range []struct {
		field string
		dst   *time.Time
	}{{fTaskEnded, &t.CompleteTime}, {fTaskStarted, &t.StartTime}} {
		if v := m[f.field]; v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("store: %s: bad %s %q", taskID, f.field, v)
			}
			*f.dst = time.UnixMilli(ms)
		}
	}
	if v := m[fTaskPrice]; v != "" {
		if t.Price, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, fmt.Errorf("store: %s: bad price %q", taskID, v)
		}
	}
	if v := m[fTaskResults]; v != "" {
		if err := json.Unmarshal([]byte(v), &t.Results); err != nil {
			return nil, fmt.Errorf("store: %s: bad results: %w", taskID, err)
		}
	}
	if code := m[fTaskErrCode]; code != "" {
		t.Failure = &task.Failure{Code: code, Message: m[fTaskErrMsg]}
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

// StartTask moves a task to processing and records when (the first time). A
// task already processing (a retry after a crash) stays processing and its
// progress is kept.
func (s *Store) StartTask(ctx context.Context, accountID, taskID string) (Outcome, error) {
	return s.runTask(ctx, startScript, accountID, taskID, s.now().UnixMilli())
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
	if err := progressScript.Run(ctx, s.rdb, []string{taskKey(accountID, taskID)}, pct).Err(); err != nil {
		return fmt.Errorf("store: progress %s: %w", taskID, err)
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

// CompleteTask marks a task completed with its results, sets complete_time
// and restarts the record's 24-hour TTL. It returns when the task completed.
func (s *Store) CompleteTask(ctx context.Context, accountID, taskID string, results []task.Result) (Outcome, time.Time, error) {
	if results == nil {
		results = []task.Result{}
	}
	enc, err := json.Marshal(results)
	if err != nil {
		return 0, time.Time{}, err
	}
	now := s.now()
	o, err := s.runTask(ctx, completeScript, accountID, taskID, s.ttl.Milliseconds(), now.UnixMilli(), enc, taskID)
	return o, now, err
}

// luaRefund returns a task's price to its account once, writing the
// ledger. KEYS: task, account, inflight, ledger.
const luaRefund = luaLedger + `
local function refund(task_id, note)
  local v = redis.call('HMGET', KEYS[1], 'price', 'refunded')
  local price = tonumber(v[1] or '0') or 0
  if price <= 0 or v[2] == '1' or redis.call('EXISTS', KEYS[2]) == 0 then return end
  local bal = redis.call('HINCRBY', KEYS[2], 'credits', price)
  redis.call('HSET', KEYS[1], 'refunded', 1)
  ledger(KEYS[4], 'refund', price, bal, task_id, note)
end
`

// ARGV: ttl, now, code, message, task id, note.
var failScript = redis.NewScript(luaRefund + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 2 end
if st == 'completed' or st == 'failed' then return 1 end
redis.call('HSET', KEYS[1], 'status', 'failed', 'etime', ARGV[2], 'ecode', ARGV[3], 'emsg', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[5])
refund(ARGV[5], ARGV[6])
return 0
`)

// FailTask marks a task failed with a code and a message for its owner,
// refunds its price (once: only the transition to failed refunds) and
// restarts the record's 24-hour TTL.
func (s *Store) FailTask(ctx context.Context, accountID, taskID string, f task.Failure) (Outcome, error) {
	return s.runTask(ctx, failScript, accountID, taskID, s.ttl.Milliseconds(), s.now().UnixMilli(), f.Code, f.Message, taskID, f.Code)
}

// ARGV: task id, note.
var abortScript = redis.NewScript(luaRefund + `
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then return 1 end
refund(ARGV[1], ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 0
`)

// AbortTask undoes the creation of a task that is still pending: the
// gateway's undo when it could not enqueue the task. The price is refunded
// (the ledger keeps the debit and the refund) and the record removed. It
// reports whether the task was aborted.
func (s *Store) AbortTask(ctx context.Context, accountID, taskID string) (bool, error) {
	o, err := s.runTask(ctx, abortScript, accountID, taskID, taskID, "enqueue_failed")
	return o == Applied, err
}

// Overdue is an unfinished task past its deadline.
type Overdue struct{ AccountID, TaskID string }

// Overdue lists up to limit tasks, across all accounts, still pending or
// processing past the time they were to stop counting as in flight (their
// deadline plus a margin): tasks whose worker died on the last attempt, or
// whose job expired in the queue.
func (s *Store) Overdue(ctx context.Context, limit int64) ([]Overdue, error) {
	ids, err := s.accountIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: overdue: %w", err)
	}
	now := strconv.FormatInt(s.now().UnixMilli(), 10)
	cmds := make([]*redis.StringSliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.ZRangeByScore(ctx, inflightKey(id), &redis.ZRangeBy{Min: "-inf", Max: "(" + now, Count: limit})
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: overdue: %w", err)
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
	out, err := s.FailTask(ctx, o.AccountID, o.TaskID, task.Failure{Code: string(task.Timeout), Message: "the task did not finish within its deadline"})
	if err != nil {
		return out, err
	}
	if out != Applied {
		// Already final, or the record is gone: just forget it.
		if err := s.rdb.ZRem(ctx, inflightKey(o.AccountID), o.TaskID).Err(); err != nil {
			return out, fmt.Errorf("store: expire %s: %w", o.TaskID, err)
		}
	}
	return out, nil
}

func (s *Store) runTask(ctx context.Context, script *redis.Script, accountID, taskID string, args ...any) (Outcome, error) {
	n, err := script.Run(ctx, s.rdb, taskKeys(accountID, taskID), args...).Int()
	if err != nil {
		return 0, fmt.Errorf("store: %s: %w", taskID, err)
	}
	return Outcome(n), nil
}
