package task

import (
	"strconv"
	"time"
)

// Outcome is what a change of a task's state did. Its values are the
// codes the store's scripts return (pkg/store/lua/lib.lua).
type Outcome int

// Outcomes.
const (
	// Applied: the change was made.
	Applied Outcome = 0
	// AlreadyFinal: the task had already ended; nothing changed.
	AlreadyFinal Outcome = 1
	// Missing: no such record (never created, expired or removed).
	Missing Outcome = 2
	// Superseded: another run owns the task now; this one must stop.
	Superseded Outcome = 3
	// Poisoned: the task has crashed its workers too often; it was
	// failed (WorkerCrashed) and refunded instead.
	Poisoned Outcome = 4
	// Busy: the task's account has its places taken; nothing changed,
	// and the task waits for one.
	Busy Outcome = 5
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

// MaxCrashes is how many times a task may take its worker down with it:
// a run that finds it has crashed its workers more often than this fails
// the task (WorkerCrashed, refunded) instead of running it again.
const MaxCrashes = 1

// MaxProgress is the highest progress a task reports before completion.
const MaxProgress = 99

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
	// Idempotency, when its Key is set, makes the create idempotent.
	Idempotency Idempotency
	// Queue is the queue the task joins, for its queue position.
	Queue string
	// ValidUntil bounds when the create may take effect, by the task
	// store's clock: one that reaches the store later (it was held up, and
	// its caller gave up on it) is refused (store.ErrLate), and its
	// Idempotency-Key, while the create is under way, is held only until
	// its undo could no longer apply either. Zero: no bound.
	ValidUntil time.Time
	// KeyHash is the API key the create came with (account.HashKey; ""
	// for none), charged with the price too; SpendLimit is that key's
	// limit (0: none), checked in the same step.
	KeyHash    string
	SpendLimit int64
}

// Caller is who creates a task: an account, through one of its API keys
// (KeyHash, account.HashKey, with the key's SpendLimit, 0 for none) or
// not (the console: KeyHash "").
type Caller struct {
	AccountID  string
	KeyHash    string
	SpendLimit int64
}

// Replayed is the answer to a create whose idempotency key an earlier
// create of the account used with the same body: nothing was created or
// charged, and TaskID is the earlier create's task.
type Replayed struct{ TaskID string }

func (r *Replayed) Error() string { return "task: replay of the create of " + r.TaskID }

// Cancellation is what canceling a task did.
type Cancellation struct {
	// Was is the status the task had: pending or processing.
	Was Status
	// Refunded is the credits given back (a pending task's full price;
	// nothing for one a worker had started).
	Refunded int64
	// Run is the run that owned the task ("" if none had started it):
	// the one to stop.
	Run string
	// Hooked is whether the task's callback wants the task.canceled
	// event: it is in the account's webhook outbox, to be queued.
	Hooked bool
}

// Filter picks which of an account's tasks a listing returns.
type Filter struct {
	// Status and Model, when not empty, must match.
	Status Status
	Model  string
	// Limit is the most tasks returned (at least 1).
	Limit int
	// Cursor continues an earlier listing (its next cursor); "" starts
	// from the newest task.
	Cursor string
}

// QueuePosition is where a pending task stands in its queue.
type QueuePosition struct {
	// Position is 1 for the next task to start.
	Position int64
	// ETA is the estimated time until a worker starts it; Known is false
	// while there is no rate to go by.
	ETA   time.Duration
	Known bool
}

// Created is what a create did: the task made (or, Replayed, the one an
// earlier create under the same Idempotency-Key made), and its price.
type Created struct {
	ID       string
	Price    int64
	Replayed bool
}

// Quote is what a create would cost: its price, and the balance it would
// be charged from (POST /v1/task/create?dry_run=true).
type Quote struct {
	Price   int64
	Balance int64
}

// Admitted is a task of an account that a change admitted: its place in
// the account's window freed, it leaves the parked tasks and its job is to
// be queued now (jobs.Enqueuer.EnqueueAdmitted).
type Admitted struct {
	AccountID, TaskID string
	// Queue is the queue its job joins, Deadline when it must end.
	Queue    string
	Deadline time.Time
}
