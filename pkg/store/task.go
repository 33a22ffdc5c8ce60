package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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
	fTaskJob      = "job"     // the job's payload, while the task is pending
	fTaskRun      = "run"     // the run (jobs.RunID) that owns the task
	fTaskLive     = "live"    // 1 while the owning run has not let go
	fTaskCrashes  = "crashes" // runs whose worker died holding the task
	fTaskCallback = "cb"      // the webhook URL, if any
	fTaskEvents   = "cbev"    // the webhook event types, comma separated
	fTaskQueueSeq = "qseq"    // the task's sequence number in its queue
)

// EventsChannel is the Pub/Sub channel every change of a task's status or
// progress is published on; the message is the task's key (TaskEvent).
const EventsChannel = prefix + "task-events"

// MaxCrashes is how many times a task may take its worker down with it: a
// run that finds it has crashed its workers more often than this fails the
// task (task.WorkerCrashed, refunded) instead of running it again.
const MaxCrashes = 1

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
	// Superseded: another run owns the task now; this one must stop.
	Superseded
	// Poisoned: the task has crashed its workers too often; it was failed
	// (task.WorkerCrashed) and refunded instead.
	Poisoned
	// Busy: the task's account has its share of generations running
	// (Place); nothing changed, and the task waits for a place.
	Busy
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case AlreadyFinal:
		return "already_final"
	case Missing:
		return "missing"
	case Superseded:
		return "superseded"
	case Poisoned:
		return "poisoned"
	case Busy:
		return "busy"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// taskKeys are the keys of a task's scripts, all in the account's slot:
// task, account, inflight, ledger, unqueued, running, hooks, index.
func taskKeys(accountID, taskID string) []string {
	return []string{taskKey(accountID, taskID), accountKey(accountID), inflightKey(accountID), ledgerKey(accountID), unqueuedKey(accountID), runningKey(accountID), hooksKey(accountID), tasksIndexKey(accountID)}
}

// luaFinal is whether a status is final; luaNotify publishes a change of
// the task of KEYS[1] (EventsChannel); luaHook puts a webhook event of it
// in the account's outbox (KEYS[7]) when its callback wants it.
const luaFinal = `
local function final(st) return st == 'completed' or st == 'failed' or st == 'canceled' end
`
const luaNotify = `
local function notify() redis.call('PUBLISH', '` + EventsChannel + `', KEYS[1]) end
`
const luaHook = `
local function hook(ev, now, ttl, task_id)
  local v = redis.call('HMGET', KEYS[1], 'cb', 'cbev')
  if not v[1] or v[1] == '' then return 0 end
  if not string.find(',' .. (v[2] or '') .. ',', ',' .. ev .. ',', 1, true) then return 0 end
  redis.call('ZADD', KEYS[7], 'NX', now, task_id .. '|' .. ev)
  redis.call('PEXPIRE', KEYS[7], ttl)
  return 1
end
`

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
	// Idempotency, when its Key is set, makes the create idempotent: the
	// same key with the same body again is *Replayed, with another body
	// apperr.Mismatch, while the first is being created apperr.Conflict.
	Idempotency task.Idempotency
	// Queue, when set, is the queue the task joins: the create takes its
	// sequence number there (task.Task.QueueSeq), for its queue position.
	Queue string
}

// Replayed is CreateTask's answer to a create whose idempotency key an
// earlier create of the account used with the same body: nothing was
// created or charged, and TaskID is the earlier create's task.
type Replayed struct{ TaskID string }

func (r *Replayed) Error() string { return "store: replay of the create of " + r.TaskID }

// Idempotency keys are kept this long, and a create under way holds its key
// this long at most (a gateway that died mid-create leaves its task to the
// recovery, and its key to a replay).
const (
	IdempotencyTTL     = 24 * time.Hour
	idempotencyPending = 30 * time.Second
)

// KEYS: taskKeys[, idempotency key][, queue key].
// ARGV: now, ttl, price, default max in flight, count-until, tier, task id,
// first queue check, body hash, idempotency pending window, idempotency
// ttl, the idempotency key's index in KEYS (0: none), the queue key's (0:
// none, or a sequence number taken already), then the record's fields and
// values.
// Returns {code, n[, seq]}: 1 created (n = balance, seq = its number in
// its queue), -4 task exists, -7 the idempotency key was used with another
// body, -8 its create is under way, or admit's refusal; {2, 0, task id}
// replays an earlier create.
var createScript = redis.NewScript(luaAdmit + luaLedger + `
local idem = nil
if ARGV[12] ~= '0' then idem = KEYS[tonumber(ARGV[12])] end
local qkey = nil
if ARGV[13] ~= '0' then qkey = KEYS[tonumber(ARGV[13])] end
if idem then
  local v = redis.call('HMGET', idem, 'body', 'task', 'state', 'at')
  if v[1] then
    if v[1] ~= ARGV[9] then return {-7, 0} end
    if v[3] ~= 'done' and tonumber(ARGV[1]) - tonumber(v[4]) < tonumber(ARGV[10]) then return {-8, 0} end
    return {2, 0, v[2]}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {-4, 0} end
local r = admit(KEYS[2], KEYS[3], ARGV[6], ARGV[3], ARGV[1], ARGV[4])
if r[1] ~= 0 then return r end
if idem then
  redis.call('HSET', idem, 'body', ARGV[9], 'task', ARGV[7], 'state', 'creating', 'at', ARGV[1])
  redis.call('PEXPIRE', idem, ARGV[11])
end
local bal = r[2]
local price = tonumber(ARGV[3])
if price > 0 then
  bal = redis.call('HINCRBY', KEYS[2], 'credits', -price)
  ledger(KEYS[4], 'debit', -price, bal, ARGV[7], '')
end
redis.call('HSET', KEYS[1], unpack(ARGV, 14))
local seq = 0
if qkey then
  seq = redis.call('HINCRBY', qkey, 'enq', 1)
  redis.call('HSET', KEYS[1], 'qseq', seq)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[7])
redis.call('ZADD', KEYS[5], ARGV[8], ARGV[7])
-- The account's index, for listing: a task is listed while its record
-- can live (its deadline, then the record's TTL).
local keep = tonumber(ARGV[5]) - tonumber(ARGV[1]) + tonumber(ARGV[2])
if string.sub(ARGV[7], -2) == '00' then
  -- One create in a hundred (by its id's random digits) drops what has
  -- expired; listing skips it meanwhile.
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', tonumber(ARGV[1]) - keep)
end
redis.call('ZADD', KEYS[8], ARGV[1], ARGV[7])
redis.call('PEXPIRE', KEYS[8], keep)
return {1, bal, seq}
`)

// CreateTask writes a new pending task record (24-hour TTL), debiting its
// price from the account, in one step. It returns the balance left. job is
// the task's job payload (jobs.EncodeGenerateImage), kept with the record
// until a run starts; until then the task is also listed for a queue check
// FirstQueueCheck after its creation (QueueChecks): if the caller died
// before queueing the job, or the queue lost it, the check finds the task
// and its payload.
//
// Refusals: apperr.ErrAccountDisabled, *apperr.ModelNotAllowedError,
// *apperr.InflightLimitError, *apperr.InsufficientCreditsError, and
// apperr.ErrUnknownKey when the account is gone.
func (s *Store) CreateTask(ctx context.Context, t *task.Task, c Charge, job []byte) (int64, error) {
	now := s.now()
	keys := taskKeys(t.AccountID, t.ID)
	idemAt, queueAt := 0, 0
	if c.Idempotency.Key != "" {
		keys = append(keys, idempotencyKey(t.AccountID, c.Idempotency.Key))
		idemAt = len(keys)
	}
	seqTaken := false
	if c.Queue != "" {
		if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
			// The queue's key is on another slot than the account's: its
			// number is taken first, and given back if the create fails.
			if seq, err := s.NextQueueSeq(ctx, c.Queue); err == nil {
				t.QueueSeq, seqTaken = seq, true
			}
		} else {
			// One server: in the create's own step, only if it creates.
			keys = append(keys, queueKey(c.Queue))
			queueAt = len(keys)
		}
	}
	created := false
	if seqTaken {
		defer func() {
			if !created {
				if err := s.Dequeued(context.WithoutCancel(ctx), c.Queue, 1); err != nil {
					t.QueueSeq = 0
				}
			}
		}()
	}
	fields := []any{
		fTaskJob, job,
		fTaskType, t.Type,
		fTaskModel, t.Model,
		fTaskStatus, string(task.Pending),
		fTaskProgress, 0,
		fTaskCreated, t.CreateTime.UnixMilli(),
		fTaskPrice, c.Price,
	}
	if t.Callback.URL != "" {
		fields = append(fields, fTaskCallback, t.Callback.URL, fTaskEvents, strings.Join(t.Callback.Events, ","))
	}
	if t.QueueSeq > 0 {
		fields = append(fields, fTaskQueueSeq, t.QueueSeq)
	}
	res, err := s.eval(ctx, createScript, keys, append([]any{
		now.UnixMilli(), s.ttl.Milliseconds(), c.Price, c.MaxInflight, c.CountUntil.UnixMilli(), c.Tier, t.ID,
		now.Add(FirstQueueCheck).UnixMilli(),
		c.Idempotency.BodyHash, idempotencyPending.Milliseconds(), IdempotencyTTL.Milliseconds(),
		idemAt, queueAt,
	}, fields...)...).Slice()
	if err != nil {
		return 0, fmt.Errorf("store: create %s: %w", t.ID, err)
	}
	if len(res) == 3 && res[0] == int64(2) {
		id, _ := res[2].(string)
		return 0, &Replayed{TaskID: id}
	}
	if len(res) < 2 {
		return 0, fmt.Errorf("store: create %s: unexpected reply %v", t.ID, res)
	}
	code, _ := res[0].(int64)
	n, _ := res[1].(int64)
	switch code {
	case 1:
		created = true
		if len(res) > 2 {
			if seq, _ := res[2].(int64); seq > 0 {
				t.QueueSeq = seq
			}
		}
		return n, nil
	case -7:
		return 0, apperr.New(apperr.Mismatch, "this Idempotency-Key was used with a different request body")
	case -8:
		return 0, apperr.New(apperr.Conflict, "a request with this Idempotency-Key is still being processed; try again in a moment")
	case -1:
		return 0, apperr.ErrUnknownKey
	case -2:
		return 0, apperr.ErrAccountDisabled
	case -3:
		return 0, &apperr.ModelNotAllowedError{Model: t.Model}
	case -4:
		return 0, fmt.Errorf("store: task %s already exists", t.ID)
	case -5:
		return 0, &apperr.InflightLimitError{Limit: n}
	case -6:
		return n, &apperr.InsufficientCreditsError{Price: c.Price, Balance: n}
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
	if v := m[fTaskQueueSeq]; v != "" {
		t.QueueSeq, _ = strconv.ParseInt(v, 10, 64)
	}
	if u := m[fTaskCallback]; u != "" {
		t.Callback = task.Callback{URL: u, Events: strings.Split(m[fTaskEvents], ",")}
	}
	return t, nil
}

// luaFail marks the task of KEYS[1] failed and refunds it (once), and
// luaEnd ends it in any final status. KEYS: taskKeys.
const luaFail = luaLedger + luaFinal + luaNotify + luaHook + `
local function refund(task_id, note)
  local v = redis.call('HMGET', KEYS[1], 'price', 'refunded')
  local price = tonumber(v[1] or '0') or 0
  if price <= 0 or v[2] == '1' or redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
  local bal = redis.call('HINCRBY', KEYS[2], 'credits', price)
  redis.call('HSET', KEYS[1], 'refunded', 1)
  ledger(KEYS[4], 'refund', price, bal, task_id, note)
  return price
end
local function ended(status, ev, now, ttl, task_id)
  redis.call('HSET', KEYS[1], 'status', status, 'etime', now, 'live', 0)
  redis.call('HDEL', KEYS[1], 'job')
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('ZREM', KEYS[3], task_id)
  redis.call('ZREM', KEYS[5], task_id)
  redis.call('ZREM', KEYS[6], task_id)
  local hooked = hook(ev, now, ttl, task_id)
  notify()
  return hooked
end
local function fail(now, ttl, code, msg, task_id)
  redis.call('HSET', KEYS[1], 'ecode', code, 'emsg', msg)
  ended('failed', 'task.failed', now, ttl, task_id)
  refund(task_id, code)
end
`

// luaCrashed counts a crash of the task's run and fails the task if it has
// now crashed its workers more than ARGV max times. Returns true when it
// failed the task.
const luaCrashed = `
local function crashed(crashes, max, now, ttl, msg, task_id)
  crashes = crashes + 1
  redis.call('HSET', KEYS[1], 'crashes', crashes)
  if crashes > tonumber(max) then
    fail(now, ttl, 'worker_crashed', msg, task_id)
    return true
  end
  return false
end
`

// crashMessage is what the owner of a poisoned task reads.
const crashMessage = "the task stopped its worker twice and was not tried again; if it has source images, try smaller or fewer ones"

// ARGV: now, run, max crashes, ttl, crash message, task id, place limit,
// place until.
// Returns 0 applied, 1 already final, 2 missing, 3 superseded, 4 poisoned,
// 5 busy.
var startScript = redis.NewScript(luaFail + luaCrashed + `
local v = redis.call('HMGET', KEYS[1], 'status', 'run', 'live', 'crashes')
local st = v[1]
if not st then return 2 end
if final(st) then return 1 end
if v[2] and v[2] ~= '' and v[2] ~= ARGV[2] then return 3 end
local limit = tonumber(ARGV[7] or '0') or 0
if limit > 0 then
  -- The account's share: a place among its generations running now.
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', ARGV[1])
  if not redis.call('ZSCORE', KEYS[6], ARGV[6]) and redis.call('ZCARD', KEYS[6]) >= limit then return 5 end
  redis.call('ZADD', KEYS[6], ARGV[8], ARGV[6])
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[6], last[2])
end
if st == 'processing' and v[3] == '1' then
  -- This run started before and never let go: its worker died.
  if crashed(tonumber(v[4] or '0') or 0, ARGV[3], ARGV[1], ARGV[4], ARGV[5], ARGV[6]) then return 4 end
end
if st == 'pending' then
  redis.call('HSET', KEYS[1], 'status', 'processing', 'stime', ARGV[1])
  redis.call('HDEL', KEYS[1], 'job')
  redis.call('ZREM', KEYS[5], ARGV[6])
  notify()
end
redis.call('HSET', KEYS[1], 'run', ARGV[2], 'live', 1)
return 0
`)

// StartTask gives a task to a run (jobs.RunID) and moves it to processing,
// recording when (the first time). A task already processing for the same
// run (a retry) stays processing and keeps its progress; if that run never
// let go (ReleaseTask), its worker died holding it: a crash, and past
// MaxCrashes the task fails (Poisoned). A task another run owns is
// Superseded.
func (s *Store) StartTask(ctx context.Context, accountID, taskID, run string) (Outcome, error) {
	return s.StartTaskWith(ctx, accountID, taskID, run, Place{})
}

// Place is an account's share of the generations running at once, across
// every worker: at most Limit (0: no limit), each place held until the task
// ends, is handed back, or Until (its deadline: a worker that died holding
// one frees it then).
type Place struct {
	Limit int
	Until time.Time
}

// StartTaskWith is StartTask taking one of the account's places (Place)
// in the same step: a task whose account has Limit running is Busy, and
// nothing changes. Completing, failing or handing the task back gives the
// place back.
func (s *Store) StartTaskWith(ctx context.Context, accountID, taskID, run string, p Place) (Outcome, error) {
	return s.runTask(ctx, startScript, accountID, taskID, s.now().UnixMilli(), run, MaxCrashes, s.ttl.Milliseconds(), crashMessage, taskID,
		p.Limit, p.Until.UnixMilli())
}

// KEYS: task, running. ARGV: run, task id.
var releaseScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'status', 'run')
if v[1] == 'processing' and v[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'live', 0)
  redis.call('ZREM', KEYS[2], ARGV[2])
end
return 0
`)

// ReleaseTask records that a run let go of its task alive (it will be
// retried, or put back on its queue by a worker shutting down), so its next
// start is no crash.
func (s *Store) ReleaseTask(ctx context.Context, accountID, taskID, run string) error {
	if err := releaseScript.Run(ctx, s.rdb, []string{taskKey(accountID, taskID), runningKey(accountID)}, run, taskID).Err(); err != nil {
		return fmt.Errorf("store: release %s: %w", taskID, err)
	}
	return nil
}

// ARGV: pct, run.
var progressScript = redis.NewScript(luaNotify + `
local v = redis.call('HMGET', KEYS[1], 'status', 'progress', 'run')
if v[1] ~= 'processing' or v[3] ~= ARGV[2] then return 0 end
if tonumber(ARGV[1]) <= tonumber(v[2]) then return 0 end
redis.call('HSET', KEYS[1], 'progress', ARGV[1])
notify()
return 1
`)

// MaxProgress is the highest progress a task reports before completion.
const MaxProgress = 99

// SetProgress raises the progress of a task run owns to pct, clamped to
// 1..99. It never lowers progress and ignores tasks that are not processing
// or that another run owns.
func (s *Store) SetProgress(ctx context.Context, accountID, taskID, run string, pct int) error {
	pct = min(max(pct, 1), MaxProgress)
	if err := progressScript.Run(ctx, s.rdb, []string{taskKey(accountID, taskID)}, pct, run).Err(); err != nil {
		return fmt.Errorf("store: progress %s: %w", taskID, err)
	}
	return nil
}

// ARGV: ttl, now, results, task id, run.
var completeScript = redis.NewScript(luaFail + `
local v = redis.call('HMGET', KEYS[1], 'status', 'run')
local st = v[1]
if not st then return 2 end
if final(st) then return 1 end
if v[2] and v[2] ~= '' and v[2] ~= ARGV[5] then return 3 end
redis.call('HSET', KEYS[1], 'progress', 100, 'results', ARGV[3])
ended('completed', 'task.completed', ARGV[2], ARGV[1], ARGV[4])
return 0
`)

// CompleteTask marks the task run owns completed with its results, sets
// complete_time and restarts the record's 24-hour TTL. It returns when the
// task completed. A task another run owns is Superseded and stays as it is.
func (s *Store) CompleteTask(ctx context.Context, accountID, taskID, run string, results []task.Result) (Outcome, time.Time, error) {
	if results == nil {
		results = []task.Result{}
	}
	enc, err := json.Marshal(results)
	if err != nil {
		return 0, time.Time{}, err
	}
	now := s.now()
	o, err := s.runTask(ctx, completeScript, accountID, taskID, s.ttl.Milliseconds(), now.UnixMilli(), enc, taskID, run)
	return o, now, err
}

// ARGV: ttl, now, code, message, task id, run ("" for any).
var failScript = redis.NewScript(luaFail + `
local v = redis.call('HMGET', KEYS[1], 'status', 'run')
local st = v[1]
if not st then return 2 end
if final(st) then return 1 end
if ARGV[6] ~= '' and v[2] and v[2] ~= '' and v[2] ~= ARGV[6] then return 3 end
fail(ARGV[2], ARGV[1], ARGV[3], ARGV[4], ARGV[5])
return 0
`)

// FailTask marks a task failed with a code and a message for its owner,
// refunds its price (once: only the transition to failed refunds) and
// restarts the record's 24-hour TTL. run is the run that fails it; a task
// another run owns is Superseded. "" fails the task whoever owns it (the
// deadline sweeper).
func (s *Store) FailTask(ctx context.Context, accountID, taskID, run string, f task.Failure) (Outcome, error) {
	return s.runTask(ctx, failScript, accountID, taskID, s.ttl.Milliseconds(), s.now().UnixMilli(), f.Code, f.Message, taskID, run)
}

// ARGV: now, ttl, task id.
// Returns {outcome, status before, credits refunded, run, hooked}.
var cancelScript = redis.NewScript(luaFail + `
local v = redis.call('HMGET', KEYS[1], 'status', 'run')
local st = v[1]
if not st then return {2, '', 0, '', 0} end
if final(st) then return {1, st, 0, '', 0} end
local refunded = 0
if st == 'pending' then refunded = refund(ARGV[3], 'canceled') end
local hooked = ended('canceled', 'task.canceled', ARGV[1], ARGV[2], ARGV[3])
return {0, st, refunded, v[2] or '', hooked}
`)

// Canceled is what CancelTask did.
type Canceled struct {
	// Was is the status the task had: pending or processing.
	Was task.Status
	// Refunded is the credits given back (a pending task's full price;
	// nothing for one a worker had started).
	Refunded int64
	// Run is the run that owned the task ("" if none had started it): the
	// one to stop.
	Run string
	// Hooked is whether the task's callback wants the task.canceled event:
	// it is in the account's webhook outbox.
	Hooked bool
}

// CancelTask cancels an unfinished task: it becomes canceled at once
// (final: no worker starts it, a worker running it can no longer finish
// it), and a pending task is refunded in full; a task a worker had started
// is not refunded (the generation is under way upstream). A task already
// completed, failed or canceled is *apperr.Error Conflict naming its
// status; a missing one *apperr.NotFoundError.
func (s *Store) CancelTask(ctx context.Context, accountID, taskID string) (Canceled, error) {
	res, err := s.eval(ctx, cancelScript, taskKeys(accountID, taskID), s.now().UnixMilli(), s.ttl.Milliseconds(), taskID).Slice()
	if err != nil {
		return Canceled{}, fmt.Errorf("store: cancel %s: %w", taskID, err)
	}
	if len(res) != 5 {
		return Canceled{}, fmt.Errorf("store: cancel %s: unexpected reply %v", taskID, res)
	}
	code, _ := res[0].(int64)
	st, _ := res[1].(string)
	n, _ := res[2].(int64)
	run, _ := res[3].(string)
	hooked, _ := res[4].(int64)
	switch Outcome(code) {
	case Applied:
		return Canceled{Was: task.Status(st), Refunded: n, Run: run, Hooked: hooked == 1}, nil
	case AlreadyFinal:
		return Canceled{}, apperr.Errorf(apperr.Conflict, "task %s is already %s", taskID, st)
	}
	return Canceled{}, &apperr.NotFoundError{Kind: "task", ID: taskID}
}

// KEYS: the task's keys[, its idempotency record]. ARGV: task id, note.
var abortScript = redis.NewScript(luaFail + `
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then return 1 end
refund(ARGV[1], ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
if KEYS[9] and redis.call('HGET', KEYS[9], 'task') == ARGV[1] then
  redis.call('DEL', KEYS[9])
end
return 0
`)

// AbortTask undoes the creation of a task that is still pending: the
// gateway's undo when it could not enqueue the task. The price is refunded
// (the ledger keeps the debit and the refund) and the record removed. It
// reports whether the task was aborted.
func (s *Store) AbortTask(ctx context.Context, accountID, taskID string) (bool, error) {
	return s.AbortTaskWith(ctx, accountID, taskID, "")
}

// AbortTaskWith is AbortTask that also frees the idempotency key the
// create was made under (idemKey, "" for none), in the same step and only
// if the abort applies: a task that goes on (a worker started it) keeps
// its key, so a retry replays it instead of creating and charging again.
func (s *Store) AbortTaskWith(ctx context.Context, accountID, taskID, idemKey string) (bool, error) {
	keys := taskKeys(accountID, taskID)
	if idemKey != "" {
		keys = append(keys, idempotencyKey(accountID, idemKey))
	}
	n, err := s.eval(ctx, abortScript, keys, taskID, "enqueue_failed").Int()
	if err != nil {
		return false, fmt.Errorf("store: %s: %w", taskID, err)
	}
	return Outcome(n) == Applied, nil
}

// FirstQueueCheck is how long after its creation a task still pending is
// first checked for its job (QueueChecks): time enough for its gateway to
// have queued it.
const FirstQueueCheck = 10 * time.Second

// QueueCheck is a task still pending whose job is due to be checked for:
// its gateway may have stopped before queueing it, or a failover may have
// lost the queue's write while keeping the task's (the two are separate
// writes, to keys on separate slots).
type QueueCheck struct {
	AccountID, TaskID string
	// Pending is whether the task is still pending (a check listed for a
	// task that has moved on is only to be dropped); Job its job payload,
	// Run the run that owns it ("" before any takeover), Created its
	// creation time.
	Pending bool
	Job     []byte
	Run     string
	Created time.Time
}

// QueueChecks lists up to limit queue checks, across all accounts, due by
// now. Every task is listed, from its creation until a run starts it or it
// ends; the checker moves each check on (ScheduleQueueCheck) or drops it
// (DropQueueCheck).
func (s *Store) QueueChecks(ctx context.Context, now time.Time, limit int64) ([]QueueCheck, error) {
	ids, due, err := s.dueByAccount(ctx, unqueuedKey, strconv.FormatInt(now.UnixMilli(), 10), limit)
	if err != nil {
		return nil, fmt.Errorf("store: queue checks: %w", err)
	}
	var out []QueueCheck
	for i, id := range ids {
		for _, z := range due[i] {
			if int64(len(out)) >= limit {
				break
			}
			t, _ := z.Member.(string)
			out = append(out, QueueCheck{AccountID: id, TaskID: t})
		}
	}
	recs := make([]*redis.SliceCmd, len(out))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range out {
			recs[i] = p.HMGet(ctx, taskKey(u.AccountID, u.TaskID), fTaskStatus, fTaskJob, fTaskRun, fTaskCreated)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: queue checks: %w", err)
	}
	for i := range out {
		v := recs[i].Val()
		str := func(j int) string { s, _ := v[j].(string); return s }
		out[i].Pending = str(0) == string(task.Pending)
		if job := str(1); job != "" {
			out[i].Job = []byte(job)
		}
		out[i].Run = str(2)
		if ms, err := strconv.ParseInt(str(3), 10, 64); err == nil {
			out[i].Created = time.UnixMilli(ms)
		}
	}
	return out, nil
}

// ScheduleQueueCheck moves a task's queue check to at, if it is still
// listed (a run that started the task since has dropped it).
func (s *Store) ScheduleQueueCheck(ctx context.Context, accountID, taskID string, at time.Time) error {
	if err := s.rdb.ZAddXX(ctx, unqueuedKey(accountID), redis.Z{Score: float64(at.UnixMilli()), Member: taskID}).Err(); err != nil {
		return fmt.Errorf("store: queue check %s: %w", taskID, err)
	}
	return nil
}

// DropQueueCheck stops checking a task for its job: it is no longer
// pending, or its job cannot be queued at all.
func (s *Store) DropQueueCheck(ctx context.Context, accountID, taskID string) error {
	if err := s.rdb.ZRem(ctx, unqueuedKey(accountID), taskID).Err(); err != nil {
		return fmt.Errorf("store: queue check %s: %w", taskID, err)
	}
	return nil
}

// Takeover gives a task whose run died (orphan: its worker stopped
// extending its lease) to the next run, and reports which run owns the task
// now. Applied: the new run (jobs.RunID with the next number) owns it, and
// is to be queued. Superseded: a later run owns it already (returned), and
// may need queueing again. AlreadyFinal and Missing: nothing to run.
// Poisoned: the task had crashed its workers too often and was failed.
func (s *Store) Takeover(ctx context.Context, accountID, taskID, orphan string, next func(crashes int) string) (Outcome, string, error) {
	v, err := s.rdb.HMGet(ctx, taskKey(accountID, taskID), fTaskCrashes).Result()
	if err != nil {
		return 0, "", fmt.Errorf("store: takeover %s: %w", taskID, err)
	}
	c, _ := v[0].(string)
	crashes, _ := strconv.Atoi(c)
	newRun := next(crashes + 1)
	res, err := s.eval(ctx, takeoverScript, taskKeys(accountID, taskID),
		orphan, newRun, MaxCrashes, s.now().UnixMilli(), s.ttl.Milliseconds(), crashMessage, taskID, crashes).Slice()
	if err != nil {
		return 0, "", fmt.Errorf("store: takeover %s: %w", taskID, err)
	}
	code, _ := res[0].(int64)
	run, _ := res[1].(string)
	return Outcome(code), run, nil
}

// ARGV: orphan run, new run, max crashes, now, ttl, crash message, task id,
// crashes seen by the caller. Returns {outcome, owning run}.
var takeoverScript = redis.NewScript(luaFail + luaCrashed + `
local v = redis.call('HMGET', KEYS[1], 'status', 'run', 'crashes')
local st = v[1]
if not st then return {2, ''} end
if final(st) then return {1, ''} end
local run = v[2] or ''
if run ~= '' and run ~= ARGV[1] then return {3, run} end
local crashes = tonumber(v[3] or '0') or 0
if crashes ~= tonumber(ARGV[8]) then return {3, run} end
if crashed(crashes, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) then return {4, ''} end
redis.call('HSET', KEYS[1], 'run', ARGV[2], 'live', 0)
return {0, ARGV[2]}
`)

// Overdue is an unfinished task past its deadline.
type Overdue struct{ AccountID, TaskID string }

// Overdue lists up to limit tasks, across all accounts, still pending or
// processing past the time they were to stop counting as in flight (their
// deadline plus a margin): tasks whose worker died on the last attempt, or
// whose job expired in the queue.
func (s *Store) Overdue(ctx context.Context, limit int64) ([]Overdue, error) {
	ids, due, err := s.dueByAccount(ctx, inflightKey, "("+strconv.FormatInt(s.now().UnixMilli(), 10), limit)
	if err != nil {
		return nil, fmt.Errorf("store: overdue: %w", err)
	}
	var out []Overdue
	for i, id := range ids {
		for _, z := range due[i] {
			t, _ := z.Member.(string)
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
	out, err := s.FailTask(ctx, o.AccountID, o.TaskID, "", task.Failure{Code: string(task.Timeout), Message: "the task did not finish within its deadline"})
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
	n, err := s.eval(ctx, script, taskKeys(accountID, taskID), args...).Int()
	if err != nil {
		return 0, fmt.Errorf("store: %s: %w", taskID, err)
	}
	return Outcome(n), nil
}

// KEYS: idempotency record. ARGV: task id.
var idempotencyScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'task') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done')
return 1
`)

// IdempotencyDone records that the create of taskID under key stands (its
// job is queued): the key replays it from now on.
func (s *Store) IdempotencyDone(ctx context.Context, accountID, key, taskID string) error {
	if err := idempotencyScript.Run(ctx, s.rdb, []string{idempotencyKey(accountID, key)}, taskID).Err(); err != nil {
		return fmt.Errorf("store: idempotency key of %s: %w", taskID, err)
	}
	return nil
}
