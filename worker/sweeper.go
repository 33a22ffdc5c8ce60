package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/internal/processor"
)

// The recovery's timing. Each bound is the sum of its parts:
//
//   - a task charged by a gateway that died before queueing its job, or
//     whose job a Redis failover lost, is queued within
//     store.FirstQueueCheck + recoverEvery (15 s) of its creation, or of
//     the loss if later, within its age again (at most maxRecheck more);
//   - a task whose worker died is given to a new run within Asynq's lease
//     (30 s, then its run is an orphan) + recoverEvery (35 s), rather than
//     the 60 to 120 s Asynq's own recoverer takes;
//   - a task past its deadline that no run will finish is failed and
//     refunded within a minute of it (overdueEvery).
const (
	recoverEvery = 5 * time.Second
	maxRecheck   = 10 * time.Minute
	overdueEvery = 30 * time.Second
	recoverBatch = 1000
)

// sweepStore is what the recovery needs of the task store.
type sweepStore interface {
	Overdue(ctx context.Context, limit int64) ([]store.Overdue, error)
	Expire(ctx context.Context, o store.Overdue) (store.Change, error)
	QueueChecks(ctx context.Context, now time.Time, limit int64) ([]store.QueueCheck, error)
	ScheduleQueueCheck(ctx context.Context, accountID, taskID string, at time.Time) error
	DropQueueCheck(ctx context.Context, accountID, taskID string) error
	Takeover(ctx context.Context, accountID, taskID, orphan string, next func(crashes int) string) (store.Change, string, error)
	// Get reads a task the recovery failed back, for its model.
	Get(ctx context.Context, accountID, taskID string) (*task.Task, error)
}

// sweepMetrics records the tasks the recovery fails.
type sweepMetrics interface {
	Finished(model, outcome, code string)
	Refunded(model string, credits int64)
}

type noSweepMetrics struct{}

func (noSweepMetrics) Finished(string, string, string) {}
func (noSweepMetrics) Refunded(string, int64)          {}

// sweepQueue is what the recovery needs of the queues.
type sweepQueue interface {
	EnqueueGenerateImage(ctx context.Context, j jobs.GenerateImage, run string) error
	EnsureGenerateImage(ctx context.Context, j jobs.GenerateImage, run string) (added bool, _ error)
	Orphans(ctx context.Context, queues []string) ([]jobs.Orphan, error)
}

// sweeper recovers what crashes leave behind. Every worker runs one; one at
// a time does a round, under a lease (everyUnderLease).
type sweeper struct {
	st          sweepStore
	q           sweepQueue
	hooks       hookNotifier
	queues      []string
	log         *zap.Logger
	metrics     sweepMetrics
	now         func() time.Time
	lastOverdue time.Time
}

// hookNotifier queues a webhook event the store said is due (hooks.Notify).
type hookNotifier interface {
	Notify(ctx context.Context, accountID, taskID, event string, seq int)
}

// sweepReport counts what a round did.
type sweepReport struct {
	queued, takenOver, poisoned, expired int
}

func newSweeper(st sweepStore, q sweepQueue, hooks hookNotifier, metrics sweepMetrics, log *zap.Logger) *sweeper {
	if metrics == nil {
		metrics = noSweepMetrics{}
	}
	return &sweeper{st: st, q: q, hooks: hooks, queues: jobs.Queues(), log: log, metrics: metrics, now: time.Now}
}

// failed records a task the recovery failed, and its refund, and queues
// its webhook event if the store said one is due.
func (s *sweeper) failed(ctx context.Context, log *zap.Logger, accountID, taskID string, c store.Change, code apperr.Code) {
	if c.Hooked {
		s.hooks.Notify(ctx, accountID, taskID, task.EventFailed, 0)
	}
	t, err := s.st.Get(ctx, accountID, taskID)
	if err != nil {
		log.Debug("recovery: could not read a failed task back; it is not counted in the metrics", zap.Error(err))
		return
	}
	s.metrics.Finished(t.Model, processor.Failed, string(code))
	if c.Refunded > 0 {
		s.metrics.Refunded(t.Model, c.Refunded)
	}
}

// round does one round; everyUnderLease runs it on one worker at a time.
func (s *sweeper) round(ctx context.Context) sweepReport {
	var r sweepReport
	r.queued = s.checkQueued(ctx)
	r.takenOver, r.poisoned = s.takeOverOrphans(ctx)
	if s.now().Sub(s.lastOverdue) >= overdueEvery {
		s.lastOverdue = s.now()
		r.expired = s.expireOverdue(ctx)
	}
	return r
}

// checkQueued makes sure the job of every task still pending a while after
// its creation is queued, queueing it if it is not: its gateway may have
// died before queueing it, or a Redis failover may have lost the queue's
// write but not the task's. Queueing a job that is queued already is a
// no-op, so a task is never queued twice. A task still pending is checked
// again after as long as it has waited (at most maxRecheck): a long queue
// costs a few checks per task, not one every round.
func (s *sweeper) checkQueued(ctx context.Context) int {
	now := s.now()
	list, err := s.st.QueueChecks(ctx, now, recoverBatch)
	if err != nil {
		s.log.Warn("recovery: queue checks", zap.Error(err))
		return 0
	}
	n := 0
	for _, c := range list {
		log := s.log.With(zap.String("task_id", c.TaskID), zap.String("account_id", c.AccountID))
		if !c.Pending || len(c.Job) == 0 {
			s.dropQueueCheck(ctx, log, c)
			continue
		}
		j, err := jobs.DecodeGenerateImage(c.Job)
		if err != nil {
			log.Error("recovery: a stored job does not decode; the deadline sweep will fail the task", zap.Error(err))
			s.dropQueueCheck(ctx, log, c)
			continue
		}
		run := c.Run
		if run == "" {
			run = jobs.RunID(j.TaskID, 0)
		}
		added, err := s.q.EnsureGenerateImage(ctx, j, run)
		if err != nil {
			log.Warn("recovery: could not queue a task's job; will try again", zap.Error(err))
			continue
		}
		if added {
			n++
			log.Warn("recovery: queued the job of a pending task that had none (its gateway stopped before queueing it, or a failover lost it)")
		}
		wait := min(max(now.Sub(c.Created), store.FirstQueueCheck), maxRecheck)
		if err := s.st.ScheduleQueueCheck(ctx, c.AccountID, c.TaskID, now.Add(wait)); err != nil {
			log.Warn("recovery: queue check", zap.Error(err))
		}
	}
	return n
}

func (s *sweeper) dropQueueCheck(ctx context.Context, log *zap.Logger, c store.QueueCheck) {
	if err := s.st.DropQueueCheck(ctx, c.AccountID, c.TaskID); err != nil {
		log.Warn("recovery: queue check", zap.Error(err))
	}
}

// takeOverOrphans gives the tasks of runs whose worker died to new runs.
func (s *sweeper) takeOverOrphans(ctx context.Context) (takenOver, poisoned int) {
	orphans, err := s.q.Orphans(ctx, s.queues)
	if err != nil {
		s.log.Warn("recovery: orphaned runs", zap.Error(err))
		return 0, 0
	}
	for _, o := range orphans {
		j := o.Job
		log := s.log.With(zap.String("task_id", j.TaskID), zap.String("account_id", j.AccountID), zap.String("run", o.Run))
		c, run, err := s.st.Takeover(ctx, j.AccountID, j.TaskID, o.Run, func(n int) string { return jobs.RunID(j.TaskID, n) })
		if err != nil {
			log.Warn("recovery: takeover", zap.Error(err))
			continue
		}
		switch c.Outcome {
		case task.Applied, task.Superseded:
			// The owning run is to be queued (again, harmlessly, if it is).
			if err := s.q.EnqueueGenerateImage(ctx, j, run); err != nil {
				log.Warn("recovery: could not queue the new run; will try again", zap.String("new_run", run), zap.Error(err))
				continue
			}
			if c.Outcome == task.Applied {
				takenOver++
				log.Warn("recovery: the worker running this task died; a new run takes it over", zap.String("new_run", run))
			}
		case task.Poisoned:
			poisoned++
			log.Warn("task failed: it stopped its worker twice, and was refunded instead of run again")
			s.failed(ctx, log, j.AccountID, j.TaskID, c, task.WorkerCrashed)
		}
	}
	return takenOver, poisoned
}

// expireOverdue fails and refunds tasks past their deadline that no run will
// finish (their job expired in the queue, or every run failed to record an
// outcome).
func (s *sweeper) expireOverdue(ctx context.Context) int {
	overdue, err := s.st.Overdue(ctx, recoverBatch)
	if err != nil {
		s.log.Warn("recovery: overdue tasks", zap.Error(err))
		return 0
	}
	failed := 0
	for _, o := range overdue {
		c, err := s.st.Expire(ctx, o)
		if err != nil {
			s.log.Warn("recovery: could not expire a task", zap.String("task_id", o.TaskID), zap.Error(err))
			continue
		}
		if c.Outcome == task.Applied {
			failed++
			log := s.log.With(zap.String("task_id", o.TaskID), zap.String("account_id", o.AccountID))
			log.Warn("task failed: past its deadline with no worker on it; refunded")
			s.failed(ctx, log, o.AccountID, o.TaskID, c, task.Timeout)
		}
	}
	return failed
}

// leaser takes named leases (store.Leases).
type leaser interface {
	TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error)
}

// everyUnderLease runs round every period until ctx is done, on one worker
// at a time: a round runs only on the worker that takes the lease name,
// which runs out a little before the next round, so a worker that died
// holding it does not hold up the next.
func everyUnderLease(ctx context.Context, l leaser, name string, every time.Duration, round func(ctx context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if got, err := l.TryLock(ctx, name, every-every/10); err == nil && got {
			round(ctx)
		}
	}
}
