package worker

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/internal/processor"
)

// The recovery: what crashes and failovers leave behind, put right by the
// workers. Two parts:
//
//   - the due work (recovery): each shard's time-ordered set of what is
//     due (store.Tasks.Due), read shard by shard by the worker holding the
//     shard's lease, so that the work costs what is due, never a walk of
//     the accounts or the backlog, and the workers share the shards. A
//     task charged whose job is missing from its queue (its gateway died
//     before queueing it, a failover lost the queue's write, an operator
//     deleted it) is queued again within store.QueueRecheck and a poll of
//     its admission, or of its start for a task processing; a task past its deadline that no run will finish is
//     failed and refunded within a poll of it, in batches; a final webhook
//     event left unqueued is queued store.HookGrace after the task ended.
//   - orphaned runs (sweeper): a task whose worker died is given to a new
//     run within Asynq's lease (30 s, then its run is an orphan) +
//     orphanEvery, rather than the 60 to 120 s Asynq's own recoverer
//     takes. Asynq's active lists are bounded by the workers' concurrency;
//     one worker at a time reads them.
const (
	orphanEvery = 5 * time.Second
	// dueBatch is the most entries of a shard read in one round trip (one
	// script: a few milliseconds of Redis, whatever the shard's size).
	dueBatch = 1000
	// duePoll is how often the recovery looks for shards due, and
	// dueIdle the longest a held shard goes unread (new work is never due
	// sooner than store.HookGrace after it is added).
	duePoll = time.Second
	dueIdle = 5 * time.Second
	// dueRound bounds a poll by time, not by count: a shard with more due
	// than a batch is read on, batch after batch, until it has nothing due
	// or the poll has read for dueRound; the shards it did not get to, and
	// the one it left with more due, are read at the next poll, which
	// follows at once, the longest waiting first. So a shard's backlog is
	// read as fast as its checks go (one account of 1,000,000 pending
	// tasks is checked every store.QueueRecheck, not every 1,000 s), and
	// the leases are renewed between polls.
	dueRound = time.Second
	// dueQueueing is how many missing jobs a recovery queues at once (each
	// is a round trip to Asynq).
	dueQueueing = 8
	// leaseEvery is how often a worker renews its shards' leases, rebalances
	// them and says it is alive; a lease lasts shardLeaseTTL without a
	// renewal. A worker counts as alive (sharing the shards) while it said
	// so within shardLeaseTTL - leaseEvery (two rounds missed): the shards
	// of a worker that stopped (and gave them back) are all taken within
	// shardLeaseTTL of its stop, those of one that died within
	// shardLeaseTTL of its last renewal and a round.
	leaseEvery    = 10 * time.Second
	shardLeaseTTL = 30 * time.Second
)

// sweepMetrics records the tasks the recovery fails.
type sweepMetrics interface {
	Finished(model, outcome, code string)
	Refunded(model string, credits int64)
}

type noSweepMetrics struct{}

func (noSweepMetrics) Finished(string, string, string) {}
func (noSweepMetrics) Refunded(string, int64)          {}

// hookNotifier queues a webhook event the store said is due (hooks.Notify).
type hookNotifier interface {
	Notify(ctx context.Context, accountID, taskID, event string, seq int)
}

// sweepStore is what the orphans' recovery needs of the task store.
type sweepStore interface {
	Takeover(ctx context.Context, accountID, taskID, orphan string, next func(runs int) string) (store.Change, string, error)
}

// sweepQueue is what the orphans' recovery needs of the queues.
type sweepQueue interface {
	EnqueueGenerateImage(ctx context.Context, r jobs.Ref, run string) error
	EnqueueAdmitted(ctx context.Context, admitted []task.Admitted) error
	Orphans(ctx context.Context, queues []string) ([]jobs.Orphan, error)
}

// sweeper gives the tasks of runs whose worker died to new runs. Every
// worker runs one; one at a time does a round, under a lease
// (everyUnderLease).
type sweeper struct {
	st      sweepStore
	q       sweepQueue
	hooks   hookNotifier
	queues  []string
	log     *zap.Logger
	metrics sweepMetrics
}

func newSweeper(st sweepStore, q sweepQueue, hooks hookNotifier, metrics sweepMetrics, log *zap.Logger) *sweeper {
	if metrics == nil {
		metrics = noSweepMetrics{}
	}
	return &sweeper{st: st, q: q, hooks: hooks, queues: jobs.Queues(), log: log, metrics: metrics}
}

// takeOverOrphans gives the tasks of runs whose worker died to new runs.
func (s *sweeper) takeOverOrphans(ctx context.Context) (takenOver, poisoned int) {
	orphans, err := s.q.Orphans(ctx, s.queues)
	if err != nil {
		s.log.Warn("recovery: orphaned runs", zap.Error(err))
		return 0, 0
	}
	for _, o := range orphans {
		j := o.Ref
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
				log.Warn("recovery: the run's lease ran out (its worker died, hung, or lost Redis); a new run takes it over", zap.String("new_run", run))
			}
		case task.Poisoned:
			poisoned++
			log.Warn("task failed: it stopped its worker twice, and was refunded instead of run again")
			failed(ctx, s.metrics, s.hooks, s.q, log, j.AccountID, j.TaskID, "", c, task.WorkerCrashed)
		}
	}
	return takenOver, poisoned
}

// failed records a task the recovery failed, and its refund; queues its
// webhook event if the store said one is due, and the tasks its place
// admitted.
func failed(ctx context.Context, m sweepMetrics, hooks hookNotifier, q sweepQueue, log *zap.Logger, accountID, taskID, model string, c store.Change, code apperr.Code) {
	recordFailed(ctx, m, hooks, accountID, taskID, model, c, code)
	admit(ctx, q, log, c.Admitted)
}

// admit queues the jobs of tasks a change admitted.
func admit(ctx context.Context, q sweepQueue, log *zap.Logger, admitted []task.Admitted) {
	if len(admitted) == 0 {
		return
	}
	if err := q.EnqueueAdmitted(ctx, admitted); err != nil {
		log.Warn("recovery: could not queue the tasks a failed one admitted; their queue checks will", zap.Int("tasks", len(admitted)), zap.Error(err))
	}
}

// recordFailed records a task the recovery failed, and its refund, and
// queues its webhook event if the store said one is due.
func recordFailed(ctx context.Context, m sweepMetrics, hooks hookNotifier, accountID, taskID, model string, c store.Change, code apperr.Code) {
	if c.Hooked {
		hooks.Notify(ctx, accountID, taskID, task.EventFailed, 0)
	}
	if model == "" {
		model = c.Model
	}
	m.Finished(model, processor.Failed, string(code))
	if c.Refunded > 0 {
		m.Refunded(model, c.Refunded)
	}
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

// recoveryStore is what the due work needs of the task store.
type recoveryStore interface {
	Due(ctx context.Context, shard int, now time.Time, limit int) (store.DueWork, error)
	ExpireAll(ctx context.Context, refs []store.TaskRef) ([]store.Change, []error)
}

// shardLeaser shares the shards among the workers (store.Leases).
type shardLeaser interface {
	TakeShards(ctx context.Context, holder string, shards []int, ttl time.Duration) ([]int, error)
	ReleaseShards(ctx context.Context, holder string, shards []int) error
	Workers(ctx context.Context, holder string, ttl time.Duration) (int, error)
	Leave(ctx context.Context, holder string) error
}

// recoveryQueue is what the due work needs of the queues.
type recoveryQueue interface {
	sweepQueue
	Missing(ctx context.Context, runs []jobs.Run) ([]bool, error)
	EnsureGenerateImage(ctx context.Context, r jobs.Ref, run string) (added bool, _ error)
}

// recovery does the due work of the shards this worker holds.
type recovery struct {
	st      recoveryStore
	leases  shardLeaser
	q       recoveryQueue
	hooks   hookNotifier
	metrics sweepMetrics
	log     *zap.Logger
	me      string
	now     func() time.Time
	// held are the shards this worker holds, with when each is next due
	// for a read.
	held map[int]time.Time
	// The timings (leaseEvery, shardLeaseTTL, duePoll, dueIdle, dueRound;
	// tests shorten them): how often the shards' leases are renewed and
	// rebalanced, how long a lease lasts without a renewal, how often the
	// held shards are looked at, the longest one goes unread, and the
	// longest a poll reads on.
	leaseEvery, leaseTTL, pollEvery, idle, round time.Duration
	// batch is the most entries of a shard read at once (dueBatch).
	batch int
	// observe, when set (tests), is told the shards held after each
	// lease round.
	observe func(held []int)
}

// recoveryReport counts what a poll did; more: it left work due (its
// round ran out), for the next poll to read at once.
type recoveryReport struct {
	queued, expired, hooked int
	more                    bool
}

func newRecovery(st recoveryStore, leases shardLeaser, q recoveryQueue, hooks hookNotifier, metrics sweepMetrics, me string, log *zap.Logger) *recovery {
	if metrics == nil {
		metrics = noSweepMetrics{}
	}
	return &recovery{st: st, leases: leases, q: q, hooks: hooks, metrics: metrics, log: log, me: me, now: time.Now, held: map[int]time.Time{},
		leaseEvery: leaseEvery, leaseTTL: shardLeaseTTL, pollEvery: duePoll, idle: dueIdle, round: dueRound, batch: dueBatch}
}

// run leases shards and does their due work until ctx is done, then
// gives its shards back. A poll that left work due is followed by the
// next at once, the leases renewed between them when their time comes.
func (r *recovery) run(ctx context.Context) {
	lease := time.NewTicker(r.leaseEvery)
	defer lease.Stop()
	poll := time.NewTicker(r.pollEvery)
	defer poll.Stop()
	r.lease(ctx)
	more := r.poll(ctx).more
	for {
		if more {
			select {
			case <-ctx.Done():
				r.giveBack(ctx)
				return
			case <-lease.C:
				r.lease(ctx)
			default:
			}
			more = r.poll(ctx).more
			continue
		}
		select {
		case <-ctx.Done():
			r.giveBack(ctx)
			return
		case <-lease.C:
			r.lease(ctx)
		case <-poll.C:
			more = r.poll(ctx).more
		}
	}
}

// giveBack gives the shards this worker holds back, and leaves the
// workers that share them, for the others to take its share at their next
// lease round.
func (r *recovery) giveBack(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.leases.Leave(rctx, r.me); err != nil {
		r.log.Warn("recovery: leaving the workers", zap.Error(err))
	}
	if err := r.leases.ReleaseShards(rctx, r.me, r.shards()); err != nil {
		r.log.Warn("recovery: giving shard leases back", zap.Error(err))
		return
	}
	r.held = map[int]time.Time{}
}

func (r *recovery) shards() []int {
	out := make([]int, 0, len(r.held))
	for n := range r.held {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// lease renews this worker's shards and takes or gives back some, so that
// each of the live workers holds about its share.
func (r *recovery) lease(ctx context.Context) {
	if r.observe != nil {
		defer func() { r.observe(r.shards()) }()
	}
	// A worker that missed two rounds is gone: the shards it gave back (or
	// whose leases ran out) are shared among the others from then on.
	alive := max(r.leaseTTL-r.leaseEvery, 2*r.leaseEvery)
	workers, err := r.leases.Workers(ctx, r.me, alive)
	if err != nil {
		r.log.Warn("recovery: workers", zap.Error(err))
		return
	}
	share := (store.Shards + workers - 1) / workers
	kept, err := r.leases.TakeShards(ctx, r.me, r.shards(), r.leaseTTL)
	if err != nil {
		r.log.Warn("recovery: renewing shard leases", zap.Error(err))
		return
	}
	held := make(map[int]time.Time, len(kept))
	for _, n := range kept {
		held[n] = r.held[n]
	}
	if len(held) < share {
		// Try the shards this worker does not hold, in a random order: the
		// free ones are taken, the others' holders keep them.
		var free []int
		for _, n := range rand.Perm(store.Shards) {
			if _, ok := held[n]; !ok {
				free = append(free, n)
			}
		}
		for len(free) > 0 && len(held) < share {
			batch := free[:min(len(free), share-len(held))]
			free = free[len(batch):]
			got, err := r.leases.TakeShards(ctx, r.me, batch, r.leaseTTL)
			if err != nil {
				r.log.Warn("recovery: taking shard leases", zap.Error(err))
				break
			}
			for _, n := range got {
				held[n] = time.Time{} // due for a read at once
			}
		}
	} else if extra := len(held) - share; extra > 0 {
		// More than its share (workers joined): give some back for them.
		var give []int
		for n := range held {
			if len(give) == extra {
				break
			}
			give = append(give, n)
		}
		if err := r.leases.ReleaseShards(ctx, r.me, give); err == nil {
			for _, n := range give {
				delete(held, n)
			}
		}
	}
	r.held = held
}

// poll reads the due work of the shards this worker holds that are due
// for a read, the longest waiting first, and does it: each is read batch
// after batch until it has nothing due, for r.round at most in all (then
// more: what is left is read at the next poll).
func (r *recovery) poll(ctx context.Context) recoveryReport {
	var rep recoveryReport
	start := r.now()
	var due []int
	for n, at := range r.held {
		if !at.After(start) {
			due = append(due, n)
		}
	}
	slices.SortFunc(due, func(a, b int) int {
		if c := r.held[a].Compare(r.held[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for i, n := range due {
		if ctx.Err() != nil {
			break
		}
		if i > 0 && r.now().Sub(start) >= r.round {
			rep.more = true // the others are read first at the next poll
			break
		}
		r.read(ctx, n, start, &rep)
	}
	return rep
}

// read reads a shard's due work, batch after batch, and does it, until
// the shard has nothing due or the poll begun at start has read for
// r.round; then notes when the shard is next due for a read. A batch
// whose queue checks failed (the queues' Redis is away) ends the read:
// the rest is read a poll interval later, not at once.
func (r *recovery) read(ctx context.Context, n int, start time.Time, rep *recoveryReport) {
	for {
		now := r.now()
		w, err := r.st.Due(ctx, n, now, r.batch)
		if err != nil {
			r.log.Warn("recovery: due work", zap.Int("shard", n), zap.Error(err))
			r.held[n] = now.Add(r.idle)
			return
		}
		ok := r.do(ctx, w.Entries, rep)
		if !ok {
			r.held[n] = now.Add(r.pollEvery)
			return
		}
		if len(w.Entries) < r.batch || ctx.Err() != nil {
			next := now.Add(r.idle)
			if !w.Next.IsZero() && w.Next.Before(next) {
				next = w.Next
			}
			r.held[n] = next
			return
		}
		// More is due. Every entry read is due again later than now (Due
		// moves it on), so the next batch is new work.
		if r.now().Sub(start) >= r.round {
			r.held[n] = now // read on at the next poll
			rep.more = true
			return
		}
	}
}

// do does a batch of due work; not ok: some of its queue checks or
// queueings failed.
func (r *recovery) do(ctx context.Context, entries []store.DueEntry, rep *recoveryReport) (ok bool) {
	var checks, expires []store.DueEntry
	for _, e := range entries {
		switch e.Kind {
		case store.DueCheck:
			checks = append(checks, e)
		case store.DueExpire:
			expires = append(expires, e)
		case store.DueHook:
			r.hooks.Notify(ctx, e.AccountID, e.TaskID, e.Event, 0)
			rep.hooked++
		}
	}
	queued, ok := r.check(ctx, checks)
	rep.queued += queued
	rep.expired += r.expire(ctx, expires)
	return ok
}

// check makes sure the job of every admitted task still pending, and of
// every task processing, is on its queue, and queues the missing ones
// from the job payload the task keeps (a processing task's run is started
// again by the worker that takes the job: no crash if its holder let go
// or is alive, a crash if it died).
// Queueing a job that is queued already is a no-op, so a task is never
// queued twice. Not ok: the checks, or some queueings, failed.
func (r *recovery) check(ctx context.Context, checks []store.DueEntry) (queued int, ok bool) {
	if len(checks) == 0 {
		return 0, true
	}
	runs := make([]jobs.Run, len(checks))
	for i, c := range checks {
		run := c.Run
		if run == "" {
			run = jobs.RunID(c.TaskID, 0)
		}
		runs[i] = jobs.Run{Queue: c.Queue, ID: run}
	}
	missing, err := r.q.Missing(ctx, runs)
	if err != nil {
		r.log.Warn("recovery: queue checks", zap.Error(err))
		return 0, false
	}
	// The missing ones are queued dueQueueing at a time.
	var n, failed atomic.Int64
	var wg sync.WaitGroup
	slots := make(chan struct{}, dueQueueing)
	for i, c := range checks {
		if !missing[i] {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			log := r.log.With(zap.String("task_id", c.TaskID), zap.String("account_id", c.AccountID))
			// A task that started or ended since the check was read has no
			// job to lose; queueing its run again at worst costs a pickup
			// that finds the task started or final and drops the job.
			ref := jobs.Ref{AccountID: c.AccountID, TaskID: c.TaskID, Queue: c.Queue, Deadline: jobs.RunDeadline(c.Deadline)}
			added, err := r.q.EnsureGenerateImage(ctx, ref, runs[i].ID)
			if err != nil {
				log.Warn("recovery: could not queue a task's job; will try again", zap.Error(err))
				failed.Add(1)
				return
			}
			if added {
				n.Add(1)
				log.Warn("recovery: queued the job of a pending task that had none (its gateway stopped before queueing it, a failover lost it, or it was deleted)")
			}
		}()
	}
	wg.Wait()
	return int(n.Load()), failed.Load() == 0
}

// expire fails and refunds, in one batch, tasks past their deadline that
// no run will finish (their job expired in the queue, every run failed to
// record an outcome, or they waited parked all along), queues their
// webhook events, and the jobs of the tasks their places admitted, in one
// call: a parked task the batch admitted and then failed itself is not
// queued.
func (r *recovery) expire(ctx context.Context, expires []store.DueEntry) int {
	if len(expires) == 0 {
		return 0
	}
	refs := make([]store.TaskRef, len(expires))
	for i, e := range expires {
		refs[i] = store.TaskRef{AccountID: e.AccountID, TaskID: e.TaskID}
	}
	changes, errs := r.st.ExpireAll(ctx, refs)
	n := 0
	var admitted []task.Admitted
	ended := map[store.TaskRef]bool{}
	for i, c := range changes {
		ref := refs[i]
		if errs[i] != nil {
			r.log.Warn("recovery: could not expire a task; will try again", zap.String("task_id", ref.TaskID), zap.Error(errs[i]))
			continue
		}
		if c.Outcome != task.Applied {
			continue
		}
		n++
		ended[ref] = true
		admitted = append(admitted, c.Admitted...)
		log := r.log.With(zap.String("task_id", ref.TaskID), zap.String("account_id", ref.AccountID))
		log.Warn("task failed: past its deadline with no worker on it; refunded")
		recordFailed(ctx, r.metrics, r.hooks, ref.AccountID, ref.TaskID, "", c, task.Timeout)
	}
	admitted = slices.DeleteFunc(admitted, func(a task.Admitted) bool {
		return ended[store.TaskRef{AccountID: a.AccountID, TaskID: a.TaskID}]
	})
	admit(ctx, r.q, r.log, admitted)
	return n
}
