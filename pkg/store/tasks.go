package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// Tasks keeps task records: their creation (with its charge), their state
// changes and their reading.
type Tasks struct{ db *DB }

// NewTasks returns the task store on db.
func NewTasks(db *DB) *Tasks { return &Tasks{db: db} }

// taskKeys are the keys a task's state changes touch, all in its
// account's slot, in the order of the scripts' headers.
type taskKeys struct {
	Task     string `lua:"task"`
	Account  string `lua:"account"`
	Inflight string `lua:"inflight"`
	Ledger   string `lua:"ledger"`
	Checks   string `lua:"checks"`
	Running  string `lua:"running"`
	Outbox   string `lua:"outbox"`
}

func keysOfTask(accountID, taskID string) taskKeys {
	return taskKeys{Task: taskKey(accountID, taskID), Account: accountKey(accountID), Inflight: inflightKey(accountID),
		Ledger: ledgerKey(accountID), Checks: checksKey(accountID), Running: runningKey(accountID), Outbox: hooksKey(accountID)}
}

func (k taskKeys) list() []string {
	return []string{k.Task, k.Account, k.Inflight, k.Ledger, k.Checks, k.Running, k.Outbox}
}

// Idempotency keys are kept this long, and a create under way holds its key
// this long at most (a gateway that died mid-create leaves its task to the
// recovery, and its key to a replay).
const (
	IdempotencyTTL     = 24 * time.Hour
	idempotencyPending = 30 * time.Second
)

// FirstQueueCheck is how long after its creation a task still pending is
// first checked for its job (QueueChecks): time enough for its gateway to
// have queued it.
const FirstQueueCheck = 10 * time.Second

// crashMessage is what the owner of a poisoned task reads.
const crashMessage = "the task stopped its worker twice and was not tried again; if it has source images, try smaller or fewer ones"

var createLua = durableScript("create", map[string]int64{
	"CREATED": createCreated, "REPLAYED": createReplayed, "NO_ACCOUNT": createNoAccount, "DISABLED": createDisabled,
	"MODEL_NOT_ALLOWED": createModelNotAllowed, "TASK_EXISTS": createTaskExists, "INFLIGHT_LIMIT": createInflightLimit,
	"NO_CREDITS": createNoCredits, "IDEM_MISMATCH": createIdemMismatch, "IDEM_BUSY": createIdemBusy,
})

// create.lua's reply codes.
const (
	createCreated         = 1
	createReplayed        = 2
	createNoAccount       = -1
	createDisabled        = -2
	createModelNotAllowed = -3
	createTaskExists      = -4
	createInflightLimit   = -5
	createNoCredits       = -6
	createIdemMismatch    = -7
	createIdemBusy        = -8
)

type createKeys struct {
	Task     string `lua:"task"`
	Account  string `lua:"account"`
	Inflight string `lua:"inflight"`
	Ledger   string `lua:"ledger"`
	Checks   string `lua:"checks"`
	Index    string `lua:"index"`
	Idem     string `lua:"idem"`
	Queue    string `lua:"queue"`
}

func (k createKeys) list() []string {
	return []string{k.Task, k.Account, k.Inflight, k.Ledger, k.Checks, k.Index, k.Idem, k.Queue}
}

type createArgs struct {
	Now            int64  `lua:"now"`
	TTL            int64  `lua:"ttl"`
	Price          int64  `lua:"price"`
	DefaultMax     int    `lua:"default_max"`
	CountUntil     int64  `lua:"count_until"`
	Tier           string `lua:"tier"`
	TaskID         string `lua:"task_id"`
	FirstCheck     int64  `lua:"first_check"`
	WithIdem       int    `lua:"with_idem"`
	BodyHash       string `lua:"body_hash"`
	IdemWindow     int64  `lua:"idem_window"`
	IdemTTL        int64  `lua:"idem_ttl"`
	QueueName      string `lua:"queue_name"`
	QueueSeq       int64  `lua:"queue_seq"`
	Job            []byte `lua:"job"`
	Type           string `lua:"type"`
	Model          string `lua:"model"`
	Created        int64  `lua:"created"`
	CallbackURL    string `lua:"callback_url"`
	CallbackEvents string `lua:"callback_events"`
}

func (a createArgs) list() []any {
	return []any{a.Now, a.TTL, a.Price, a.DefaultMax, a.CountUntil, a.Tier, a.TaskID, a.FirstCheck, a.WithIdem, a.BodyHash,
		a.IdemWindow, a.IdemTTL, a.QueueName, a.QueueSeq, a.Job, a.Type, a.Model, a.Created, a.CallbackURL, a.CallbackEvents}
}

// Create writes a new pending task record (24-hour TTL), debiting its
// price from the account, in one step, and returns the balance left. job
// is the task's job payload (jobs.EncodeGenerateImage), kept with the
// record until a run starts; until then the task is also listed for a
// queue check FirstQueueCheck after its creation (QueueChecks): if the
// caller died before queueing the job, or the queue lost it, the check
// finds the task and its payload. With c.Queue set, the task takes its
// number in that queue (t.Queue, t.QueueSeq), for its queue position.
//
// Refusals: apperr.ErrAccountDisabled, *apperr.ModelNotAllowedError,
// *apperr.InflightLimitError, *apperr.InsufficientCreditsError,
// apperr.ErrUnknownKey when the account is gone; a create replayed under
// its Idempotency-Key is *task.Replayed.
func (s *Tasks) Create(ctx context.Context, t *task.Task, c task.Charge, job []byte) (int64, error) {
	db := s.db
	now := db.now()
	acct := t.AccountID
	k := createKeys{Task: taskKey(acct, t.ID), Account: accountKey(acct), Inflight: inflightKey(acct), Ledger: ledgerKey(acct),
		Checks: checksKey(acct), Index: tasksIndexKey(acct), Idem: noKey(acct), Queue: noKey(acct)}
	a := createArgs{
		Now: now.UnixMilli(), TTL: db.ttl.Milliseconds(), Price: c.Price, DefaultMax: c.MaxInflight,
		CountUntil: c.CountUntil.UnixMilli(), Tier: c.Tier, TaskID: t.ID, FirstCheck: now.Add(FirstQueueCheck).UnixMilli(),
		IdemWindow: idempotencyPending.Milliseconds(), IdemTTL: IdempotencyTTL.Milliseconds(),
		QueueName: c.Queue, Job: job, Type: t.Type, Model: t.Model, Created: t.CreateTime.UnixMilli(),
	}
	if c.Idempotency.Key != "" {
		k.Idem, a.WithIdem, a.BodyHash = idempotencyKey(acct, c.Idempotency.Key), 1, c.Idempotency.BodyHash
	}
	if t.Callback.URL != "" {
		a.CallbackURL, a.CallbackEvents = t.Callback.URL, strings.Join(t.Callback.Events, ",")
	}
	seqTaken := false
	if c.Queue != "" {
		if db.cluster() {
			// The queue's key is on another slot than the account's: its
			// number is taken first, and given back if the create fails.
			if seq, err := db.nextQueueSeq(ctx, c.Queue); err == nil {
				a.QueueSeq, seqTaken = seq, true
			} else {
				a.QueueName = "" // no position rather than no task
			}
		} else {
			// One server: in the create's own step, only if it creates.
			k.Queue = queueKey(c.Queue)
		}
	}
	created := false
	if seqTaken {
		defer func() {
			if !created {
				_ = db.dequeued(context.WithoutCancel(ctx), c.Queue, 1)
			}
		}()
	}
	res, err := createLua.run(ctx, db, k.list(), a.list())
	if err != nil {
		return 0, fmt.Errorf("store: create %s: %w", t.ID, err)
	}
	r := createLua.reply(res)
	code, err := r.code()
	if err != nil {
		return 0, err
	}
	n := r.int(1)
	switch code {
	case createCreated:
		created = true
		if seq := r.int(2); seq > 0 {
			t.Queue, t.QueueSeq = c.Queue, seq
		}
		return n, nil
	case createReplayed:
		return 0, &task.Replayed{TaskID: r.str(2)}
	case createIdemMismatch:
		return 0, apperr.New(apperr.Mismatch, "this Idempotency-Key was used with a different request body")
	case createIdemBusy:
		return 0, apperr.New(apperr.Conflict, "a request with this Idempotency-Key is still being processed; try again in a moment")
	case createNoAccount:
		return 0, apperr.ErrUnknownKey
	case createDisabled:
		return 0, apperr.ErrAccountDisabled
	case createModelNotAllowed:
		return 0, &apperr.ModelNotAllowedError{Model: t.Model}
	case createTaskExists:
		return 0, fmt.Errorf("store: task %s already exists", t.ID)
	case createInflightLimit:
		return 0, &apperr.InflightLimitError{Limit: n}
	default: // createNoCredits
		return n, &apperr.InsufficientCreditsError{Price: c.Price, Balance: n}
	}
}

// Get returns a task of an account. A task that does not exist, has
// expired or belongs to another account is *apperr.NotFoundError.
func (s *Tasks) Get(ctx context.Context, accountID, taskID string) (*task.Task, error) {
	m, err := s.db.rdb.HGetAll(ctx, taskKey(accountID, taskID)).Result()
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
		Queue:     m[fTaskQueue],
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

// left counts a task that left its queue (a script said which) out of it,
// for the queue positions of the tasks behind it. Best effort: a count
// lost makes later positions read one too many, never fails the change.
func (s *Tasks) left(ctx context.Context, queue string) {
	if queue == "" {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = s.db.dequeued(lctx, queue, 1)
}

// Place is an account's share of the generations running at once, across
// every worker: at most Limit (0: no limit), each place held until the
// task ends, is handed back, or Until (its deadline: a worker that died
// holding one frees it then).
type Place struct {
	Limit int
	Until time.Time
}

var startLua = durableScript("start", outcomeCodes)

type startArgs struct {
	Now          int64  `lua:"now"`
	Run          string `lua:"run"`
	MaxCrashes   int    `lua:"max_crashes"`
	TTL          int64  `lua:"ttl"`
	CrashMessage string `lua:"crash_message"`
	TaskID       string `lua:"task_id"`
	PlaceLimit   int    `lua:"place_limit"`
	PlaceUntil   int64  `lua:"place_until"`
}

func (a startArgs) list() []any {
	return []any{a.Now, a.Run, a.MaxCrashes, a.TTL, a.CrashMessage, a.TaskID, a.PlaceLimit, a.PlaceUntil}
}

// Change is what a change of a task's state did.
type Change struct {
	Outcome task.Outcome
	// At is when it was made.
	At time.Time
	// Hooked: the task ended with a webhook event its callback wants, now
	// in the account's outbox, to be queued (jobs.QueueHook).
	Hooked bool
	// Refunded is the credits the change gave back.
	Refunded int64
}

// Start gives a task to a run (jobs.RunID) and moves it to processing,
// recording when (the first time), and takes one of the account's places
// (p) in the same step. A task already processing for the same run (a
// retry) stays processing and keeps its progress; if that run never let
// go (Release), its worker died holding it: a crash, and past
// task.MaxCrashes the task fails (Poisoned, refunded). A task another run
// owns is Superseded; one whose account has p.Limit running is Busy, and
// nothing changes. Completing, failing or releasing the task gives the
// place back.
func (s *Tasks) Start(ctx context.Context, accountID, taskID, run string, p Place) (Change, error) {
	now := s.db.now()
	res, err := startLua.run(ctx, s.db, keysOfTask(accountID, taskID).list(), startArgs{
		Now: now.UnixMilli(), Run: run, MaxCrashes: task.MaxCrashes, TTL: s.db.ttl.Milliseconds(), CrashMessage: crashMessage,
		TaskID: taskID, PlaceLimit: p.Limit, PlaceUntil: p.Until.UnixMilli(),
	}.list())
	if err != nil {
		return Change{}, fmt.Errorf("store: start %s: %w", taskID, err)
	}
	r := startLua.reply(res)
	code, err := r.code()
	if err != nil {
		return Change{}, err
	}
	s.left(ctx, r.str(3))
	return Change{Outcome: task.Outcome(code), At: now, Refunded: r.int(1), Hooked: r.int(2) == 1}, nil
}

var releaseLua = newScript("release", outcomes("APPLIED", "SUPERSEDED"))

type releaseKeys struct {
	Task    string `lua:"task"`
	Running string `lua:"running"`
}

func (k releaseKeys) list() []string { return []string{k.Task, k.Running} }

type releaseArgs struct {
	Run    string `lua:"run"`
	TaskID string `lua:"task_id"`
}

func (a releaseArgs) list() []any { return []any{a.Run, a.TaskID} }

// Release records that a run let go of its task alive (it will be
// retried, or put back on its queue by a worker shutting down), so its
// next start is no crash, and gives its place back.
func (s *Tasks) Release(ctx context.Context, accountID, taskID, run string) error {
	k := releaseKeys{Task: taskKey(accountID, taskID), Running: runningKey(accountID)}
	if _, err := releaseLua.run(ctx, s.db, k.list(), releaseArgs{Run: run, TaskID: taskID}.list()); err != nil {
		return fmt.Errorf("store: release %s: %w", taskID, err)
	}
	return nil
}

var progressLua = newScript("progress", map[string]int64{"CHANGED": 1, "UNCHANGED": 0})

type progressKeys struct {
	Task string `lua:"task"`
}

func (k progressKeys) list() []string { return []string{k.Task} }

type progressArgs struct {
	Pct int    `lua:"pct"`
	Run string `lua:"run"`
}

func (a progressArgs) list() []any { return []any{a.Pct, a.Run} }

// Progress raises the progress of a task run owns to pct, clamped to
// 1..task.MaxProgress. It never lowers progress and ignores tasks that are
// not processing or that another run owns. It reports whether the task's
// callback wants this progress event (the change was made and the
// callback asked for task.progress).
func (s *Tasks) Progress(ctx context.Context, accountID, taskID, run string, pct int) (hook bool, err error) {
	pct = min(max(pct, 1), task.MaxProgress)
	res, err := progressLua.run(ctx, s.db, progressKeys{Task: taskKey(accountID, taskID)}.list(), progressArgs{Pct: pct, Run: run}.list())
	if err != nil {
		return false, fmt.Errorf("store: progress %s: %w", taskID, err)
	}
	return progressLua.reply(res).int(1) == 1, nil
}

var completeLua = durableScript("complete", outcomes("APPLIED", "FINAL", "MISSING", "SUPERSEDED"))

type completeArgs struct {
	Now     int64  `lua:"now"`
	TTL     int64  `lua:"ttl"`
	Results []byte `lua:"results"`
	TaskID  string `lua:"task_id"`
	Run     string `lua:"run"`
}

func (a completeArgs) list() []any { return []any{a.Now, a.TTL, a.Results, a.TaskID, a.Run} }

// Complete marks the task run owns completed with its results, sets its
// complete time and restarts the record's 24-hour TTL. A task another run
// owns is Superseded and stays as it is. A task completed while still
// pending is counted out of its queue.
func (s *Tasks) Complete(ctx context.Context, accountID, taskID, run string, results []task.Result) (Change, error) {
	if results == nil {
		results = []task.Result{}
	}
	enc, err := json.Marshal(results)
	if err != nil {
		return Change{}, err
	}
	now := s.db.now()
	res, err := completeLua.run(ctx, s.db, keysOfTask(accountID, taskID).list(), completeArgs{
		Now: now.UnixMilli(), TTL: s.db.ttl.Milliseconds(), Results: enc, TaskID: taskID, Run: run,
	}.list())
	if err != nil {
		return Change{}, fmt.Errorf("store: complete %s: %w", taskID, err)
	}
	r := completeLua.reply(res)
	code, err := r.code()
	if err != nil {
		return Change{}, err
	}
	s.left(ctx, r.str(2))
	return Change{Outcome: task.Outcome(code), At: now, Hooked: r.int(1) == 1}, nil
}

var failLua = durableScript("fail", outcomes("APPLIED", "FINAL", "MISSING", "SUPERSEDED"))

type failArgs struct {
	Now     int64  `lua:"now"`
	TTL     int64  `lua:"ttl"`
	Code    string `lua:"code"`
	Message string `lua:"message"`
	TaskID  string `lua:"task_id"`
	Run     string `lua:"run"`
}

func (a failArgs) list() []any { return []any{a.Now, a.TTL, a.Code, a.Message, a.TaskID, a.Run} }

// Fail marks a task failed with a code and a message for its owner,
// refunds its price (once: only the move to failed refunds) and restarts
// the record's 24-hour TTL. run is the run that fails it; a task another
// run owns is Superseded. "" fails the task whoever owns it (the deadline
// sweep).
func (s *Tasks) Fail(ctx context.Context, accountID, taskID, run string, f task.Failure) (Change, error) {
	now := s.db.now()
	res, err := failLua.run(ctx, s.db, keysOfTask(accountID, taskID).list(), failArgs{
		Now: now.UnixMilli(), TTL: s.db.ttl.Milliseconds(), Code: f.Code, Message: f.Message, TaskID: taskID, Run: run,
	}.list())
	if err != nil {
		return Change{}, fmt.Errorf("store: fail %s: %w", taskID, err)
	}
	r := failLua.reply(res)
	code, err := r.code()
	if err != nil {
		return Change{}, err
	}
	s.left(ctx, r.str(3))
	return Change{Outcome: task.Outcome(code), At: now, Hooked: r.int(1) == 1, Refunded: r.int(2)}, nil
}

var cancelLua = durableScript("cancel", outcomes("APPLIED", "FINAL", "MISSING"))

type cancelArgs struct {
	Now    int64  `lua:"now"`
	TTL    int64  `lua:"ttl"`
	TaskID string `lua:"task_id"`
}

func (a cancelArgs) list() []any { return []any{a.Now, a.TTL, a.TaskID} }

// Cancel cancels an unfinished task: it becomes canceled at once (final:
// no worker starts it, a worker running it can no longer finish it), and
// a pending task is refunded in full; a task a worker had started is not
// refunded (the generation is under way upstream). A task already
// completed, failed or canceled is *apperr.Error Conflict naming its
// status; a missing one *apperr.NotFoundError.
func (s *Tasks) Cancel(ctx context.Context, accountID, taskID string) (task.Cancellation, error) {
	res, err := cancelLua.run(ctx, s.db, keysOfTask(accountID, taskID).list(), cancelArgs{
		Now: s.db.now().UnixMilli(), TTL: s.db.ttl.Milliseconds(), TaskID: taskID,
	}.list())
	if err != nil {
		return task.Cancellation{}, fmt.Errorf("store: cancel %s: %w", taskID, err)
	}
	r := cancelLua.reply(res)
	code, err := r.code()
	if err != nil {
		return task.Cancellation{}, err
	}
	switch task.Outcome(code) {
	case task.Applied:
		s.left(ctx, r.str(5))
		return task.Cancellation{Was: task.Status(r.str(1)), Refunded: r.int(2), Run: r.str(3), Hooked: r.int(4) == 1}, nil
	case task.AlreadyFinal:
		return task.Cancellation{}, apperr.Errorf(apperr.Conflict, "task %s is already %s", taskID, r.str(1))
	}
	return task.Cancellation{}, &apperr.NotFoundError{Kind: "task", ID: taskID}
}

var abortLua = durableScript("abort", map[string]int64{"ABORTED": 0, "NOT_PENDING": 1})

type abortKeys struct {
	Task     string `lua:"task"`
	Account  string `lua:"account"`
	Inflight string `lua:"inflight"`
	Ledger   string `lua:"ledger"`
	Checks   string `lua:"checks"`
	Index    string `lua:"index"`
	Idem     string `lua:"idem"`
}

func (k abortKeys) list() []string {
	return []string{k.Task, k.Account, k.Inflight, k.Ledger, k.Checks, k.Index, k.Idem}
}

type abortArgs struct {
	TaskID   string `lua:"task_id"`
	Note     string `lua:"note"`
	WithIdem int    `lua:"with_idem"`
}

func (a abortArgs) list() []any { return []any{a.TaskID, a.Note, a.WithIdem} }

// Abort undoes the creation of a task that is still pending: the
// gateway's undo when it could not queue the task. The price is refunded
// (the ledger keeps the debit and the refund) and the record removed,
// with the Idempotency-Key it was made under (idemKey, "" for none) if the
// abort applies: a task that goes on (a worker started it) keeps its key,
// so a retry replays it instead of creating and charging again. It
// reports whether the task was aborted.
func (s *Tasks) Abort(ctx context.Context, accountID, taskID, idemKey string) (bool, error) {
	k := abortKeys{Task: taskKey(accountID, taskID), Account: accountKey(accountID), Inflight: inflightKey(accountID),
		Ledger: ledgerKey(accountID), Checks: checksKey(accountID), Index: tasksIndexKey(accountID), Idem: noKey(accountID)}
	a := abortArgs{TaskID: taskID, Note: "enqueue_failed"}
	if idemKey != "" {
		k.Idem, a.WithIdem = idempotencyKey(accountID, idemKey), 1
	}
	res, err := abortLua.run(ctx, s.db, k.list(), a.list())
	if err != nil {
		return false, fmt.Errorf("store: abort %s: %w", taskID, err)
	}
	r := abortLua.reply(res)
	code, err := r.code()
	if err != nil {
		return false, err
	}
	s.left(ctx, r.str(1))
	return code == 0, nil
}

var idempotencyDoneLua = newScript("idempotency_done", map[string]int64{"DONE": 1, "OTHER": 0})

type idemKeys struct {
	Idem string `lua:"idem"`
}

func (k idemKeys) list() []string { return []string{k.Idem} }

type idemDoneArgs struct {
	TaskID string `lua:"task_id"`
}

func (a idemDoneArgs) list() []any { return []any{a.TaskID} }

// IdempotencyDone records that the create of taskID under key stands (its
// job is queued): the key replays it from now on.
func (s *Tasks) IdempotencyDone(ctx context.Context, accountID, key, taskID string) error {
	if _, err := idempotencyDoneLua.run(ctx, s.db, idemKeys{Idem: idempotencyKey(accountID, key)}.list(), idemDoneArgs{TaskID: taskID}.list()); err != nil {
		return fmt.Errorf("store: idempotency key of %s: %w", taskID, err)
	}
	return nil
}

var takeoverLua = durableScript("takeover", outcomes("APPLIED", "FINAL", "MISSING", "SUPERSEDED", "POISONED"))

type takeoverArgs struct {
	Orphan       string `lua:"orphan"`
	NewRun       string `lua:"new_run"`
	MaxCrashes   int    `lua:"max_crashes"`
	Now          int64  `lua:"now"`
	TTL          int64  `lua:"ttl"`
	CrashMessage string `lua:"crash_message"`
	TaskID       string `lua:"task_id"`
	CrashesSeen  int    `lua:"crashes_seen"`
}

func (a takeoverArgs) list() []any {
	return []any{a.Orphan, a.NewRun, a.MaxCrashes, a.Now, a.TTL, a.CrashMessage, a.TaskID, a.CrashesSeen}
}

// Takeover gives a task whose run died (orphan: its worker stopped
// extending its lease) to the next run, and reports which run owns the
// task now. Applied: the new run (next(crashes), a jobs.RunID) owns it,
// and is to be queued. Superseded: a later run owns it already
// (returned), and may need queueing again. AlreadyFinal and Missing:
// nothing to run. Poisoned: the task had crashed its workers too often
// and was failed (Change.Refunded, Change.Hooked); one still pending (its
// runs died before starting it) is counted out of its queue.
func (s *Tasks) Takeover(ctx context.Context, accountID, taskID, orphan string, next func(crashes int) string) (Change, string, error) {
	v, err := s.db.rdb.HMGet(ctx, taskKey(accountID, taskID), fTaskCrashes).Result()
	if err != nil {
		return Change{}, "", fmt.Errorf("store: takeover %s: %w", taskID, err)
	}
	c, _ := v[0].(string)
	crashes, _ := strconv.Atoi(c)
	now := s.db.now()
	res, err := takeoverLua.run(ctx, s.db, keysOfTask(accountID, taskID).list(), takeoverArgs{
		Orphan: orphan, NewRun: next(crashes + 1), MaxCrashes: task.MaxCrashes, Now: now.UnixMilli(), TTL: s.db.ttl.Milliseconds(),
		CrashMessage: crashMessage, TaskID: taskID, CrashesSeen: crashes,
	}.list())
	if err != nil {
		return Change{}, "", fmt.Errorf("store: takeover %s: %w", taskID, err)
	}
	r := takeoverLua.reply(res)
	code, err := r.code()
	if err != nil {
		return Change{}, "", err
	}
	s.left(ctx, r.str(4))
	return Change{Outcome: task.Outcome(code), At: now, Refunded: r.int(2), Hooked: r.int(3) == 1}, r.str(1), nil
}
