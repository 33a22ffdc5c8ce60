// Package tasks is the gateway's task service: it creates tasks (record, then
// job) and reads them back for their owner. It takes domain values and
// returns apperr errors; it knows nothing of HTTP.
package tasks

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
)

// Store keeps task records and charges for them.
type Store interface {
	CreateTask(ctx context.Context, t *task.Task, c store.Charge, job []byte) (int64, error)
	Task(ctx context.Context, accountID, taskID string) (*task.Task, error)
	AbortTaskWith(ctx context.Context, accountID, taskID, idemKey string) (bool, error)
	IdempotencyDone(ctx context.Context, accountID, key, taskID string) error
	CancelTask(ctx context.Context, accountID, taskID string) (store.Canceled, error)
	ListTasks(ctx context.Context, accountID string, f store.TaskFilter) ([]*task.Task, string, error)
	Dequeued(ctx context.Context, queue string, n int) error
	QueueStatsOf(ctx context.Context, queue string) (store.QueueStats, error)
	HookQueued(ctx context.Context, accountID, taskID, event string) error
}

// Prices prices tasks.
type Prices interface {
	Price(tier catalog.Tier, size string) int64
}

// Queue takes jobs.
type Queue interface {
	EnqueueGenerateImage(ctx context.Context, j jobs.GenerateImage, run string) error
	// CancelRun stops a run wherever a worker runs it.
	CancelRun(ctx context.Context, run string) error
	// QueueFinalHook queues the webhook delivery of a task's final event
	// and takes it off the store's outbox.
	QueueFinalHook(ctx context.Context, outbox jobs.HookOutbox, accountID, taskID, event string) error
}

// IDs makes task ids.
type IDs interface {
	New() (string, error)
}

// Meter records what the service did, for metrics.
type Meter interface {
	// Debited records the price of a task created.
	Debited(model string, credits int64)
}

type noMeter struct{}

func (noMeter) Debited(string, int64) {}

// Config is the service's settings.
type Config struct {
	// Deadline bounds each task from its creation.
	Deadline time.Duration
	// MaxInflight is the default limit of an account's unfinished tasks
	// (0: none); an account may set its own.
	MaxInflight int
	// Queues maps each model id to its queue, for queue positions.
	Queues map[string]string
}

// Service creates and reads tasks.
type Service struct {
	store  Store
	queue  Queue
	ids    IDs
	prices Prices
	cfg    Config
	meter  Meter
	now    func() time.Time
	// stats caches the queues' numbers (queueStats).
	statsMu *sync.Mutex
	stats   map[string]cachedStats
}

// NewService returns a service.
func NewService(store Store, queue Queue, ids IDs, prices Prices, cfg Config) *Service {
	return &Service{store: store, queue: queue, ids: ids, prices: prices, cfg: cfg, meter: noMeter{}, now: time.Now,
		statsMu: &sync.Mutex{}, stats: map[string]cachedStats{}}
}

// WithMeter returns a copy of the service that records what it does on m.
func (s *Service) WithMeter(m Meter) *Service {
	c := *s
	c.meter = m
	return &c
}

// Create records a pending task for an account, charging its price, and
// queues its job. in must have its defaults applied. The store's refusals
// (credits, limits, a disabled account, a model not allowed) come back as
// they are. If the job cannot be queued, the task is aborted (record
// removed, price refunded) and the error is apperr.Unavailable: no task is
// left pending with nothing to run it.
//
// If this process dies between the two steps, or a Redis failover loses the
// queue's write but not the task's, the record holds the job's payload and
// the workers' recovery queues it (store.QueueChecks), so a charged task
// always runs or is refunded.
func (s *Service) Create(ctx context.Context, accountID string, in task.Input) (string, error) {
	id, _, err := s.CreateIdempotent(ctx, accountID, in, task.Idempotency{})
	return id, err
}

// CreateIdempotent is Create under an idempotency key (none when idem.Key
// is empty): a create the account made before with the same key and body
// is not made again; its task id comes back with replayed true, and
// nothing is charged. The same key with another body is apperr.Mismatch;
// while the first create with the key is under way, apperr.Conflict.
func (s *Service) CreateIdempotent(ctx context.Context, accountID string, in task.Input, idem task.Idempotency) (string, bool, error) {
	id, err := s.create(ctx, accountID, in, idem)
	var r *store.Replayed
	if errors.As(err, &r) {
		logging.AddFields(ctx, zap.String("task_id", r.TaskID), zap.Bool("replayed", true))
		return r.TaskID, true, nil
	}
	return id, false, err
}

func (s *Service) create(ctx context.Context, accountID string, in task.Input, idem task.Idempotency) (string, error) {
	id, err := s.ids.New()
	if err != nil {
		return "", apperr.Wrap(err, apperr.Internal, "")
	}
	logging.AddFields(ctx, zap.String("task_id", id))
	now := s.now()
	job := jobs.GenerateImage{TaskID: id, AccountID: accountID, Input: in, CreateTime: now, Deadline: now.Add(s.cfg.Deadline)}
	payload, err := jobs.EncodeGenerateImage(job)
	if err != nil {
		return "", apperr.Wrap(err, apperr.Internal, "")
	}
	t := &task.Task{
		ID:         id,
		AccountID:  accountID,
		Type:       task.Type,
		Model:      in.Model.ID,
		Status:     task.Pending,
		CreateTime: now,
		Callback:   in.Callback,
	}

	charge := store.Charge{
		Price:       s.prices.Price(in.Model.Tier, in.ImageSize),
		Tier:        string(in.Model.Tier),
		MaxInflight: s.cfg.MaxInflight,
		// A task no worker ever finishes stops counting a little after its
		// deadline.
		CountUntil:  now.Add(s.cfg.Deadline + time.Minute),
		Idempotency: idem,
		// The task's number in its queue, for its position while pending
		// (t.QueueSeq). A create the store refuses takes none.
		Queue: jobs.Queue(in.Model.Tier),
	}
	// A create undone after the store made it gives its queue number back,
	// so the positions of the tasks after it stay right.
	stood := false
	defer func() {
		if t.QueueSeq > 0 && !stood {
			s.left(ctx, charge.Queue)
		}
	}()
	if _, err := s.store.CreateTask(ctx, t, charge, payload); err != nil {
		if errors.Is(err, store.ErrNotReplicated) {
			// Made on the primary, not confirmed by its replicas: undo it,
			// so that a failover cannot leave a charge the client never
			// heard of.
			s.abort(ctx, accountID, id, idem, err)
			return "", err
		}
		var r *store.Replayed
		if errors.As(err, &r) || apperr.CodeOf(err) != apperr.Internal {
			return "", err // a replay, or a refusal
		}
		// A timeout or a lost connection may come after the script ran:
		// undo whatever it did (nothing, if it did not run), so that a
		// client told "not created" is not charged for a task that runs.
		s.abort(ctx, accountID, id, idem, err)
		return "", apperr.Transient(err, apperr.Unavailable, "the task store is unavailable; the task was not created, try again")
	}
	if err := s.queue.EnqueueGenerateImage(ctx, job, jobs.RunID(id, 0)); err != nil {
		s.abort(ctx, accountID, id, idem, err)
		return "", apperr.Transient(err, apperr.Unavailable, "the task queue is unavailable; the task was not created, try again")
	}
	if idem.Key != "" {
		// Replays from now on. If this write fails the key still replays
		// once its create is idempotencyPending old: the task stands.
		if err := s.store.IdempotencyDone(ctx, accountID, idem.Key, id); err != nil {
			logging.From(ctx).Warn("could not mark the idempotency key done", zap.Error(err))
		}
	}
	stood = true
	logging.AddFields(ctx, zap.String("model", in.Model.ID), zap.Int64("price", charge.Price))
	// Counted once the create stands: an undone one was debited and
	// refunded, and moved no credits.
	s.meter.Debited(in.Model.ID, charge.Price)
	return id, nil
}

// abort undoes a create (record removed, price refunded) with a context of
// its own: the request's may be what failed. If the undo fails too, the
// task stays pending with its job payload, and the workers' recovery queues it.
func (s *Service) abort(ctx context.Context, accountID, id string, idem task.Idempotency, cause error) {
	undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	// The undo frees the idempotency key in the same step, only if it
	// applies: a task that goes on keeps its key.
	_, err := s.store.AbortTaskWith(undoCtx, accountID, id, idem.Key)
	switch {
	case errors.Is(err, store.ErrNotReplicated):
		// Undone on the primary; if the replicas lack the undo they lack
		// the create too.
	case err != nil:
		logging.From(ctx).Error("could not undo a create", zap.Error(err), zap.NamedError("cause", cause))
	}
}

// left records that a task left its queue without a worker starting it.
func (s *Service) left(ctx context.Context, queue string) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.store.Dequeued(lctx, queue, 1); err != nil {
		logging.From(ctx).Debug("could not count a task out of its queue; later positions read one too many", zap.Error(err))
	}
}

// Cancel cancels a task of the account (store.CancelTask): a pending task
// is refunded in full and never runs; a processing one is stopped on its
// worker (Asynq's cancellation: the upstream call is aborted) and not
// refunded. A task already final is apperr.Conflict; another account's is
// not found.
func (s *Service) Cancel(ctx context.Context, accountID, taskID string) (store.Canceled, error) {
	c, err := s.store.CancelTask(ctx, accountID, taskID)
	if err != nil {
		if code := apperr.CodeOf(err); code == apperr.Conflict || code == apperr.NotFound {
			return c, err
		}
		return c, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable; the task was not canceled, try again")
	}
	logging.AddFields(ctx, zap.String("task_id", taskID), zap.String("was", string(c.Was)), zap.Int64("refunded", c.Refunded))
	if c.Hooked {
		// If this fails, the workers' recovery queues it from the outbox.
		if err := s.queue.QueueFinalHook(context.WithoutCancel(ctx), s.store, accountID, taskID, task.EventCanceled); err != nil {
			logging.From(ctx).Warn("could not queue the task.canceled webhook; the recovery will", zap.Error(err))
		}
	}
	switch {
	case c.Was == task.Pending:
		t, err := s.store.Task(ctx, accountID, taskID)
		if err == nil {
			if q, ok := s.cfg.Queues[t.Model]; ok && t.QueueSeq > 0 {
				s.left(ctx, q)
			}
		}
	case c.Run != "":
		// The task is canceled whatever happens here: a run that is not
		// stopped finds it final when it tries to finish it.
		if err := s.queue.CancelRun(context.WithoutCancel(ctx), c.Run); err != nil {
			logging.From(ctx).Warn("could not stop the canceled task's run; it stops at its next state change", zap.Error(err))
		}
	}
	return c, nil
}

// List returns the account's tasks (store.ListTasks).
func (s *Service) List(ctx context.Context, accountID string, f store.TaskFilter) ([]*task.Task, string, error) {
	ts, next, err := s.store.ListTasks(ctx, accountID, f)
	if err != nil && apperr.CodeOf(err) != apperr.Invalid {
		return nil, "", apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
	}
	return ts, next, err
}

// GetPositioned is Get that also returns a pending task's place in its
// queue (nil when it has none). The queues' numbers are read at most every
// queueStatsTTL by this process, not at each query: a position is an
// estimate, and a query of a pending task then costs what any query does.
func (s *Service) GetPositioned(ctx context.Context, accountID, taskID string) (*task.Task, *store.QueuePosition, error) {
	t, err := s.Get(ctx, accountID, taskID)
	if err != nil || t.Status != task.Pending || t.QueueSeq == 0 {
		return t, nil, err
	}
	q, ok := s.cfg.Queues[t.Model]
	if !ok {
		return t, nil, nil
	}
	st, err := s.queueStats(ctx, q)
	if err != nil {
		logging.From(ctx).Debug("no queue position", zap.Error(err))
		return t, nil, nil
	}
	p := st.PositionOf(t.QueueSeq, s.now())
	return t, &p, nil
}

// queueStatsTTL is how long a queue's numbers read are used for.
const queueStatsTTL = 250 * time.Millisecond

type cachedStats struct {
	stats store.QueueStats
	at    time.Time
}

func (s *Service) queueStats(ctx context.Context, queue string) (store.QueueStats, error) {
	now := s.now()
	s.statsMu.Lock()
	c, ok := s.stats[queue]
	s.statsMu.Unlock()
	if ok && now.Sub(c.at) < queueStatsTTL {
		return c.stats, nil
	}
	st, err := s.store.QueueStatsOf(ctx, queue)
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
	t, err := s.store.Task(ctx, accountID, taskID)
	if err != nil && apperr.CodeOf(err) != apperr.NotFound {
		return nil, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
	}
	return t, err
}
