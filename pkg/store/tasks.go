package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
)

// Tasks keeps task records: their creation (with its charge and the
// account's window), their state changes and their reading.
//
// An account's window: at most Options.Share × its weight of its tasks
// hold a place at once (admitted: their job queued, or running); the rest
// wait parked, in the account's own list, costing no worker and no Redis
// work, and are admitted oldest first as places free (the change that
// frees one returns the tasks it admitted, Change.Admitted, for the caller
// to queue). Accounts with work waiting are so served in weighted
// round-robin by the queues' order.
type Tasks struct {
	db *DB
	// pulse is the liveness of the worker process using the store (nil:
	// a process that runs no tasks, or names no worker: a run it started
	// and did not let go always counts as a crash).
	pulse *Pulse
}

// NewTasks returns the task store on db.
func NewTasks(db *DB) *Tasks { return &Tasks{db: db} }

// WithPulse returns the task store of the worker whose liveness p is: the
// runs it starts name it, and a run that never let go counts as a crash
// only when p finds the worker that started it dead.
func (s *Tasks) WithPulse(p *Pulse) *Tasks {
	c := *s
	c.pulse = p
	return &c
}

// holder is the worker the runs this store starts name.
func (s *Tasks) holder() string {
	if s.pulse == nil {
		return "1"
	}
	return s.pulse.ID()
}

// dead judges the worker holder of a run that never let go.
func (s *Tasks) dead(ctx context.Context, holder string) (string, error) {
	if s.pulse == nil {
		return "1", nil
	}
	d, err := s.pulse.Dead(ctx, holder)
	if err != nil || !d {
		return "0", err
	}
	return "1", nil
}

// outcomeHeld is a script's reply that a run's worker is to be judged
// first (lib.lua's HELD): never a task.Outcome a caller sees.
var outcomeHeld = outcomeCodes["HELD"]

// taskKeys are the keys a task's state changes touch, all in its
// account's shard's slot, in the order of the scripts' headers.
type taskKeys struct {
	Task    string `lua:"task"`
	Account string `lua:"account"`
	Ledger  string `lua:"ledger"`
	Parked  string `lua:"parked"`
	Due     string `lua:"due"`
}

func keysOfTask(accountID, taskID string) taskKeys {
	return taskKeys{Task: taskKey(accountID, taskID), Account: accountKey(accountID),
		Ledger: ledgerKey(accountID), Parked: parkedKey(accountID), Due: dueOf(accountID)}
}

// Idempotency keys are kept this long. A create under way holds its key
// until its undo could no longer apply (ValidUntil, then UndoWindow): a
// gateway that died mid-create leaves its task to the recovery, and its
// key to a replay from then on. Without a ValidUntil, idempotencyPending.
const (
	IdempotencyTTL     = 24 * time.Hour
	idempotencyPending = 30 * time.Second
)

// The recovery's timing. An admitted task still pending is checked for its
// job FirstQueueCheck after it was admitted (time enough for whoever
// admitted it to have queued it), then every QueueRecheck until it starts
// or ends: a job lost from its queue (a failover that lost the write, a
// gateway that died between the two steps, an operator's delete) is queued
// again within QueueRecheck and a poll. A final webhook event is left to
// its queueing for HookGrace before the recovery queues it.
const (
	FirstQueueCheck = 10 * time.Second
	QueueRecheck    = 30 * time.Second
	HookGrace       = 5 * time.Second
)

// crashMessage is what the owner of a poisoned task reads.
const crashMessage = "the task stopped its worker twice and was not tried again; if it has source images, try smaller or fewer ones"

// keepMs is the ledger's retention in ms (0: for ever).
func (db *DB) keepMs() int64 { return db.ledgerKeep.Milliseconds() }

var createLua = durableScript[createKeys, createArgs, createReply]("create", map[string]int64{
	"CREATED": createCreated, "REPLAYED": createReplayed, "NO_ACCOUNT": createNoAccount, "DISABLED": createDisabled,
	"MODEL_NOT_ALLOWED": createModelNotAllowed, "TASK_EXISTS": createTaskExists, "INFLIGHT_LIMIT": createInflightLimit,
	"NO_CREDITS": createNoCredits, "IDEM_MISMATCH": createIdemMismatch, "IDEM_BUSY": createIdemBusy, "LATE": createLate,
	"KEY_SPEND_LIMIT": createKeySpendLimit, "QUOTED": createQuoted,
})

// create.lua's reply codes.
const (
	createCreated         = 1
	createReplayed        = 2
	createQuoted          = 3
	createNoAccount       = -1
	createDisabled        = -2
	createModelNotAllowed = -3
	createTaskExists      = -4
	createInflightLimit   = -5
	createNoCredits       = -6
	createIdemMismatch    = -7
	createIdemBusy        = -8
	createLate            = -9
	createKeySpendLimit   = -10
)

// A create with a task.Charge.ValidUntil, and an undo (Abort) whose
// context has a deadline, apply only until then by Redis's clock: held up
// longer (Redis hung, the network stalled), Redis refuses them, so their
// caller, which gave up on them, knows they will never take effect.
//
// ClockSkew is what a caller adds to its own deadline for the clocks of
// Redis and its host to differ (NTP keeps them far closer). UndoWindow is
// how long an undo is waited for. An undo that finds no task leaves a
// tombstone for voidFor, far longer than any of these, so that a create it
// overtook never applies. CreateWindow is the bound a caller without a deadline of its own gives
// its creates.
const (
	ClockSkew    = 2 * time.Second
	UndoWindow   = 2 * time.Second
	CreateWindow = 10 * time.Second
	voidFor      = 10 * time.Minute
)

// noQueueSeq is create.lua's queue_seq for a task that joins its queue
// without a number (it could not be taken): no queue position.
const noQueueSeq = -1

// ErrLate: the create or undo reached Redis after its time and did nothing
// (Redis was held up, or the caller's clock is behind Redis's).
var ErrLate = errors.New("store: the change reached Redis after its time (nothing was done)")

type createKeys struct {
	Task    string `lua:"task"`
	Account string `lua:"account"`
	Ledger  string `lua:"ledger"`
	Parked  string `lua:"parked"`
	Due     string `lua:"due"`
	Index   string `lua:"index"`
	Idem    string `lua:"idem"`
	Queue   string `lua:"queue"`
	Spend   string `lua:"spend"`
	Usage   string `lua:"usage"`
}

type createArgs struct {
	Now            int64  `lua:"now"`
	TTL            int64  `lua:"ttl"`
	Price          int64  `lua:"price"`
	DefaultMax     int    `lua:"default_max"`
	Deadline       int64  `lua:"deadline"`
	Tier           string `lua:"tier"`
	AccountID      string `lua:"account_id"`
	TaskID         string `lua:"task_id"`
	CheckAt        int64  `lua:"check_at"`
	Share          int    `lua:"share"`
	Keep           int64  `lua:"keep"`
	WithIdem       int    `lua:"with_idem"`
	BodyHash       string `lua:"body_hash"`
	IdemUntil      int64  `lua:"idem_until"`
	IdemTTL        int64  `lua:"idem_ttl"`
	QueueName      string `lua:"queue_name"`
	QueueSeq       int64  `lua:"queue_seq"`
	Input          []byte `lua:"input"`
	Type           string `lua:"type"`
	Model          string `lua:"model"`
	Created        int64  `lua:"created"`
	CallbackURL    string `lua:"callback_url"`
	CallbackEvents string `lua:"callback_events"`
	ValidUntil     int64  `lua:"valid_until"`
	KeyHash        string `lua:"key_hash"`
	SpendLimit     int64  `lua:"spend_limit"`
	UsageUntil     int64  `lua:"usage_until"`
	Queues         string `lua:"queues"`
	Dry            int    `lua:"dry"`
	TraceParent    string `lua:"traceparent"`
}

// createReply is create.lua's reply. N is the balance (CREATED,
// NO_CREDITS), the limit (INFLIGHT_LIMIT) or what the key has spent
// (KEY_SPEND_LIMIT); Replayed the earlier task (REPLAYED).
type createReply struct {
	Code     int64         `lua:"code"`
	N        int64         `lua:"n"`
	Replayed string        `lua:"replayed"`
	QueueSeq int64         `lua:"queue_seq"`
	Admitted bool          `lua:"admitted"`
	Others   []admittedRow `lua:"admitted_others"`
}

// Creation is what a create did.
type Creation struct {
	// Balance is the account's credits left.
	Balance int64
	// Admitted: the task holds a place: its job is to be queued now.
	// Otherwise it waits parked, and the change that admits it later
	// returns it (Change.Admitted).
	Admitted bool
	// Others are other tasks of the account this create admitted (a place
	// had freed while none was admitted); their jobs are to be queued too.
	Others []task.Admitted
}

// Create writes a new pending task record, debiting its price from the
// account, in one step. input is the task's input (jobs.EncodeInput), kept
// with the record until the task ends: the job queued carries only which
// task it is, and the run reads the input back when it starts the task
// (Start). If the caller dies before queueing the job, or the queue loses
// it, the task's queue checks queue it again. c.CountUntil is the task's
// deadline: an unfinished task counts as in flight until it, then is
// failed and refunded. With c.Queue set, an admitted task takes its number
// in that queue, for its queue position: on one server in the create's
// step (t.Queue, t.QueueSeq), on a cluster in a batch within
// queueCountEvery (numberLater).
//
// Refusals: apperr.ErrAccountDisabled, *apperr.ModelNotAllowedError,
// *apperr.InflightLimitError, *apperr.InsufficientCreditsError,
// apperr.ErrUnknownKey when the account is gone; a create replayed under
// its Idempotency-Key is *task.Replayed.
func (s *Tasks) Create(ctx context.Context, t *task.Task, c task.Charge, input []byte) (Creation, error) {
	db := s.db
	now := db.now()
	k, a := s.createCall(t, c, input, now)
	if c.Queue != "" {
		if db.cluster() {
			// The queue's key is on another slot than the account's: an
			// admitted task takes its number after the create, in a batch
			// (numberLater), the create itself one round trip.
			a.QueueSeq = noQueueSeq
		} else {
			// One server: in the create's own step, only if it admits.
			k.Queue = queueKey(c.Queue)
		}
	}
	r, err := createLua.run(ctx, db, k, a)
	if err != nil {
		return Creation{}, fmt.Errorf("store: create %s: %w", t.ID, err)
	}
	switch r.Code {
	case createCreated:
		out := Creation{Balance: r.N, Admitted: r.Admitted}
		if r.QueueSeq > 0 {
			t.Queue, t.QueueSeq = c.Queue, r.QueueSeq
		} else if r.Admitted && c.Queue != "" && db.cluster() {
			db.numberLater([]task.Admitted{{AccountID: t.AccountID, TaskID: t.ID, Queue: c.Queue}})
		}
		out.Others = s.admitted(ctx, t.AccountID, r.Others)
		return out, nil
	case createReplayed:
		return Creation{}, &task.Replayed{TaskID: r.Replayed}
	case createNoCredits:
		return Creation{Balance: r.N}, createRefused(r, t, c)
	}
	return Creation{}, createRefused(r, t, c)
}

// Quote checks a create of t charged as c says exactly as Create would
// (the account's rules, its balance, the key's spend limit, in the same
// script) and changes nothing: it returns the balance the price would be
// charged from, or the refusal Create would give. An Idempotency-Key
// plays no part: a quote is never replayed.
func (s *Tasks) Quote(ctx context.Context, t *task.Task, c task.Charge) (int64, error) {
	c.Idempotency, c.Queue, c.ValidUntil = task.Idempotency{}, "", time.Time{}
	k, a := s.createCall(t, c, nil, s.db.now())
	a.Dry = 1
	r, err := createLua.run(ctx, s.db, k, a)
	if err != nil {
		return 0, fmt.Errorf("store: quote: %w", err)
	}
	if r.Code == createQuoted {
		return r.N, nil
	}
	return 0, createRefused(r, t, c)
}

// createCall is create.lua's keys and arguments for a create of t.
func (s *Tasks) createCall(t *task.Task, c task.Charge, input []byte, now time.Time) (createKeys, createArgs) {
	db := s.db
	acct := t.AccountID
	day := dayOf(t.CreateTime.UnixMilli())
	k := createKeys{Task: taskKey(acct, t.ID), Account: accountKey(acct), Ledger: ledgerKey(acct),
		Parked: parkedKey(acct), Due: dueOf(acct), Index: tasksIndexKey(acct), Idem: noKey(acct), Queue: noKey(acct),
		Spend: spendKey(acct), Usage: usageKey(acct, day)}
	a := createArgs{
		KeyHash: c.KeyHash, SpendLimit: c.SpendLimit,
		// A day's usage is kept UsageDays after the day ends.
		UsageUntil: (day + 1 + UsageDays) * 86_400_000,
		Now:        now.UnixMilli(), TTL: db.ttl.Milliseconds(), Price: c.Price, DefaultMax: c.MaxInflight,
		Deadline: c.CountUntil.UnixMilli(), Tier: c.Tier, AccountID: acct, TaskID: t.ID,
		CheckAt: now.Add(FirstQueueCheck).UnixMilli(), Share: db.share, Keep: db.keepMs(),
		IdemUntil: now.Add(idempotencyPending).UnixMilli(), IdemTTL: IdempotencyTTL.Milliseconds(),
		QueueName: c.Queue, Input: input, Type: t.Type, Model: t.Model, Created: t.CreateTime.UnixMilli(),
		Queues: db.queues(), TraceParent: t.TraceParent,
	}
	if !c.ValidUntil.IsZero() {
		a.ValidUntil = c.ValidUntil.UnixMilli()
		a.IdemUntil = c.ValidUntil.Add(UndoWindow + ClockSkew).UnixMilli()
	}
	if c.Idempotency.Key != "" {
		k.Idem, a.WithIdem, a.BodyHash = idempotencyKey(acct, c.Idempotency.Key), 1, c.Idempotency.BodyHash
	}
	if t.Callback.URL != "" {
		a.CallbackURL, a.CallbackEvents = t.Callback.URL, strings.Join(t.Callback.Events, ",")
	}
	return k, a
}

// createRefused is the error of a create (or quote) create.lua refused.
func createRefused(r createReply, t *task.Task, c task.Charge) error {
	n := r.N
	switch r.Code {
	case createIdemMismatch:
		return apperr.New(apperr.Mismatch, "this Idempotency-Key was used with a different request body")
	case createIdemBusy:
		return apperr.New(apperr.Conflict, "a request with this Idempotency-Key is still being processed; try again in a moment")
	case createNoAccount:
		return apperr.ErrUnknownKey
	case createDisabled:
		return apperr.ErrAccountDisabled
	case createModelNotAllowed:
		return &apperr.ModelNotAllowedError{Model: t.Model}
	case createTaskExists:
		return fmt.Errorf("store: task %s already exists", t.ID)
	case createLate:
		return ErrLate
	case createInflightLimit:
		return &apperr.InflightLimitError{Limit: n}
	case createKeySpendLimit:
		return &apperr.SpendLimitError{Limit: c.SpendLimit, Spent: n, Price: c.Price}
	case createNoCredits:
		return &apperr.InsufficientCreditsError{Price: c.Price, Balance: n}
	}
	return fmt.Errorf("store: create.lua answered the unknown code %d", r.Code)
}

// admitted are the tasks a script admitted. On one server the script
// numbered them in their queues already (lib.lua's promote); on a cluster
// they take their numbers in the next batch (numberLater).
func (s *Tasks) admitted(_ context.Context, accountID string, rows []admittedRow) []task.Admitted {
	var out []task.Admitted
	for _, r := range rows {
		a := task.Admitted{AccountID: accountID, TaskID: r.TaskID, Queue: r.Queue, Deadline: time.UnixMilli(r.Deadline)}
		if a.TaskID == "" {
			continue
		}
		out = append(out, a)
	}
	if s.db.cluster() {
		s.db.numberLater(out)
	}
	return out
}

var queueSeqLua = newScript[queueSeqKeys, queueSeqArgs, queueSeqReply]("queue_seq", map[string]int64{"SET": 1})

type queueSeqKeys struct {
	Account string `lua:"account"`
}

// queueSeqArgs: task id, queue name, number, for each task.
type queueSeqArgs struct {
	Tasks []any `lua:"tasks"`
}

type queueSeqReply struct {
	Code int64 `lua:"code"`
	// GaveBack: the queue of each number a task did not take.
	GaveBack []string `lua:"queue"`
}

// numberInQueues gives tasks admitted on a cluster (one batch of
// numberLater's) their numbers in their queues: one join_queue call a
// queue takes a block of numbers, given in the order the tasks were
// admitted, and one queue_seq call an account sets its tasks' numbers,
// the calls of each step pipelined over the masters: two round trips a
// batch. It returns, by queue, the numbers to give back (a task no longer
// pending could not take its own: countOut). Best effort: a task without
// one reads no position.
func (db *DB) numberInQueues(ctx context.Context, admitted []task.Admitted) (giveBack map[string]int) {
	var queues []string
	count := map[string]int{}
	for _, a := range admitted {
		if count[a.Queue] == 0 {
			queues = append(queues, a.Queue)
		}
		count[a.Queue]++
	}
	now := db.now().UnixMilli()
	joins := make([]call[queueKeys, joinQueueArgs], len(queues))
	for i, q := range queues {
		joins[i] = call[queueKeys, joinQueueArgs]{queueKeys{Queue: queueKey(q)}, joinQueueArgs{Now: now, N: count[q]}}
	}
	replies, errs, err := joinQueueLua.runPipelined(ctx, db, joins)
	if err != nil {
		return nil
	}
	next := map[string]int64{} // a queue's next number to give
	for i, q := range queues {
		if errs[i] == nil {
			next[q] = replies[i].Seq - int64(count[q]) + 1
		}
	}
	var sets []call[queueSeqKeys, queueSeqArgs]
	byAccount := map[string]int{} // an account's call in sets
	for _, a := range admitted {
		seq, ok := next[a.Queue]
		if !ok {
			continue
		}
		next[a.Queue]++
		i, ok := byAccount[a.AccountID]
		if !ok {
			i = len(sets)
			byAccount[a.AccountID] = i
			sets = append(sets, call[queueSeqKeys, queueSeqArgs]{keys: queueSeqKeys{Account: accountKey(a.AccountID)}})
		}
		sets[i].args.Tasks = append(sets[i].args.Tasks, a.TaskID, a.Queue, seq)
	}
	set, errs, err := queueSeqLua.runPipelined(ctx, db, sets)
	if err != nil {
		return nil
	}
	giveBack = map[string]int{}
	for i := range sets {
		// Given back only when the task surely did not take it.
		if errs[i] == nil {
			for _, q := range set[i].GaveBack {
				giveBack[q]++
			}
		}
	}
	return giveBack
}

// Get returns a task of an account. A task that does not exist, has
// expired or belongs to another account is *apperr.NotFoundError.
func (s *Tasks) Get(ctx context.Context, accountID, taskID string) (*task.Task, error) {
	m, err := s.db.hot.HGetAll(ctx, taskKey(accountID, taskID)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: task %s: %w", taskID, err)
	}
	if m[fTaskStatus] == "" { // none, or an undo's tombstone (Abort)
		return nil, &apperr.NotFoundError{Kind: "task", ID: taskID}
	}
	return decodeTask(accountID, taskID, m)
}

// longField reads a value lib.lua's hset_long kept over several fields.
func longField(m map[string]string, field string) string {
	v := m[field]
	for i := 1; len(v) == i*pieceLen; i++ {
		more, ok := m[field+"+"+strconv.Itoa(i)]
		if !ok {
			break
		}
		v += more
	}
	return v
}

func decodeTask(accountID, taskID string, m map[string]string) (*task.Task, error) {
	t := &task.Task{
		ID:          taskID,
		AccountID:   accountID,
		Type:        m[fTaskType],
		Model:       m[fTaskModel],
		Status:      task.Status(m[fTaskStatus]),
		Results:     []task.Result{},
		Refunded:    m[fTaskRefunded] == "1",
		Queue:       m[fTaskQueue],
		TraceParent: m[fTaskTrace],
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
	for i := 0; ; i++ {
		key, ok := m[fTaskResult+strconv.Itoa(i)]
		if !ok {
			break
		}
		t.Results = append(t.Results, task.Result{Key: key, ContentType: blob.ContentType(key)})
	}
	if code := m[fTaskErrCode]; code != "" {
		t.Failure = &task.Failure{Code: code, Message: longField(m, fTaskErrMsg)}
	}
	if v := m[fTaskQueueSeq]; v != "" {
		t.QueueSeq, _ = strconv.ParseInt(v, 10, 64)
	}
	if u := longField(m, fTaskCallback); u != "" {
		t.Callback = task.Callback{URL: u, Events: strings.Split(m[fTaskEvents], ",")}
	}
	// The input, as its owner sees it. A record a create wrote before
	// inputs were kept to the end has none once final; one that does not
	// decode shows none rather than hiding the rest of the record.
	if _, ok := m[fTaskInput]; ok {
		if in, err := jobs.ShownInput([]byte(longField(m, fTaskInput)), t.Model); err == nil {
			t.Input = &in
		}
	}
	return t, nil
}

// left counts a task that left its queue (a script said which: on a
// cluster; on one server the script counted it) out of it, for the queue
// positions of the tasks behind it. Best effort, and batched (countOut):
// a count lost makes later positions read one too many, never fails the
// change.
func (s *Tasks) left(_ context.Context, queue string) {
	s.db.countOut(queue, 1)
}

// Change is what a change of a task's state did.
type Change struct {
	Outcome task.Outcome
	// At is when it was made.
	At time.Time
	// Hooked: the task ended with a webhook event its callback wants, now
	// on its shard's due work, to be queued (jobs.QueueHook).
	Hooked bool
	// Refunded is the credits the change gave back.
	Refunded int64
	// Model is the task's model (Fail, Expire, Start and Takeover say it,
	// for metrics; Start for the run too: the input kept names none).
	Model string
	// Admitted are tasks of the account the change admitted (the place it
	// freed): their jobs are to be queued (jobs.Enqueuer.EnqueueAdmitted).
	// If they are not, their queue checks queue them.
	Admitted []task.Admitted
}

// endArgs are the arguments every script that may end a task shares.
func (s *Tasks) endArgs(now time.Time) (ttl, keep, hookAt, checkAt int64, share int) {
	db := s.db
	return db.ttl.Milliseconds(), db.keepMs(), now.Add(HookGrace).UnixMilli(), now.Add(FirstQueueCheck).UnixMilli(), db.share
}

var startLua = durableScript[taskKeys, startArgs, startReply]("start", outcomes("APPLIED", "FINAL", "MISSING", "SUPERSEDED", "POISONED", "BUSY", "HELD"))

type startReply struct {
	Code     int64         `lua:"code"`
	Refunded int64         `lua:"refunded"`
	Hooked   bool          `lua:"hooked"`
	Left     string        `lua:"queue_left"`
	Input    string        `lua:"input"`
	Created  int64         `lua:"created"`
	Deadline int64         `lua:"deadline"`
	Model    string        `lua:"model"`
	Holder   string        `lua:"holder"`
	Trace    string        `lua:"trace"`
	AdmitAt  int64         `lua:"admitted_at"`
	Admitted []admittedRow `lua:"admitted"`
}

type startArgs struct {
	Now          int64  `lua:"now"`
	Run          string `lua:"run"`
	MaxCrashes   int    `lua:"max_crashes"`
	TTL          int64  `lua:"ttl"`
	Keep         int64  `lua:"keep"`
	HookAt       int64  `lua:"hook_at"`
	CrashMessage string `lua:"crash_message"`
	AccountID    string `lua:"account_id"`
	TaskID       string `lua:"task_id"`
	Share        int    `lua:"share"`
	CheckAt      int64  `lua:"check_at"`
	Queues       string `lua:"queues"`
	Me           string `lua:"me"`
	Judged       string `lua:"judged"`
	Dead         string `lua:"dead"`
	RecheckAt    int64  `lua:"recheck_at"`
}

// Start gives a task to a run (jobs.RunID) and moves it to processing,
// recording when (the first time). A task already processing for the same
// run (a retry) stays processing and keeps its progress; if that run never
// let go (Release) and the worker that started it is dead (WithPulse), it
// died holding it: a crash, and past
// task.MaxCrashes the task fails (Poisoned, refunded). A task another run
// owns is Superseded. A parked task (not admitted: its job should not have
// been queued) is Busy: nothing changes, and its job is to be dropped.
// Applied, it returns what the run runs: the task's input (Create's), its
// creation time and its deadline.
func (s *Tasks) Start(ctx context.Context, accountID, taskID, run string) (Started, error) {
	now := s.db.now()
	ttl, keep, hookAt, checkAt, share := s.endArgs(now)
	args := startArgs{
		Now: now.UnixMilli(), Run: run, MaxCrashes: task.MaxCrashes, TTL: ttl, Keep: keep, HookAt: hookAt,
		CrashMessage: crashMessage, AccountID: accountID, TaskID: taskID, Share: share, CheckAt: checkAt,
		Queues: s.db.queues(), Me: s.holder(), RecheckAt: now.Add(QueueRecheck).UnixMilli(),
	}
	r, err := startLua.run(ctx, s.db, keysOfTask(accountID, taskID), args)
	if err == nil && r.Code == outcomeHeld {
		// The run never let go, and another worker started it: judged,
		// then asked again (held by yet another: an error, retried).
		args.Judged = r.Holder
		if args.Dead, err = s.dead(ctx, r.Holder); err == nil {
			r, err = startLua.run(ctx, s.db, keysOfTask(accountID, taskID), args)
		}
		if err == nil && r.Code == outcomeHeld {
			err = errors.New("its run changed hands")
		}
	}
	if err != nil {
		return Started{}, fmt.Errorf("store: start %s: %w", taskID, err)
	}
	s.left(ctx, r.Left)
	st := Started{Change: Change{Outcome: task.Outcome(r.Code), At: now, Refunded: r.Refunded, Hooked: r.Hooked,
		Model: r.Model, Admitted: s.admitted(ctx, accountID, r.Admitted)}}
	if st.Outcome == task.Applied {
		st.Input = []byte(r.Input)
		st.Created, st.Deadline = time.UnixMilli(r.Created), time.UnixMilli(r.Deadline)
		st.TraceParent = r.Trace
		if r.AdmitAt > 0 {
			st.AdmitTime = time.UnixMilli(r.AdmitAt)
		}
	}
	return st, nil
}

// Started is what Start did, and, Applied, what the run runs.
type Started struct {
	Change
	// Input is the task's input as Create kept it (jobs.DecodeInput).
	Input []byte
	// Created and Deadline are the task's creation time and deadline.
	Created, Deadline time.Time
	// TraceParent is the W3C traceparent of the task's create when it was
	// traced ("" otherwise): the run joins its trace when its job carries
	// none (a promotion or a recovery queued it).
	TraceParent string
	// AdmitTime is when the task left its account's parked tasks, for a
	// traced task that was parked; zero otherwise.
	AdmitTime time.Time
}

var releaseLua = newScript[releaseKeys, releaseArgs, codeReply]("release", outcomes("APPLIED", "SUPERSEDED"))

type releaseKeys struct {
	Task string `lua:"task"`
}

type releaseArgs struct {
	Run string `lua:"run"`
}

// Release records that a run let go of its task alive (it will be
// retried, or put back on its queue by a worker shutting down), so its
// next start is no crash. The task keeps its place: its job is queued
// still.
func (s *Tasks) Release(ctx context.Context, accountID, taskID, run string) error {
	if _, err := releaseLua.run(ctx, s.db, releaseKeys{Task: taskKey(accountID, taskID)}, releaseArgs{Run: run}); err != nil {
		return fmt.Errorf("store: release %s: %w", taskID, err)
	}
	return nil
}

var progressLua = newScript[progressKeys, progressArgs, progressReply]("progress", map[string]int64{"CHANGED": 1, "UNCHANGED": 0})

type progressReply struct {
	Code int64 `lua:"code"`
	Hook bool  `lua:"hook"`
}

type progressKeys struct {
	Task string `lua:"task"`
}

type progressArgs struct {
	Pct int    `lua:"pct"`
	Run string `lua:"run"`
}

// Progress raises the progress of a task run owns to pct, clamped to
// 1..task.MaxProgress. It never lowers progress and ignores tasks that are
// not processing or that another run owns. It reports whether the task's
// callback wants this progress event (the change was made and the
// callback asked for task.progress).
func (s *Tasks) Progress(ctx context.Context, accountID, taskID, run string, pct int) (hook bool, err error) {
	pct = min(max(pct, 1), task.MaxProgress)
	r, err := progressLua.run(ctx, s.db, progressKeys{Task: taskKey(accountID, taskID)}, progressArgs{Pct: pct, Run: run})
	if err != nil {
		return false, fmt.Errorf("store: progress %s: %w", taskID, err)
	}
	return r.Hook, nil
}

var completeLua = durableScript[taskKeys, completeArgs, completeReply]("complete", outcomes("APPLIED", "FINAL", "MISSING", "SUPERSEDED"))

type completeReply struct {
	Code     int64         `lua:"code"`
	Hooked   bool          `lua:"hooked"`
	Left     string        `lua:"queue_left"`
	Refunded int64         `lua:"refunded"`
	Admitted []admittedRow `lua:"admitted"`
}

type completeArgs struct {
	Now       int64  `lua:"now"`
	TTL       int64  `lua:"ttl"`
	HookAt    int64  `lua:"hook_at"`
	Results   string `lua:"results"`
	AccountID string `lua:"account_id"`
	TaskID    string `lua:"task_id"`
	Run       string `lua:"run"`
	Share     int    `lua:"share"`
	CheckAt   int64  `lua:"check_at"`
	Queues    string `lua:"queues"`
	Asked     int    `lua:"asked"`
	Keep      int64  `lua:"keep"`
}

// Complete marks the task run owns completed with its results, sets its
// complete time and restarts the record's 24-hour TTL. A task another run
// owns is Superseded and stays as it is. The record keeps each result's
// blob key (its content type follows from the key).
func (s *Tasks) Complete(ctx context.Context, accountID, taskID, run string, results []task.Result) (Change, error) {
	return s.CompleteMade(ctx, accountID, taskID, run, results, len(results))
}

// CompleteMade completes a task asked for asked images with the results
// it made: as Complete, and if it made fewer than asked (but some),
// the price of the images it did not make is refunded in the same step
// (Change.Refunded), once whatever the retries.
func (s *Tasks) CompleteMade(ctx context.Context, accountID, taskID, run string, results []task.Result, asked int) (Change, error) {
	keys := make([]string, len(results))
	for i, r := range results {
		if r.Key == "" || len(r.Key) > pieceLen || strings.ContainsAny(r.Key, "\n") {
			return Change{}, fmt.Errorf("store: complete %s: result key %q", taskID, r.Key)
		}
		keys[i] = r.Key
	}
	now := s.db.now()
	ttl, keep, hookAt, checkAt, share := s.endArgs(now)
	r, err := completeLua.run(ctx, s.db, keysOfTask(accountID, taskID), completeArgs{
		Now: now.UnixMilli(), TTL: ttl, HookAt: hookAt, Results: strings.Join(keys, "\n"), AccountID: accountID,
		TaskID: taskID, Run: run, Share: share, CheckAt: checkAt, Queues: s.db.queues(), Asked: asked, Keep: keep,
	})
	if err != nil {
		return Change{}, fmt.Errorf("store: complete %s: %w", taskID, err)
	}
	s.left(ctx, r.Left)
	return Change{Outcome: task.Outcome(r.Code), At: now, Hooked: r.Hooked, Refunded: r.Refunded, Admitted: s.admitted(ctx, accountID, r.Admitted)}, nil
}

var failLua = durableScript[taskKeys, failArgs, failReply]("fail", outcomes("APPLIED", "FINAL", "MISSING", "SUPERSEDED"))

type failReply struct {
	Code     int64         `lua:"code"`
	Hooked   bool          `lua:"hooked"`
	Refunded int64         `lua:"refunded"`
	Left     string        `lua:"queue_left"`
	Model    string        `lua:"model"`
	Admitted []admittedRow `lua:"admitted"`
}

type failArgs struct {
	Now       int64  `lua:"now"`
	TTL       int64  `lua:"ttl"`
	Keep      int64  `lua:"keep"`
	HookAt    int64  `lua:"hook_at"`
	Code      string `lua:"code"`
	Message   string `lua:"message"`
	AccountID string `lua:"account_id"`
	TaskID    string `lua:"task_id"`
	Run       string `lua:"run"`
	Share     int    `lua:"share"`
	CheckAt   int64  `lua:"check_at"`
	Queues    string `lua:"queues"`
}

// Fail marks a task failed with a code and a message for its owner,
// refunds its price (once: only the move to failed refunds) and restarts
// the record's 24-hour TTL. run is the run that fails it; a task another
// run owns is Superseded. "" fails the task whoever owns it (the deadline
// sweep), and a task it finds ended or gone leaves the due work.
func (s *Tasks) Fail(ctx context.Context, accountID, taskID, run string, f task.Failure) (Change, error) {
	now := s.db.now()
	ttl, keep, hookAt, checkAt, share := s.endArgs(now)
	r, err := failLua.run(ctx, s.db, keysOfTask(accountID, taskID), failArgs{
		Now: now.UnixMilli(), TTL: ttl, Keep: keep, HookAt: hookAt, Code: f.Code, Message: f.Message, AccountID: accountID,
		TaskID: taskID, Run: run, Share: share, CheckAt: checkAt, Queues: s.db.queues(),
	})
	if err != nil {
		return Change{}, fmt.Errorf("store: fail %s: %w", taskID, err)
	}
	s.left(ctx, r.Left)
	return s.failed(ctx, accountID, r, now), nil
}

// failed is the change fail.lua's reply tells.
func (s *Tasks) failed(ctx context.Context, accountID string, r failReply, now time.Time) Change {
	return Change{Outcome: task.Outcome(r.Code), At: now, Hooked: r.Hooked, Refunded: r.Refunded, Model: r.Model,
		Admitted: s.admitted(ctx, accountID, r.Admitted)}
}

// expireFailure is what a task past its deadline fails with.
var expireFailure = task.Failure{Code: string(task.Timeout), Message: "the task did not finish within its deadline"}

// Expire fails a task past its deadline with code timeout (refunding it),
// whichever run owns it; a task already ended or gone only leaves the due
// work.
func (s *Tasks) Expire(ctx context.Context, accountID, taskID string) (Change, error) {
	return s.Fail(ctx, accountID, taskID, "", expireFailure)
}

// TaskRef names a task.
type TaskRef struct{ AccountID, TaskID string }

// ExpireAll is Expire of many tasks in one round trip (one a node on a
// cluster), and the tasks they left counted out of their queues in one
// more: what the recovery does with a batch of tasks past their
// deadline. Each task's change or error is at its index.
func (s *Tasks) ExpireAll(ctx context.Context, refs []TaskRef) ([]Change, []error) {
	now := s.db.now()
	ttl, keep, hookAt, checkAt, share := s.endArgs(now)
	calls := make([]call[taskKeys, failArgs], len(refs))
	for i, t := range refs {
		calls[i] = call[taskKeys, failArgs]{keysOfTask(t.AccountID, t.TaskID), failArgs{
			Now: now.UnixMilli(), TTL: ttl, Keep: keep, HookAt: hookAt, Code: expireFailure.Code, Message: expireFailure.Message,
			AccountID: t.AccountID, TaskID: t.TaskID, Share: share, CheckAt: checkAt, Queues: s.db.queues(),
		}}
	}
	changes, errs := make([]Change, len(refs)), make([]error, len(refs))
	replies, rerrs, err := failLua.runPipelined(ctx, s.db, calls)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("store: expire: %w", err)
		}
		return changes, errs
	}
	left := map[string]int{}
	for i, r := range replies {
		if rerrs[i] != nil {
			errs[i] = fmt.Errorf("store: expire %s: %w", refs[i].TaskID, rerrs[i])
			continue
		}
		changes[i] = s.failed(ctx, refs[i].AccountID, r, now)
		if r.Left != "" {
			left[r.Left]++
		}
	}
	for q, n := range left {
		s.db.countOut(q, n)
	}
	return changes, errs
}

var cancelLua = durableScript[taskKeys, cancelArgs, cancelReply]("cancel", outcomes("APPLIED", "FINAL", "MISSING"))

type cancelReply struct {
	Code     int64         `lua:"code"`
	Was      string        `lua:"status_before"`
	Refunded int64         `lua:"refunded"`
	Run      string        `lua:"run"`
	Hooked   bool          `lua:"hooked"`
	Left     string        `lua:"queue_left"`
	Admitted []admittedRow `lua:"admitted"`
}

type cancelArgs struct {
	Now       int64  `lua:"now"`
	TTL       int64  `lua:"ttl"`
	Keep      int64  `lua:"keep"`
	HookAt    int64  `lua:"hook_at"`
	AccountID string `lua:"account_id"`
	TaskID    string `lua:"task_id"`
	Share     int    `lua:"share"`
	CheckAt   int64  `lua:"check_at"`
	Queues    string `lua:"queues"`
}

// Canceled is what Cancel did: the cancellation, and the tasks of the
// account the place it freed admitted (to be queued).
type Canceled struct {
	task.Cancellation
	Admitted []task.Admitted
}

// Cancel cancels an unfinished task: it becomes canceled at once (final:
// no worker starts it, a worker running it can no longer finish it), and
// a pending task is refunded in full; a task a worker had started is not
// refunded (the generation is under way upstream). A task already
// completed, failed or canceled is *apperr.Error Conflict naming its
// status; a missing one *apperr.NotFoundError.
func (s *Tasks) Cancel(ctx context.Context, accountID, taskID string) (Canceled, error) {
	now := s.db.now()
	ttl, keep, hookAt, checkAt, share := s.endArgs(now)
	r, err := cancelLua.run(ctx, s.db, keysOfTask(accountID, taskID), cancelArgs{
		Now: now.UnixMilli(), TTL: ttl, Keep: keep, HookAt: hookAt, AccountID: accountID, TaskID: taskID, Share: share, CheckAt: checkAt,
		Queues: s.db.queues(),
	})
	if err != nil {
		return Canceled{}, fmt.Errorf("store: cancel %s: %w", taskID, err)
	}
	switch task.Outcome(r.Code) {
	case task.Applied:
		s.left(ctx, r.Left)
		return Canceled{
			Cancellation: task.Cancellation{Was: task.Status(r.Was), Refunded: r.Refunded, Run: r.Run, Hooked: r.Hooked},
			Admitted:     s.admitted(ctx, accountID, r.Admitted),
		}, nil
	case task.AlreadyFinal:
		return Canceled{}, apperr.Errorf(apperr.Conflict, "task %s is already %s", taskID, r.Was)
	}
	return Canceled{}, &apperr.NotFoundError{Kind: "task", ID: taskID}
}

var abortLua = durableScript[abortKeys, abortArgs, abortReply]("abort", map[string]int64{"ABORTED": 0, "NOT_PENDING": 1, "ABSENT": 2, "LATE": 3})

type abortReply struct {
	Code     int64         `lua:"code"`
	Left     string        `lua:"queue_left"`
	Admitted []admittedRow `lua:"admitted"`
}

type abortKeys struct {
	Task    string `lua:"task"`
	Account string `lua:"account"`
	Ledger  string `lua:"ledger"`
	Parked  string `lua:"parked"`
	Due     string `lua:"due"`
	Index   string `lua:"index"`
	Idem    string `lua:"idem"`
}

type abortArgs struct {
	Now        int64  `lua:"now"`
	Keep       int64  `lua:"keep"`
	AccountID  string `lua:"account_id"`
	TaskID     string `lua:"task_id"`
	Note       string `lua:"note"`
	WithIdem   int    `lua:"with_idem"`
	Share      int    `lua:"share"`
	CheckAt    int64  `lua:"check_at"`
	VoidFor    int64  `lua:"void_for"`
	ValidUntil int64  `lua:"valid_until"`
	Queues     string `lua:"queues"`
}

// Abort undoes the creation of a task that is still pending: the
// gateway's undo when it could not queue the task. The price is refunded
// (the ledger keeps the debit and the refund) and the record removed,
// with the Idempotency-Key it was made under (idemKey, "" for none) if the
// abort applies: a task that goes on (a worker started it) keeps its key,
// so a retry replays it instead of creating and charging again. It
// reports whether the task was aborted, and the tasks of the account the
// place it freed admitted (to be queued). Not aborted, the task either went
// on (Get finds it) or was never made: then the abort leaves a tombstone
// its create, if still on its way, cannot get past. With a deadline on
// ctx, an abort that reaches Redis after it (and ClockSkew) does nothing:
// ErrLate.
func (s *Tasks) Abort(ctx context.Context, accountID, taskID, idemKey string) (bool, []task.Admitted, error) {
	now := s.db.now()
	k := abortKeys{Task: taskKey(accountID, taskID), Account: accountKey(accountID),
		Ledger: ledgerKey(accountID), Parked: parkedKey(accountID), Due: dueOf(accountID), Index: tasksIndexKey(accountID),
		Idem: noKey(accountID)}
	a := abortArgs{Now: now.UnixMilli(), Keep: s.db.keepMs(), AccountID: accountID, TaskID: taskID, Note: "enqueue_failed",
		Share: s.db.share, CheckAt: now.Add(FirstQueueCheck).UnixMilli(), VoidFor: voidFor.Milliseconds(), Queues: s.db.queues()}
	if d, ok := ctx.Deadline(); ok {
		a.ValidUntil = d.Add(ClockSkew).UnixMilli()
	}
	if idemKey != "" {
		k.Idem, a.WithIdem = idempotencyKey(accountID, idemKey), 1
	}
	r, err := abortLua.run(ctx, s.db, k, a)
	if err != nil {
		return false, nil, fmt.Errorf("store: abort %s: %w", taskID, err)
	}
	if r.Code == 3 {
		return false, nil, ErrLate
	}
	s.left(ctx, r.Left)
	return r.Code == 0, s.admitted(ctx, accountID, r.Admitted), nil
}

var idempotencyDoneLua = newScript[idemKeys, idemDoneArgs, codeReply]("idempotency_done", map[string]int64{"DONE": 1, "OTHER": 0})

type idemKeys struct {
	Idem string `lua:"idem"`
}

type idemDoneArgs struct {
	TaskID string `lua:"task_id"`
}

// IdempotencyDone records that the create of taskID under key stands (its
// job is queued): the key replays it from now on.
func (s *Tasks) IdempotencyDone(ctx context.Context, accountID, key, taskID string) error {
	if _, err := idempotencyDoneLua.run(ctx, s.db, idemKeys{Idem: idempotencyKey(accountID, key)}, idemDoneArgs{TaskID: taskID}); err != nil {
		return fmt.Errorf("store: idempotency key of %s: %w", taskID, err)
	}
	return nil
}

var takeoverLua = durableScript[taskKeys, takeoverArgs, takeoverReply]("takeover", outcomes("APPLIED", "FINAL", "MISSING", "SUPERSEDED", "POISONED", "HELD"))

type takeoverReply struct {
	Code     int64         `lua:"code"`
	Run      string        `lua:"owning_run"`
	Refunded int64         `lua:"refunded"`
	Hooked   bool          `lua:"hooked"`
	Left     string        `lua:"queue_left"`
	Model    string        `lua:"model"`
	Holder   string        `lua:"holder"`
	Admitted []admittedRow `lua:"admitted"`
}

type takeoverArgs struct {
	Orphan       string `lua:"orphan"`
	NewRun       string `lua:"new_run"`
	MaxCrashes   int    `lua:"max_crashes"`
	Now          int64  `lua:"now"`
	TTL          int64  `lua:"ttl"`
	Keep         int64  `lua:"keep"`
	HookAt       int64  `lua:"hook_at"`
	CrashMessage string `lua:"crash_message"`
	AccountID    string `lua:"account_id"`
	TaskID       string `lua:"task_id"`
	RunsSeen     int    `lua:"runs_seen"`
	Share        int    `lua:"share"`
	CheckAt      int64  `lua:"check_at"`
	Queues       string `lua:"queues"`
	Me           string `lua:"me"`
	Judged       string `lua:"judged"`
	Dead         string `lua:"dead"`
}

// Takeover gives a task whose run was orphaned (its worker stopped
// extending its lease) to the next run, and reports which run owns the
// task now; it counts a crash only if the orphan's worker died holding the
// task (WithPulse). Applied: the new run (next(runs), a jobs.RunID, named
// after the takeovers so far) owns it,
// and is to be queued. Superseded: a later run owns it already
// (returned), and may need queueing again. AlreadyFinal and Missing:
// nothing to run. Poisoned: the task had crashed its workers too often
// and was failed (Change.Refunded, Change.Hooked, Change.Admitted).
func (s *Tasks) Takeover(ctx context.Context, accountID, taskID, orphan string, next func(runs int) string) (Change, string, error) {
	v, err := s.db.rdb.HMGet(ctx, taskKey(accountID, taskID), fTaskCrashes, fTaskRuns).Result()
	if err != nil {
		return Change{}, "", fmt.Errorf("store: takeover %s: %w", taskID, err)
	}
	// The runs so far name the next: a record from before they were
	// counted has had as many takeovers as crashes at most.
	c, _ := v[0].(string)
	runs, _ := strconv.Atoi(c)
	if tk, ok := v[1].(string); ok {
		runs, _ = strconv.Atoi(tk)
	}
	now := s.db.now()
	ttl, keep, hookAt, checkAt, share := s.endArgs(now)
	args := takeoverArgs{
		Orphan: orphan, NewRun: next(runs + 1), MaxCrashes: task.MaxCrashes, Now: now.UnixMilli(), TTL: ttl, Keep: keep,
		HookAt: hookAt, CrashMessage: crashMessage, AccountID: accountID, TaskID: taskID, RunsSeen: runs,
		Share: share, CheckAt: checkAt, Queues: s.db.queues(), Me: s.holder(),
	}
	r, err := takeoverLua.run(ctx, s.db, keysOfTask(accountID, taskID), args)
	if err == nil && r.Code == outcomeHeld {
		args.Judged = r.Holder
		if args.Dead, err = s.dead(ctx, r.Holder); err == nil {
			r, err = takeoverLua.run(ctx, s.db, keysOfTask(accountID, taskID), args)
		}
		if err == nil && r.Code == outcomeHeld {
			err = errors.New("its run changed hands")
		}
	}
	if err != nil {
		return Change{}, "", fmt.Errorf("store: takeover %s: %w", taskID, err)
	}
	s.left(ctx, r.Left)
	return Change{Outcome: task.Outcome(r.Code), At: now, Refunded: r.Refunded, Hooked: r.Hooked, Model: r.Model,
		Admitted: s.admitted(ctx, accountID, r.Admitted)}, r.Run, nil
}

// Inflight returns how many of an account's tasks are unfinished.
func (s *Tasks) Inflight(ctx context.Context, accountID string) (int64, error) {
	return s.counter(ctx, accountID, fAcctUnfinished)
}

// Running returns how many of an account's tasks hold a place (admitted:
// queued or running).
func (s *Tasks) Running(ctx context.Context, accountID string) (int64, error) {
	return s.counter(ctx, accountID, fAcctAdmitted)
}

// Parked returns how many of an account's tasks wait for a place.
func (s *Tasks) Parked(ctx context.Context, accountID string) (int64, error) {
	n, err := s.db.rdb.ZCard(ctx, parkedKey(accountID)).Result()
	if err != nil {
		return 0, fmt.Errorf("store: parked of %s: %w", accountID, err)
	}
	return n, nil
}

func (s *Tasks) counter(ctx context.Context, accountID, field string) (int64, error) {
	v, err := s.db.rdb.HGet(ctx, accountKey(accountID), field).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("store: %s of %s: %w", field, accountID, err)
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n, nil
}
