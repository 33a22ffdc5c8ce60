package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
)

// The recovery's timing. Each bound is the sum of its parts:
//
//   - a task charged by a gateway that died before queueing its job is
//     queued within unqueuedAfter + recoverEvery (15 s);
//   - a task whose worker died is given to a new run within Asynq's lease
//     (30 s, then its run is an orphan) + recoverEvery (35 s), rather than
//     the 60 to 120 s Asynq's own recoverer takes;
//   - a task past its deadline that no run will finish is failed and
//     refunded within a minute of it (overdueEvery).
const (
	recoverEvery  = 5 * time.Second
	unqueuedAfter = 10 * time.Second
	overdueEvery  = 30 * time.Second
	recoverBatch  = 1000
)

// sweepStore is what the recovery needs of the store.
type sweepStore interface {
	TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error)
	Overdue(ctx context.Context, limit int64) ([]store.Overdue, error)
	Expire(ctx context.Context, o store.Overdue) (store.Outcome, error)
	Unqueued(ctx context.Context, olderThan time.Time, limit int64) ([]store.Unqueued, error)
	MarkQueued(ctx context.Context, accountID, taskID string) error
	Takeover(ctx context.Context, accountID, taskID, orphan string, next func(crashes int) string) (store.Outcome, string, error)
}

// sweepQueue is what the recovery needs of the queues.
type sweepQueue interface {
	EnqueueGenerateImage(ctx context.Context, j jobs.GenerateImage, run string) error
	Orphans(ctx context.Context, queues []string) ([]jobs.Orphan, error)
}

// sweeper recovers what crashes leave behind. Every worker runs one; one at
// a time does a round, under a lease.
type sweeper struct {
	st          sweepStore
	q           sweepQueue
	queues      []string
	every       time.Duration
	log         *zap.Logger
	now         func() time.Time
	lastOverdue time.Time
}

// sweepReport counts what a round did.
type sweepReport struct {
	queued, takenOver, poisoned, expired int
}

func newSweeper(st sweepStore, q sweepQueue, every time.Duration, log *zap.Logger) *sweeper {
	return &sweeper{st: st, q: q, queues: jobs.Queues(), every: every, log: log, now: time.Now}
}

// run does a round every period until ctx is done.
func (s *sweeper) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.round(ctx)
	}
}

// round does one round, if this worker gets the lease.
func (s *sweeper) round(ctx context.Context) sweepReport {
	var r sweepReport
	// The lease runs out a little before the next round, so a worker that
	// died holding it does not hold up the next.
	got, err := s.st.TryLock(ctx, "sweeper", s.every-s.every/10)
	if err != nil || !got {
		return r
	}
	r.queued = s.queueUnqueued(ctx)
	r.takenOver, r.poisoned = s.takeOverOrphans(ctx)
	if s.now().Sub(s.lastOverdue) >= overdueEvery {
		s.lastOverdue = s.now()
		r.expired = s.expireOverdue(ctx)
	}
	return r
}

// queueUnqueued queues the jobs of tasks whose gateway charged them and
// died before queueing (or before saying it had). Queueing a job that is
// queued already is a no-op, so a task is never queued twice.
func (s *sweeper) queueUnqueued(ctx context.Context) int {
	list, err := s.st.Unqueued(ctx, s.now().Add(-unqueuedAfter), recoverBatch)
	if err != nil {
		s.log.Warn("recovery: unqueued tasks", zap.Error(err))
		return 0
	}
	n := 0
	for _, u := range list {
		log := s.log.With(zap.String("task_id", u.TaskID), zap.String("account_id", u.AccountID))
		if u.Pending && len(u.Job) > 0 {
			j, err := jobs.DecodeGenerateImage(u.Job)
			if err != nil {
				log.Error("recovery: a stored job does not decode; the deadline sweep will fail the task", zap.Error(err))
			} else if err := s.q.EnqueueGenerateImage(ctx, j, jobs.RunID(j.TaskID, 0)); err != nil {
				log.Warn("recovery: could not queue a task's job; will try again", zap.Error(err))
				continue
			} else {
				n++
				log.Warn("recovery: queued the job of a task whose gateway stopped before saying it had")
			}
		}
		if err := s.st.MarkQueued(ctx, u.AccountID, u.TaskID); err != nil {
			log.Warn("recovery: mark queued", zap.Error(err))
		}
	}
	return n
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
		out, run, err := s.st.Takeover(ctx, j.AccountID, j.TaskID, o.Run, func(n int) string { return jobs.RunID(j.TaskID, n) })
		if err != nil {
			log.Warn("recovery: takeover", zap.Error(err))
			continue
		}
		switch out {
		case store.Applied, store.Superseded:
			// The owning run is to be queued (again, harmlessly, if it is).
			if err := s.q.EnqueueGenerateImage(ctx, j, run); err != nil {
				log.Warn("recovery: could not queue the new run; will try again", zap.String("new_run", run), zap.Error(err))
				continue
			}
			if out == store.Applied {
				takenOver++
				log.Warn("recovery: the worker running this task died; a new run takes it over", zap.String("new_run", run))
			}
		case store.Poisoned:
			poisoned++
			log.Warn("task failed: it stopped its worker twice, and was refunded instead of run again")
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
		out, err := s.st.Expire(ctx, o)
		if err != nil {
			s.log.Warn("recovery: could not expire a task", zap.String("task_id", o.TaskID), zap.Error(err))
			continue
		}
		if out == store.Applied {
			failed++
			s.log.Warn("task failed: past its deadline with no worker on it; refunded", zap.String("task_id", o.TaskID), zap.String("account_id", o.AccountID))
		}
	}
	return failed
}
