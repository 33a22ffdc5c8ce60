// Package tasks is the gateway's task service: it creates tasks (record, then
// job) and reads them back for their owner. It takes domain values and
// returns apperr errors; it knows nothing of HTTP.
package tasks

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/tracing"
)

// Store keeps task records and charges for them (store.Tasks).
type Store interface {
	Create(ctx context.Context, t *task.Task, c task.Charge, job []byte) (store.Creation, error)
	Quote(ctx context.Context, t *task.Task, c task.Charge) (int64, error)
	Get(ctx context.Context, accountID, taskID string) (*task.Task, error)
	Abort(ctx context.Context, accountID, taskID, idemKey string) (bool, []task.Admitted, error)
	IdempotencyDone(ctx context.Context, accountID, key, taskID string) error
	Cancel(ctx context.Context, accountID, taskID string) (store.Canceled, error)
	List(ctx context.Context, accountID string, f task.Filter) ([]*task.Task, string, error)
}

// QueueStats reads a queue's numbers, for positions (store.Queues).
type QueueStats interface {
	Stats(ctx context.Context, queue string) (store.QueueStats, error)
}

// Prices prices tasks.
type Prices interface {
	Price(tier catalog.Tier, size string) int64
}

// Queue takes jobs (jobs.Enqueuer).
type Queue interface {
	EnqueueGenerateImage(ctx context.Context, r jobs.Ref, run string) error
	// EnqueueAdmitted queues the jobs of tasks a change admitted into
	// their account's window.
	EnqueueAdmitted(ctx context.Context, admitted []task.Admitted) error
	// CancelRun stops a run wherever a worker runs it.
	CancelRun(ctx context.Context, run string) error
	// QueueHook queues the webhook delivery of an event of a task and
	// records it in the outbox.
	QueueHook(ctx context.Context, o jobs.Outbox, d jobs.DeliverWebhook) error
}

// IDs makes task ids.
type IDs interface {
	New() (string, error)
}

// Config is the service's settings.
type Config struct {
	// Deadline bounds each task from its creation.
	Deadline time.Duration
	// MaxInflight is the default limit of an account's unfinished tasks
	// (0: none); an account may set its own.
	MaxInflight int
}

// Deps are what the service works with.
type Deps struct {
	Store  Store
	Queues QueueStats
	// Outbox records the webhook deliveries queued (store.Hooks).
	Outbox jobs.Outbox
	Queue  Queue
	IDs    IDs
	Prices Prices
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Tracing, when on, traces a create's steps within its request's span,
	// and keeps the create's trace context with the task for its run and
	// webhooks to join (nil: off).
	Tracing *tracing.Tracing
}

// Service creates and reads tasks.
type Service struct {
	Deps
	cfg    Config
	tracer trace.Tracer
	// stats caches the queues' numbers (queueStats).
	statsMu sync.Mutex
	stats   map[string]cachedStats
}

// NewService returns a service.
func NewService(d Deps, cfg Config) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Tracing == nil {
		d.Tracing = tracing.Noop()
	}
	return &Service{Deps: d, cfg: cfg, stats: map[string]cachedStats{}, tracer: d.Tracing.ChildTracer(TracerName)}
}

// TracerName names the task service's spans' instrumentation scope.
const TracerName = "github.com/easelhq/easel/api-gateway/internal/tasks"

// startSpan starts a span of a task's within the request's span, when
// that is sampled (tracer's); its attributes are given at its start, the
// one allocation of them.
func (s *Service) startSpan(ctx context.Context, name, taskID, accountID string) (context.Context, trace.Span) {
	if !tracing.Sampled(ctx) {
		return ctx, trace.SpanFromContext(context.Background()) // no-op
	}
	return s.tracer.Start(ctx, name, trace.WithAttributes(tracing.AttrTaskID.String(taskID), tracing.AttrAccountID.String(accountID)))
}

// storeCreate is Store.Create within a span "store.create" (traced).
func (s *Service) storeCreate(ctx context.Context, t *task.Task, c task.Charge, input []byte) (store.Creation, error) {
	ctx, span := s.startSpan(ctx, "store.create", t.ID, t.AccountID)
	defer span.End()
	created, err := s.Store.Create(ctx, t, c, input)
	if err != nil {
		var r *task.Replayed
		if !errors.As(err, &r) {
			span.SetStatus(codes.Error, string(apperr.CodeOf(err)))
		}
	}
	return created, err
}

// enqueue queues the first run of the task of job within a span
// "queue.enqueue" (traced).
func (s *Service) enqueue(ctx context.Context, job jobs.GenerateImage) error {
	ctx, span := s.startSpan(ctx, "queue.enqueue", job.TaskID, job.AccountID)
	defer span.End()
	err := s.Queue.EnqueueGenerateImage(ctx, jobs.RefOf(job), jobs.RunID(job.TaskID, 0))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// PriceOf is what a task of input in costs: its model's price at its
// size for each image it makes (in has its defaults applied).
func PriceOf(p Prices, in task.Input) int64 {
	return p.Price(in.Model.Tier, in.ImageSize) * int64(max(in.NumImages, 1))
}

// Create records a pending task for an account (by: the caller, whose API
// key, if any, is charged the price too, within its spend limit:
// *apperr.SpendLimitError past it), charging its price, and
// queues its job; in must have its defaults applied. Under an idempotency
// key (idem.Key not empty) a create the account made before with the same
// key and body is not made again: its task comes back Replayed, and
// nothing is charged; the same key with another body is apperr.Mismatch,
// and while the first create with the key is under way, apperr.Conflict.
// The store's refusals (credits, limits, a disabled account, a model not
// allowed) come back as they are. A task its account's window has no
// place for waits parked (its job is queued when a place frees): the
// create stands all the same. If the job of a task admitted cannot be
// queued, the task is aborted (record removed, price refunded) and the
// error is apperr.Unavailable: no task is left pending with nothing to run
// it.
//
// If this process dies between the two steps, or a Redis failover loses the
// queue's write but not the task's, the record holds the job's payload and
// the workers' recovery queues it (the task's queue check, store.Tasks.Due),
// so a charged task always runs or is refunded.
func (s *Service) Create(ctx context.Context, by task.Caller, in task.Input, idem task.Idempotency) (task.Created, error) {
	accountID := by.AccountID
	id, err := s.IDs.New()
	if err != nil {
		return task.Created{}, apperr.Wrap(err, apperr.Internal, "")
	}
	logging.AddFields(ctx, zap.String("task_id", id))
	// The request's span (traced) names the task; the task keeps the
	// request's trace context when it is sampled, for its run to join.
	var traceparent string
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.AttrTaskID.String(id), tracing.AttrAccountID.String(accountID))
		traceparent = tracing.Inject(ctx, s.Tracing.Propagator())
	}
	now := s.Now()
	job := jobs.GenerateImage{TaskID: id, AccountID: accountID, Input: in, CreateTime: now, Deadline: now.Add(s.cfg.Deadline)}
	input, err := jobs.EncodeInput(in)
	if err != nil {
		return task.Created{}, apperr.Wrap(err, apperr.Internal, "")
	}
	t := &task.Task{
		ID:          id,
		AccountID:   accountID,
		Type:        task.Type,
		Model:       in.Model.ID,
		Status:      task.Pending,
		CreateTime:  now,
		Callback:    in.Callback,
		TraceParent: traceparent,
	}
	charge := s.charge(by, in, now)
	charge.Idempotency = idem
	// A create held up past the request's deadline (Redis hung) never
	// applies: from then on its outcome is certain. A request without a
	// deadline gets the store's window.
	charge.ValidUntil = now.Add(store.CreateWindow)
	if d, ok := ctx.Deadline(); ok {
		charge.ValidUntil = d.Add(store.ClockSkew)
	}
	created, err := s.storeCreate(ctx, t, charge, input)
	if err != nil {
		var r *task.Replayed
		switch {
		case errors.As(err, &r):
			logging.AddFields(ctx, zap.String("task_id", r.TaskID), zap.Bool("replayed", true))
			return task.Created{ID: r.TaskID, Replayed: true}, nil
		case errors.Is(err, store.ErrLate):
			logging.From(ctx).Error("a create reached Redis after its time: Redis is slow, or this gateway's clock is behind Redis's", zap.Error(err))
			return task.Created{}, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable; the task was not created, try again")
		case errors.Is(err, store.ErrNotReplicated):
			// Made on the primary, not confirmed by its replicas: undo it,
			// so that a failover cannot leave a charge the client never
			// heard of.
			return s.undo(ctx, accountID, id, idem, charge, err, err)
		case apperr.CodeOf(err) != apperr.Internal:
			return task.Created{}, err // a refusal
		case store.NotSent(err):
			return task.Created{}, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable; the task was not created, try again")
		}
		// A timeout or a lost connection may come after the script ran:
		// undo whatever it did (nothing, if it did not run), so that a
		// client told "not created" is not charged for a task that runs.
		return s.undo(ctx, accountID, id, idem, charge, err,
			apperr.Transient(err, apperr.Unavailable, "the task store is unavailable; the task was not created, try again"))
	}
	if created.Admitted {
		if err := s.enqueue(ctx, job); err != nil {
			return s.undo(ctx, accountID, id, idem, charge, err,
				apperr.Transient(err, apperr.Unavailable, "the task queue is unavailable; the task was not created, try again"))
		}
	}
	s.enqueueAdmitted(ctx, created.Others)
	if idem.Key != "" {
		// Replays from now on. If this write fails the key still replays
		// once its create is idempotencyPending old: the task stands.
		if err := s.Store.IdempotencyDone(ctx, accountID, idem.Key, id); err != nil {
			logging.From(ctx).Warn("could not mark the idempotency key done", zap.Error(err))
		}
	}
	logging.AddFields(ctx, zap.String("model", in.Model.ID), zap.Int64("price", charge.Price))
	return task.Created{ID: id, Price: charge.Price}, nil
}

// charge is what a create of in by the caller is charged, and under which
// limits.
func (s *Service) charge(by task.Caller, in task.Input, now time.Time) task.Charge {
	return task.Charge{
		Price:       PriceOf(s.Prices, in),
		Tier:        string(in.Model.Tier),
		MaxInflight: s.cfg.MaxInflight,
		// A task no worker ever finishes stops counting a little after its
		// deadline.
		CountUntil: now.Add(s.cfg.Deadline + jobs.CountMargin),
		// The task's number in its queue, for its position while pending.
		Queue: jobs.Queue(in.Model.Tier),
		// The key's spend, and its limit.
		KeyHash: by.KeyHash, SpendLimit: by.SpendLimit,
	}
}

// Quote prices a create of in by the caller and checks it exactly as
// Create would (the account's rules, its balance, the key's spend limit),
// creating and charging nothing: the price and the balance it would be
// charged from, or the refusal Create would give.
func (s *Service) Quote(ctx context.Context, by task.Caller, in task.Input) (task.Quote, error) {
	id, err := s.IDs.New()
	if err != nil {
		return task.Quote{}, apperr.Wrap(err, apperr.Internal, "")
	}
	now := s.Now()
	charge := s.charge(by, in, now)
	t := &task.Task{ID: id, AccountID: by.AccountID, Type: task.Type, Model: in.Model.ID, Status: task.Pending, CreateTime: now}
	balance, err := s.Store.Quote(ctx, t, charge)
	if err != nil {
		if apperr.CodeOf(err) != apperr.Internal {
			return task.Quote{}, err // a refusal
		}
		return task.Quote{}, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
	}
	return task.Quote{Price: charge.Price, Balance: balance}, nil
}

// undo undoes a create whose outcome is not known or not wanted (record
// removed, price refunded), with a context of its own: the request's may
// be what failed. It answers the create as the undo leaves it, never "not
// created" for a task that exists:
//
//   - undone, or the task was never made (the undo's tombstone keeps its
//     create, if still on its way, from applying): notCreated;
//   - the task went on (a worker started it: the recovery queued it): the
//     task, created;
//   - the undo failed too: *apperr.OutcomeUnknownError. The task may stand
//     (the workers' recovery then queues it, and its idempotency key
//     replays it): after charge.ValidUntil its create can no longer apply,
//     and UndoWindow later neither can its undo, so a query then tells.
//
// The undo's own deadline is UndoWindow past the create's, whenever it
// starts: what the store holds the idempotency key for (store.Tasks.Create).
func (s *Service) undo(ctx context.Context, accountID, id string, idem task.Idempotency, charge task.Charge, cause, notCreated error) (task.Created, error) {
	settled := charge.ValidUntil.Add(store.UndoWindow)
	undoCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), settled.Add(-store.ClockSkew))
	defer cancel()
	log := logging.From(ctx)
	// The undo frees the idempotency key in the same step, only if it
	// applies: a task that goes on keeps its key.
	// Tried again until its window closes, with a short backoff: the undo
	// is safe to repeat (one that finds nothing leaves its tombstone), a
	// slow reply (a WAIT for replicas on a loaded machine) is not yet a hung
	// Redis, and a failover's closed connections give way to the new
	// primary within a second or two.
	var (
		undone bool
		err    error
	)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 25*time.Millisecond, 400*time.Millisecond
	_, _ = backoff.Retry(undoCtx, func() (struct{}, error) {
		var admitted []task.Admitted
		undone, admitted, err = s.Store.Abort(undoCtx, accountID, id, idem.Key)
		s.enqueueAdmitted(ctx, admitted)
		if err == nil || errors.Is(err, store.ErrNotReplicated) || errors.Is(err, store.ErrLate) {
			return struct{}{}, nil
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	switch {
	case undone || errors.Is(err, store.ErrNotReplicated):
		// Undone (on the primary at least; if the replicas lack the undo
		// they lack the create too).
		return task.Created{}, notCreated
	case err == nil:
		if _, gerr := s.Store.Get(undoCtx, accountID, id); gerr == nil {
			log.Warn("a create thought failed went on", zap.NamedError("cause", cause))
			return task.Created{ID: id, Price: charge.Price}, nil
		} else if apperr.CodeOf(gerr) == apperr.NotFound {
			return task.Created{}, notCreated
		} else {
			err = gerr
		}
	}
	log.Error("could not undo a create: its outcome is unknown", zap.Error(err), zap.NamedError("cause", cause))
	return task.Created{}, &apperr.OutcomeUnknownError{TaskID: id, SettledBy: settled, Err: cause}
}

// Cancel cancels a task of the account (store.Tasks.Cancel): a pending task
// is refunded in full and never runs; a processing one is stopped on its
// worker (Asynq's cancellation: the upstream call is aborted) and not
// refunded. A task already final is apperr.Conflict; another account's is
// not found.
func (s *Service) Cancel(ctx context.Context, accountID, taskID string) (task.Cancellation, error) {
	res, err := s.Store.Cancel(ctx, accountID, taskID)
	c := res.Cancellation
	if err != nil {
		if code := apperr.CodeOf(err); code == apperr.Conflict || code == apperr.NotFound {
			return c, err
		}
		return c, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable; the task was not canceled, try again")
	}
	s.enqueueAdmitted(ctx, res.Admitted)
	logging.AddFields(ctx, zap.String("task_id", taskID), zap.String("was", string(c.Was)), zap.Int64("refunded", c.Refunded))
	if c.Hooked {
		// If this fails, the workers' recovery queues it from the outbox.
		d := jobs.DeliverWebhook{AccountID: accountID, TaskID: taskID, Event: task.EventCanceled}
		if err := s.Queue.QueueHook(context.WithoutCancel(ctx), s.Outbox, d); err != nil {
			logging.From(ctx).Warn("could not queue the task.canceled webhook; the recovery will", zap.Error(err))
		}
	}
	if c.Was == task.Processing && c.Run != "" {
		// The task is canceled whatever happens here: a run that is not
		// stopped finds it final when it tries to finish it.
		if err := s.Queue.CancelRun(context.WithoutCancel(ctx), c.Run); err != nil {
			logging.From(ctx).Warn("could not stop the canceled task's run; it stops at its next state change", zap.Error(err))
		}
	}
	return c, nil
}

// enqueueAdmitted queues the jobs of tasks a change admitted, with a
// context of its own; what it cannot queue, the tasks' queue checks queue.
func (s *Service) enqueueAdmitted(ctx context.Context, admitted []task.Admitted) {
	if len(admitted) == 0 {
		return
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.Queue.EnqueueAdmitted(qctx, admitted); err != nil {
		logging.From(ctx).Warn("could not queue the tasks a change admitted; their queue checks will", zap.Int("tasks", len(admitted)), zap.Error(err))
	}
}

// List returns the account's tasks (store.Tasks.List).
func (s *Service) List(ctx context.Context, accountID string, f task.Filter) ([]*task.Task, string, error) {
	ts, next, err := s.Store.List(ctx, accountID, f)
	if err != nil && apperr.CodeOf(err) != apperr.Invalid {
		return nil, "", apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
	}
	return ts, next, err
}

// GetPositioned is Get that also returns a pending task's place in its
// queue (nil when it has none). The queues' numbers are read at most every
// queueStatsTTL by this process, not at each query: a position is an
// estimate, and a query of a pending task then costs what any query does.
func (s *Service) GetPositioned(ctx context.Context, accountID, taskID string) (*task.Task, *task.QueuePosition, error) {
	t, err := s.Get(ctx, accountID, taskID)
	if err != nil || t.Status != task.Pending || t.QueueSeq == 0 || t.Queue == "" {
		return t, nil, err
	}
	st, err := s.queueStats(ctx, t.Queue)
	if err != nil {
		logging.From(ctx).Debug("no queue position", zap.Error(err))
		return t, nil, nil
	}
	p := st.PositionOf(t.QueueSeq, s.Now())
	return t, &p, nil
}

// queueStatsTTL is how long a queue's numbers read are used for.
const queueStatsTTL = 250 * time.Millisecond

type cachedStats struct {
	stats store.QueueStats
	at    time.Time
}

func (s *Service) queueStats(ctx context.Context, queue string) (store.QueueStats, error) {
	now := s.Now()
	s.statsMu.Lock()
	c, ok := s.stats[queue]
	s.statsMu.Unlock()
	if ok && now.Sub(c.at) < queueStatsTTL {
		return c.stats, nil
	}
	st, err := s.Queues.Stats(ctx, queue)
	if err != nil {
		return st, err
	}
	s.statsMu.Lock()
	s.stats[queue] = cachedStats{stats: st, at: now}
	s.statsMu.Unlock()
	return st, nil
}

// Get returns a task of the account. Another account's task is
// *apperr.NotFoundError, exactly as a task that does not exist.
func (s *Service) Get(ctx context.Context, accountID, taskID string) (*task.Task, error) {
	t, err := s.Store.Get(ctx, accountID, taskID)
	if err != nil && apperr.CodeOf(err) != apperr.NotFound {
		return nil, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
	}
	return t, err
}
