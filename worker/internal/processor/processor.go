// Package processor runs one image task: it moves the task to processing,
// fetches any source images, generates, stores the results and completes the
// task, or fails it with a stable error code. It knows nothing of Asynq: the
// worker's adapter decodes the job and says which attempt this is.
package processor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// Store changes task state.
type Store interface {
	StartTaskWith(ctx context.Context, accountID, taskID, run string, p store.Place) (store.Outcome, error)
	ReleaseTask(ctx context.Context, accountID, taskID, run string) error
	SetProgress(ctx context.Context, accountID, taskID, run string, pct int) error
	CompleteTask(ctx context.Context, accountID, taskID, run string, results []task.Result) (store.Outcome, time.Time, error)
	FailTask(ctx context.Context, accountID, taskID, run string, f task.Failure) (store.Outcome, error)
	// Task reads a task back: what a failed task's refund was.
	Task(ctx context.Context, accountID, taskID string) (*task.Task, error)
	// Dequeued counts tasks out of their queue, for queue positions.
	Dequeued(ctx context.Context, queue string, n int) error
}

// Stages of a task, timed by Metrics.Stage.
const (
	StageFetch    = "fetch"
	StageGenerate = "generate"
	StageStore    = "store"
)

// Metrics records what the processor does.
type Metrics interface {
	// QueueWait: how long a task waited from its creation to its first run.
	QueueWait(model string, d time.Duration)
	// Stage: how long a stage took, when it succeeded.
	Stage(model, stage string, d time.Duration)
	// Finished: a task completed (code "") or failed, this run ending it.
	Finished(model, outcome, code string)
	// Retried: a generation tried again, or a job handed back to its queue.
	Retried(model string)
	// Running counts a task as running until done is called.
	Running(model string) (done func())
	// Refunded: the credits a failed task's account got back.
	Refunded(model string, credits int64)
}

// Outcomes for Metrics.Finished.
const (
	Completed = "completed"
	Failed    = "failed"
	// Canceled: the task's owner canceled it while this run had it.
	Canceled = "canceled"
)

// Hooks delivers a task's webhook events: Notify queues the delivery of
// event (a task.Event*; seq tells apart the progress events of one task,
// 0 for the others). It must not hold the run for long: a delivery it
// could not queue is queued later from the store's outbox (final events)
// or dropped (progress).
type Hooks interface {
	Notify(ctx context.Context, accountID, taskID, event string, seq int)
}

type noHooks struct{}

func (noHooks) Notify(context.Context, string, string, string, int) {}

type noMetrics struct{}

func (noMetrics) QueueWait(string, time.Duration)     {}
func (noMetrics) Stage(string, string, time.Duration) {}
func (noMetrics) Finished(string, string, string)     {}
func (noMetrics) Retried(string)                      {}
func (noMetrics) Running(string) func()               { return func() {} }
func (noMetrics) Refunded(string, int64)              {}

// Blobs stores result images.
type Blobs interface {
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	Touch(ctx context.Context, key string) (bool, error)
}

// Fetcher fetches source images.
type Fetcher interface {
	Fetch(ctx context.Context, urls []string) ([]imagegen.Source, error)
}

// Processor runs tasks.
type Processor struct {
	store   Store
	blobs   Blobs
	gen     imagegen.Generator
	fetch   Fetcher
	catalog *catalog.Catalog
	log     *zap.Logger
	retry   Retry
	metrics Metrics
	// quota spaces and bounds the upstream calls of all workers together.
	quota Quota
	hooks Hooks
	// maxRunning is the most generations of one account running at once
	// across every worker (0: no limit).
	maxRunning int
	now        func() time.Time
	// touched remembers blobs this worker refreshed lately, so a blob
	// produced again and again is touched once in a while, not each time.
	touched *lru.Cache[string, time.Time]
}

// New returns a processor.
func New(store Store, blobs Blobs, gen imagegen.Generator, fetch Fetcher, cat *catalog.Catalog, log *zap.Logger, retry Retry) *Processor {
	if retry.MaxAttempts < 1 {
		retry.MaxAttempts = 1
	}
	touched, _ := lru.New[string, time.Time](1024)
	return &Processor{store: store, blobs: blobs, gen: gen, fetch: fetch, catalog: cat, log: log, retry: retry, metrics: noMetrics{}, hooks: noHooks{}, now: time.Now, touched: touched}
}

// WithHooks makes the processor deliver tasks' webhook events through h,
// and returns p.
func (p *Processor) WithHooks(h Hooks) *Processor {
	p.hooks = h
	return p
}

// notify delivers an event of the job's task if its callback wants it.
func (p *Processor) notify(ctx context.Context, job jobs.GenerateImage, event string, seq int) {
	if job.Input.Callback.Wants(event) {
		p.hooks.Notify(context.WithoutCancel(ctx), job.AccountID, job.TaskID, event, seq)
	}
}

// WithMaxRunning lets one account run at most n generations at once across
// every worker (0: no limit), and returns p.
func (p *Processor) WithMaxRunning(n int) *Processor {
	p.maxRunning = n
	return p
}

// Quota is the upstream quota all workers share (package quota): a call
// waits for a slot, and a 429 slows every worker's calls to the model.
type Quota interface {
	Acquire(ctx context.Context, model string) (release func(), err error)
	Throttled(ctx context.Context, model string, retryAfter time.Duration) error
}

// WithQuota makes every generation call wait for q, and returns p.
func (p *Processor) WithQuota(q Quota) *Processor {
	p.quota = q
	return p
}

// ErrAccountBusy is what Process returns for a job whose account has its
// share of the workers running already: the job goes back to its queue for
// a moment, which is no failure and uses none of its retries.
var ErrAccountBusy = errors.New("the account has its share of generations running; the job waits for a place")

// WithMetrics makes the processor record what it does on m.
func (p *Processor) WithMetrics(m Metrics) *Processor {
	p.metrics = m
	return p
}

// Attempt says which run of a job this is: Run is its Asynq TaskID
// (jobs.RunID: the task id, or a later run's after a worker died), Retry
// counts its earlier failed attempts, MaxRetry is how many retries it has in
// all.
type Attempt struct {
	Retry, MaxRetry int
	Run             string
}

// Last reports whether no retry follows this attempt.
func (a Attempt) Last() bool { return a.Retry >= a.MaxRetry }

// touchEvery is how often a reused blob is refreshed: far more often than the
// janitor's 24-hour retention needs.
const touchEvery = 10 * time.Minute

// Progress milestones, in percent, and the least time between two writes.
const (
	progressEvery     = 200 * time.Millisecond
	progressFetched   = 10
	progressGenerated = 90
	progressStored    = 95
)

// releaseTask records that run let go of its task alive (ReleaseTask), so
// that its next start is not counted as a crash.
func (p *Processor) releaseTask(ctx context.Context, acct, id, run string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := p.store.ReleaseTask(rctx, acct, id, run); err != nil {
		logging.From(ctx).Warn("could not release the task", zap.Error(err))
	}
}

// Process runs a job. It returns nil when the job is finished with, whatever
// the task's outcome; an error means "run it again": a transient failure with
// retries left, or a worker shutting down. Every line it logs, and every line
// logged through its context, carries the task id, account and attempt.
func (p *Processor) Process(ctx context.Context, job jobs.GenerateImage, at Attempt) error {
	acct, id, run := job.AccountID, job.TaskID, at.Run
	if run == "" {
		run = jobs.RunID(id, 0)
	}
	ctx = logging.WithLogger(ctx, p.log, zap.String("task_id", id), zap.String("account_id", acct), zap.String("run", run), zap.Int("attempt", at.Retry+1))
	log := logging.From(ctx)
	model := job.Input.Model.ID

	// A fair share: an account runs at most maxRunning generations at once
	// on all workers together, so one account's slow tasks (a source that
	// drips, a long prompt queue) cannot hold every worker while others
	// wait. The place is taken in the start's own step (no extra round
	// trip), given back by the completion, the failure or the hand-back;
	// a job that finds none changes nothing and waits its turn on the
	// queue.
	place := store.Place{Limit: p.maxRunning, Until: job.Deadline}
	if place.Until.IsZero() {
		place.Until = p.now().Add(time.Hour)
	}
	place.Until = place.Until.Add(time.Minute)
	if at.Last() {
		// No retry is left to wait with: Asynq would archive a job that
		// waited for a place, and its task would hang until its deadline.
		// The last try runs past the account's share.
		place.Limit = 0
	}
	outcome, err := p.store.StartTaskWith(ctx, acct, id, run, place)
	if err != nil {
		log.Warn("could not mark the task processing", zap.Error(err))
		// The start may have been applied all the same (its reply lost,
		// or Redis applied it but its replicas did not confirm it): this
		// run hands the task back alive, so that its retry is no crash.
		p.releaseTask(ctx, acct, id, run)
		return err
	}
	switch outcome {
	case store.Busy:
		log.Debug("the account has its share running; the job waits")
		return ErrAccountBusy
	case store.Missing:
		log.Warn("task record is gone (expired or never written); dropping the job")
		return nil
	case store.AlreadyFinal:
		log.Info("task already finished; dropping the duplicate job")
		return nil
	case store.Superseded:
		log.Info("another run owns this task (this one's worker was taken for dead); dropping the job")
		return nil
	case store.Poisoned:
		log.Warn("task failed: it stopped its worker twice, and was refunded instead of run again", zap.String("code", string(task.WorkerCrashed)))
		p.failed(ctx, acct, id, model, string(task.WorkerCrashed))
		p.notify(ctx, job, task.EventFailed, 0)
		return nil
	}
	// Handing the task back to the queue alive (a retry, a shutdown) is no
	// crash: say so, so that its next start is not counted as one.
	release := func() { p.releaseTask(ctx, acct, id, run) }
	log.Debug("task processing", zap.String("model", model))
	started := p.now()
	// The first start of the first run: what came before was the queue. A
	// retry's or a later run's wait would count earlier runs too.
	if at.Retry == 0 && run == jobs.RunID(id, 0) && !job.CreateTime.IsZero() {
		p.metrics.QueueWait(model, started.Sub(job.CreateTime))
		// The tasks behind it move up (queue positions). Off the run's
		// path: the generation does not wait for it.
		go func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := p.store.Dequeued(dctx, jobs.Queue(job.Input.Model.Tier), 1); err != nil {
				log.Debug("could not count the task out of its queue", zap.Error(err))
			}
		}()
	}
	defer p.metrics.Running(model)()
	// handBack counts a job handed back to its queue to run again.
	handBack := func() {
		if !at.Last() {
			p.metrics.Retried(model)
		}
	}

	// Progress is written at most every progressEvery: a task that takes
	// a long time shows it rising, a fast one costs no extra writes.
	var mu sync.Mutex
	lastWrite := started
	progress := func(pct int) {
		mu.Lock()
		now := p.now()
		if now.Sub(lastWrite) < progressEvery {
			mu.Unlock()
			return
		}
		lastWrite = now
		mu.Unlock()
		if err := p.store.SetProgress(ctx, acct, id, run, pct); err != nil {
			if ctx.Err() == nil {
				log.Warn("could not record progress", zap.Int("progress", pct), zap.Error(err))
			}
			return
		}
		p.notify(ctx, job, task.EventProgress, pct)
	}

	results, err := p.run(ctx, job, progress)
	if err == nil {
		o, _, err := p.store.CompleteTask(context.WithoutCancel(ctx), acct, id, run, results)
		if err != nil {
			log.Error("could not mark the task completed", zap.Error(err))
			release()
			handBack()
			return err
		}
		if o == store.Applied {
			p.metrics.Finished(model, Completed, "")
			p.notify(ctx, job, task.EventCompleted, 0)
		}
		log.Info("task completed", zap.Int("results", len(results)), zap.Duration("took", p.now().Sub(started)), zap.Stringer("outcome", o))
		return nil
	}

	// Canceled by its owner (the gateway's cancel stops the run through
	// Asynq): the task is final already, and refunded as the cancel said.
	if errors.Is(ctx.Err(), context.Canceled) && p.canceled(ctx, acct, id) {
		log.Info("task canceled by its owner; the run stops")
		p.metrics.Finished(model, Canceled, "")
		return nil
	}
	// Shutting down: Asynq puts the job back; leave the task processing.
	if errors.Is(ctx.Err(), context.Canceled) {
		log.Info("task interrupted by shutdown; it will run again")
		release()
		return err
	}
	f, retryable := classify(ctx, err)
	if retryable && !at.Last() {
		log.Warn("task attempt failed; retrying", zap.String("code", f.Code), zap.Error(err))
		release()
		handBack()
		return err
	}
	o, ferr := p.store.FailTask(context.WithoutCancel(ctx), acct, id, run, f)
	if ferr != nil {
		log.Error("could not mark the task failed", zap.Error(ferr), zap.NamedError("cause", err))
		release()
		handBack()
		return ferr
	}
	if o == store.Applied {
		p.failed(ctx, acct, id, model, f.Code)
		p.notify(ctx, job, task.EventFailed, 0)
	}
	log.Warn("task failed", zap.String("code", f.Code), zap.String("message", f.Message), zap.Error(err), zap.Stringer("outcome", o))
	return nil
}

// failed records a task this run failed (or found poisoned), and its
// refund, which the store made with the failure: the task's record says
// how much it was.
func (p *Processor) failed(ctx context.Context, acct, id, model, code string) {
	p.metrics.Finished(model, Failed, code)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	t, err := p.store.Task(rctx, acct, id)
	if err != nil {
		logging.From(ctx).Debug("could not read the failed task back; its refund is not counted in the metrics", zap.Error(err))
		return
	}
	if t.Refunded && t.Price > 0 {
		p.metrics.Refunded(model, t.Price)
	}
}

// canceled reports whether the task's record says it was canceled: what
// tells a run stopped by its owner from one stopped by a shutdown.
func (p *Processor) canceled(ctx context.Context, acct, id string) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	t, err := p.store.Task(rctx, acct, id)
	return err == nil && t.Status == task.Canceled
}

// classify turns an error into the failure a user sees, and whether another
// attempt could succeed. Only the task's own deadline is a timeout: a step
// cut by a time limit of its own (a source fetch, one call to the model)
// says so in its own code, source_fetch_failed or upstream_unavailable.
func classify(ctx context.Context, err error) (task.Failure, bool) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return task.Failure{Code: string(task.Timeout), Message: "the task did not finish within its deadline"}, false
	}
	if e, ok := apperr.As(err); ok {
		return task.Failure{Code: string(e.Code), Message: apperr.MessageOf(e)}, e.Retryable
	}
	return task.Failure{Code: string(apperr.Internal), Message: "the image could not be generated because of an internal error"}, true
}

func (p *Processor) run(ctx context.Context, job jobs.GenerateImage, progress func(int)) ([]task.Result, error) {
	in := job.Input
	model, ok := p.catalog.Lookup(in.Model.ID)
	if !ok {
		// Queued under another EASEL_MODEL_FAMILY, or a model this worker
		// does not know: nothing to retry.
		return nil, apperr.Errorf(task.GenerationFailed, "model %s is not served by this deployment", in.Model.ID)
	}
	if in.Model.Tier != model.Tier {
		return nil, apperr.Errorf(task.GenerationFailed, "model %s does not match its queue", in.Model.ID)
	}
	req := imagegen.Request{
		TaskID:      job.TaskID,
		Model:       model,
		Prompt:      in.Prompt,
		AspectRatio: in.AspectRatio,
		ImageSize:   in.ImageSize,
	}
	if len(in.ImageURLs) > 0 {
		start := p.now()
		sources, err := p.fetch.Fetch(ctx, in.ImageURLs)
		if err != nil {
			return nil, err
		}
		p.metrics.Stage(model.ID, StageFetch, p.now().Sub(start))
		req.Sources = sources
		req.AspectRatio = in.OutputAspectRatio(sources[0].Width, sources[0].Height)
	}
	size, ok := model.Dimensions(req.AspectRatio, req.ImageSize)
	if !ok {
		return nil, apperr.Errorf(task.GenerationFailed, "model %s cannot make %s images at %s", model.ID, req.AspectRatio, req.ImageSize)
	}
	req.Size = size
	progress(progressFetched)

	span := progressGenerated - progressFetched
	start := p.now()
	images, err := p.generate(ctx, req, func(pct int) {
		progress(progressFetched + min(max(pct, 0), 99)*span/100)
	})
	if err != nil {
		return nil, err
	}
	if len(images) == 0 {
		return nil, apperr.New(task.GenerationFailed, "the model returned no image")
	}
	p.metrics.Stage(model.ID, StageGenerate, p.now().Sub(start))
	progress(progressGenerated)

	start = p.now()
	results := make([]task.Result, 0, len(images))
	for _, img := range images {
		key, err := p.keep(ctx, img)
		if err != nil {
			return nil, apperr.Transient(err, apperr.Internal, "the result could not be stored")
		}
		results = append(results, task.Result{Key: key, ContentType: img.MIME, Size: int64(len(img.Data)), Width: img.Width, Height: img.Height})
	}
	p.metrics.Stage(model.ID, StageStore, p.now().Sub(start))
	progress(progressStored)
	return results, nil
}

// generate runs the generator, retrying retryable errors within the retry
// policy. Once the retries are spent the last error is final: the task fails
// (Asynq's own retries are for crashes and storage errors, not for these).
func (p *Processor) generate(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error) {
	log := logging.From(ctx)
	attempts := 0
	// The retry budget (MaxElapsed) counts the calls and the waits between
	// them, not the time spent waiting for the shared upstream quota: a task
	// that queued two minutes for its turn still gets its retries.
	start := p.now()
	var queued time.Duration
	var last error
	images, err := backoff.Retry(ctx, func() ([]imagegen.Image, error) {
		if attempts > 0 && p.now().Sub(start)-queued > p.retry.MaxElapsed {
			return nil, backoff.Permanent(last)
		}
		attempts++
		imgs, waited, err := p.callUpstream(ctx, req, progress)
		queued += waited
		last = err
		if err != nil && (!apperr.IsRetryable(err) || ctx.Err() != nil) {
			return nil, backoff.Permanent(err)
		}
		return imgs, err
	},
		backoff.WithBackOff(p.retry.backOff()),
		backoff.WithMaxTries(uint(p.retry.MaxAttempts)),
		backoff.WithMaxElapsedTime(0), // the budget above
		backoff.WithNotify(func(err error, wait time.Duration) {
			log.Warn("generation failed; retrying", zap.Int("attempt", attempts), zap.Duration("wait", wait), zap.Error(err))
			p.metrics.Retried(req.Model.ID)
		}),
	)
	if err != nil && apperr.IsRetryable(err) && ctx.Err() == nil {
		e, _ := apperr.As(err)
		return nil, &apperr.Error{Code: e.Code, Err: e,
			Message: fmt.Sprintf("%s (gave up after %d attempts)", e.Message, attempts)}
	}
	return images, err
}

// callUpstream makes one generation call within the shared upstream quota,
// and says how long it waited for the quota.
func (p *Processor) callUpstream(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, time.Duration, error) {
	if p.quota == nil {
		imgs, err := p.gen.Generate(ctx, req, progress)
		return imgs, 0, err
	}
	asked := p.now()
	release, err := p.quota.Acquire(ctx, req.Model.ID)
	waited := p.now().Sub(asked)
	if err != nil {
		return nil, waited, err // the task's deadline, or Redis unavailable: retryable
	}
	imgs, err := func() ([]imagegen.Image, error) {
		defer release() // a panicking generator must not keep its slot
		return p.gen.Generate(ctx, req, progress)
	}()
	if errors.Is(err, imagegen.ErrThrottled) {
		if terr := p.quota.Throttled(ctx, req.Model.ID, 0); terr != nil {
			logging.From(ctx).Warn("could not slow the other workers down after a 429", zap.Error(terr))
		}
	}
	return imgs, waited, err
}

// keep writes an image under its content hash (blob.ResultKey): identical
// images (a deterministic generator asked the same thing twice) are stored
// once, and the janitor keeps a blob as long as any task produced it within
// the retention period.
func (p *Processor) keep(ctx context.Context, img imagegen.Image) (string, error) {
	sum := img.SHA256
	if sum == nil {
		s := sha256.Sum256(img.Data)
		sum = &s
	}
	now := p.now()
	key := blob.ResultKey(now, *sum, img.MIME)
	if last, ok := p.touched.Get(key); ok && now.Sub(last) < touchEvery {
		return key, nil
	}
	exists, err := p.blobs.Touch(ctx, key)
	if err != nil {
		return "", err
	}
	if !exists {
		if _, err := p.blobs.Put(ctx, key, bytes.NewReader(img.Data)); err != nil {
			return "", err
		}
	}
	p.touched.Add(key, now)
	return key, nil
}
