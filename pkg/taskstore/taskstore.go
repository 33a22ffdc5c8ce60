// Package taskstore keeps task records in Redis hashes with a 24-hour TTL.
//
// State changes run as Lua scripts, so each is atomic and the rules hold
// whatever the number of gateways and workers: a task moves pending →
// processing → completed | failed; a final state never changes; progress never
// goes back and reaches 100 only on completion; a record that has expired or
// been removed is never brought back by a late worker.
package taskstore

import (
	"context"
	"encoding/json"
	"errors"
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

// ErrExists is returned by Create for a task id already in use.
var ErrExists = errors.New("taskstore: task already exists")

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

var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// Create writes a new pending task record with a 24-hour TTL.
func (s *Store) Create(ctx context.Context, t *task.Task) error {
	ok, err := createScript.Run(ctx, s.rdb, []string{keyspace.Task(t.AccountID, t.ID)},
		s.ttl.Milliseconds(),
		fType, t.Type,
		fModel, t.Model,
		fStatus, string(task.Pending),
		fProgress, 0,
		fCreated, t.CreateTime.UnixMilli(),
	).Int()
	if err != nil {
		return fmt.Errorf("taskstore: create %s: %w", t.ID, err)
	}
	if ok == 0 {
		return ErrExists
	}
	return nil
}

// Get returns a task of an account. A task that does not exist, has expired or
// belongs to another account is apperr.NotFound.
func (s *Store) Get(ctx context.Context, accountID, taskID string) (*task.Task, error) {
	m, err := s.rdb.HGetAll(ctx, keyspace.Task(accountID, taskID)).Result()
	if err != nil {
		return nil, fmt.Errorf("taskstore: get %s: %w", taskID, err)
	}
	if len(m) == 0 {
		return nil, notFound(taskID)
	}
	return decode(accountID, taskID, m)
}

func notFound(taskID string) error {
	return apperr.Errorf(apperr.NotFound, "task %s not found", taskID)
}

func decode(accountID, taskID string, m map[string]string) (*task.Task, error) {
	t := &task.Task{
		ID:        taskID,
		AccountID: accountID,
		Type:      m[fType],
		Model:     m[fModel],
		Status:    task.Status(m[fStatus]),
		Results:   []task.Result{},
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

// Returns 0 applied, 1 already final, 2 missing.
var startScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 2 end
if st == 'completed' or st == 'failed' then return 1 end
redis.call('HSET', KEYS[1], 'status', 'processing')
return 0
`)

// Start moves a task to processing. A task already processing (a retry after
// a crash) stays processing and its progress is kept.
func (s *Store) Start(ctx context.Context, accountID, taskID string) (Outcome, error) {
	return s.run(ctx, startScript, accountID, taskID)
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

var completeScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 2 end
if st == 'completed' or st == 'failed' then return 1 end
redis.call('HSET', KEYS[1], 'status', 'completed', 'progress', 100, 'etime', ARGV[2], 'results', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
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
	o, err := s.run(ctx, completeScript, accountID, taskID, s.ttl.Milliseconds(), now.UnixMilli(), enc)
	return o, now, err
}

var failScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 2 end
if st == 'completed' or st == 'failed' then return 1 end
redis.call('HSET', KEYS[1], 'status', 'failed', 'etime', ARGV[2], 'ecode', ARGV[3], 'emsg', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
`)

// Fail marks a task failed with a code and a user-facing message and restarts
// the record's 24-hour TTL.
func (s *Store) Fail(ctx context.Context, accountID, taskID string, f task.Failure) (Outcome, error) {
	return s.run(ctx, failScript, accountID, taskID, s.ttl.Milliseconds(), s.now().UnixMilli(), f.Code, f.Message)
}

var deleteScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then return 0 end
return redis.call('DEL', KEYS[1])
`)

// DeletePending removes a task that is still pending: the gateway's undo when
// it could not enqueue the task. It reports whether a record was removed.
func (s *Store) DeletePending(ctx context.Context, accountID, taskID string) (bool, error) {
	n, err := deleteScript.Run(ctx, s.rdb, []string{keyspace.Task(accountID, taskID)}).Int()
	if err != nil {
		return false, fmt.Errorf("taskstore: delete %s: %w", taskID, err)
	}
	return n == 1, nil
}

func (s *Store) run(ctx context.Context, script *redis.Script, accountID, taskID string, args ...any) (Outcome, error) {
	n, err := script.Run(ctx, s.rdb, []string{keyspace.Task(accountID, taskID)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("taskstore: %s: %w", taskID, err)
	}
	return Outcome(n), nil
}
