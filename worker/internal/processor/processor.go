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
	"runtime"
	"time"

	"github.com/cenkalti/backoff/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/worker/imagegen"
)

// Store changes task state (store.Tasks). Each change says what it did:
// the outcome, the credits it refunded, whether a webhook event of the
// task is due.
type Store interface {
	Start(ctx context.Context, accountID, taskID, run string) (store.Started, error)
	Release(ctx context.Context, accountID, taskID, run string) error
	Progress(ctx context.Context, accountID, taskID, run string, pct int) (hook bool, err error)
	// CompleteMade completes a task asked for asked images with those it
	// made, refunding the others.
	CompleteMade(ctx context.Context, accountID, taskID, run string, results []task.Result, asked int) (store.Change, error)
	Fail(ctx context.Context, accountID, taskID, run string, f task.Failure) (store.Change, error)
	// Get reads a task back: whether a run stopped by its context was
	// canceled by its owner.
	Get(ctx context.Context, accountID, taskID string) (*task.Task, error)
}

// Stages of a task, timed by Metrics.Stage.
const (
	StageFetch    = "fetch"
	StageGenerate = "generate"
	StageStore    = "store"
)

// Metrics records what the processor does.
type Metrics interface {
	// QueueWait: how long a task waited from its creation to its first
	// run (ctx: the run's, whose trace an observation may name).
	QueueWait(ctx context.Context, model string, d time.Duration)
	// Stage: how long a stage took, when it succeeded.
	Stage(ctx context.Context, model, stage string, d time.Duration)
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

// Hooks queues the delivery of a task's webhook events: the store decides
// which events a task's callback wants, and the processor queues those it
// says are due. Notify must not hold the run for long: a final event it
// could not queue stays in the store's outbox for the recovery, a progress
// event is dropped.
type Hooks interface {
	Notify(ctx context.Context, accountID, taskID, event string, seq int)
}

type noHooks struct{}

func (noHooks) Notify(context.Context, string, string, string, int) {}

type noMetrics struct{}

func (noMetrics) QueueWait(context.Context, string, time.Duration)     {}
func (noMetrics) Stage(context.Context, string, string, time.Duration) {}
func (noMetrics) Finished(string, string, string)                      {}
func (noMetrics) Retried(string)                                       {}
func (noMetrics) Running(string) func()                                { return func() {} }
func (noMetrics) Refunded(string, int64)                               {}

// Blobs stores result images.
type Blobs interface {
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	Touch(ctx context.Context, key string) (bool, error)
}

// Fetcher fetches source images.
type Fetcher interface {
	Fetch(ctx context.Context, urls []string) ([]imagegen.Source, error)
}

// Admitter queues the jobs of tasks a change admitted into their
// account's window (jobs.Enqueuer): the end of a task frees a place.
type Admitter interface {
	EnqueueAdmitted(ctx context.Context, admitted []task.Admitted) error
}

// Quota is the upstream quota all workers share (package quota): a call
// waits for a slot, and a 429 slows every worker's calls to the model.
type Quota interface {
	Acquire(ctx context.Context, model string) (release func(), err error)
	Throttled(ctx context.Context, model string, retryAfter time.Duration) error
}

// Options are a processor's dependencies beyond what it cannot work
// without; zero fields do nothing.
type Options struct {
	Retry   Retry
	Metrics Metrics
	Hooks   Hooks
	// Quota spaces and bounds the upstream calls of all workers together
	// (nil: none).
	Quota Quota
	// Admitter queues the tasks the end of one admits (nil: their queue
	// checks do, seconds later).
	Admitter Admitter
	// Pacing says which progress reports are written (zero fields: the
	// defaults).
	Pacing Pacing
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Tracing traces the runs of traced tasks (nil or off: none), in the
	// trace of their create (the job's trace context, or else the task
	// record's).
	Tracing *tracing.Tracing
	// Worker names this worker in its runs' spans (easel.worker).
	Worker string
	// Upstream, when set, names the generator in an "upstream.call" span
	// around each call to it; "" when the generator traces its calls
	// itself (the pool, one span for each upstream it tries).
	Upstream string
}

// Processor runs tasks.
type Processor struct {
	Options
	store   Store
	blobs   Blobs
	gen     imagegen.Generator
	fetch   Fetcher
	catalog *catalog.Catalog
	log     *zap.Logger
	// touched remembers blobs this worker refreshed lately, so a blob
	// produced again and again is touched once in a while, not each time.
	touched *lru.Cache[string, time.Time]
	// encoder puts results in the format asked, GOMAXPROCS at once.
	encoder *encoder
	// tracer starts the runs' spans; nil when tracing is off.
	tracer trace.Tracer
}

// New returns a processor.
func New(store Store, blobs Blobs, gen imagegen.Generator, fetch Fetcher, cat *catalog.Catalog, log *zap.Logger, o Options) *Processor {
	if o.Retry.MaxAttempts < 1 {
		o.Retry.MaxAttempts = 1
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.Hooks == nil {
		o.Hooks = noHooks{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Pacing = o.Pacing.withDefaults()
	touched, _ := lru.New[string, time.Time](1024)
	p := &Processor{Options: o, store: store, blobs: blobs, gen: gen, fetch: fetch, catalog: cat, log: log, touched: touched,
		encoder: newEncoder(runtime.GOMAXPROCS(0), log)}
	if o.Tracing != nil && o.Tracing.Enabled() {
		p.tracer = o.Tracing.Provider().Tracer(TracerName)
	}
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

// Progress marks, in percent: the generator's reports are put between
// fetched and generated.
const (
	progressFetched   = 10
	progressGenerated = 90
	progressStored    = 95
)

// Process runs a job: it starts the task, runs the generation, and
// finishes the task with its outcome. It returns nil when the job is
// finished with, whatever the task's outcome; an error means "run it
// again": a transient failure with retries left, or a worker shutting
// down. Every line it logs, and every line logged through its context,
// carries the task id, account and attempt, and, when the run is traced,
// its trace_id and span_id.
func (p *Processor) Process(ctx context.Context, ref jobs.Ref, at Attempt) error {
	r, job, err := p.start(ctx, ref, at)
	if r == nil {
		return err
	}
	defer p.Metrics.Running(r.model)()
	results, err := p.run(r.ctx, job, r.progress)
	ferr := r.finish(results, err)
	endSpan(r.span, err)
	return ferr
}

// running is a task this run started: what its progress and its finish
// need.
type running struct {
	p          *Processor
	ctx        context.Context
	log        *zap.Logger
	acct, id   string
	run, model string
	at         Attempt
	started    time.Time
	pace       pacer
	// asked is how many images the task was asked for.
	asked int
	// span is the run's (task.run), within the create's trace: a no-op
	// span when the task or the worker is not traced.
	span trace.Span
}

// start starts the task for this run, and returns what it runs: nil when
// there is nothing to run (with the error to return to the queue, if any).
func (p *Processor) start(ctx context.Context, ref jobs.Ref, at Attempt) (*running, jobs.GenerateImage, error) {
	acct, id, run := ref.AccountID, ref.TaskID, at.Run
	if run == "" {
		run = jobs.RunID(id, 0)
	}
	dequeued := p.Now()
	ctx = logging.WithLogger(ctx, p.log, zap.String("task_id", id), zap.String("account_id", acct), zap.String("run", run), zap.Int("attempt", at.Retry+1))
	// A run whose job carries the create's trace context is traced from
	// here (the task's start in it); another (queued by a promotion or a
	// recovery) once the start has read it from the task's record.
	span, create := noSpan, ctx
	if p.tracer != nil && ref.TraceParent != "" {
		create = tracing.Extract(ctx, ref.TraceParent, ref.TraceState)
		ctx, span = p.startRun(create, id, run, dequeued)
		logging.AddFields(ctx, tracing.Fields(ctx)...)
	}
	r := &running{p: p, ctx: ctx, log: logging.From(ctx), acct: acct, id: id, run: run, at: at, pace: pacer{Pacing: p.Pacing}, span: span}
	var job jobs.GenerateImage

	// The task's place among its account's share of the workers was taken
	// when it was admitted: a job is queued only for a task that holds one.
	st, err := p.store.Start(ctx, acct, id, run)
	if err != nil {
		r.log.Warn("could not mark the task processing", zap.Error(err))
		// The start may have been applied all the same (its reply lost,
		// or Redis applied it but its replicas did not confirm it): this
		// run hands the task back alive, so that its retry is no crash.
		r.release()
		endSpan(r.span, err)
		return nil, job, err
	}
	c := st.Change
	r.model = c.Model
	if p.tracer != nil && ref.TraceParent == "" && st.TraceParent != "" && c.Outcome == task.Applied {
		create = tracing.Extract(ctx, st.TraceParent, "")
		r.ctx, r.span = p.startRun(create, id, run, dequeued)
		logging.AddFields(r.ctx, tracing.Fields(r.ctx)...)
		r.log = logging.From(r.ctx)
	}
	if c.Outcome != task.Applied {
		r.span.SetAttributes(AttrOutcome.String(c.Outcome.String()))
		defer r.span.End()
	}
	switch c.Outcome {
	case task.Busy:
		r.log.Warn("the task is parked (its account's share is taken); dropping a job queued for it early: it is queued when admitted")
		return nil, job, nil
	case task.Missing:
		r.log.Warn("task record is gone (expired or never written); dropping the job")
		return nil, job, nil
	case task.AlreadyFinal:
		r.log.Info("task already finished; dropping the duplicate job")
		return nil, job, nil
	case task.Superseded:
		r.log.Info("another run owns this task (this one's worker was taken for dead); dropping the job")
		return nil, job, nil
	case task.Poisoned:
		r.log.Warn("task failed: it stopped its worker twice, and was refunded instead of run again", zap.String("code", string(task.WorkerCrashed)))
		r.failed(c, string(task.WorkerCrashed))
		r.admit(c)
		return nil, job, nil
	}
	// The model is the record's; its tier, the queue's the run came on.
	in, err := jobs.DecodeInput(st.Input, catalog.Model{ID: r.model, Tier: jobs.QueueTier(ref.Queue)})
	if err != nil {
		// Nothing to run, and no retry will have more: the task fails
		// (refunded) at once rather than at its deadline.
		r.log.Error("the task's input does not decode; failing it", zap.Error(err))
		err := apperr.New(apperr.Internal, "the task could not be run")
		_ = r.finish(nil, err)
		endSpan(r.span, err)
		return nil, job, nil
	}
	job = jobs.GenerateImage{TaskID: id, AccountID: acct, Input: in, CreateTime: st.Created, Deadline: jobs.RunDeadline(st.Deadline)}
	r.asked = max(in.NumImages, 1)
	r.log.Debug("task processing", zap.String("model", r.model))
	r.started = p.Now()
	r.pace.at = r.started // the start wrote progress 0
	// The first start of the first run: what came before was the queue. A
	// retry's or a later run's wait would count earlier runs too.
	if at.Retry == 0 && run == jobs.RunID(id, 0) && !job.CreateTime.IsZero() {
		p.Metrics.QueueWait(r.ctx, r.model, r.started.Sub(job.CreateTime))
		if r.span.IsRecording() {
			p.traceQueue(create, id, job.CreateTime, st.AdmitTime, c.At)
		}
	}
	return r, job, nil
}

// progress records the task's progress, if its pacing says the report is
// to be written (a milestone: whenever it rises): a task that takes a
// long time shows it rising, in a few writes.
func (r *running) progress(pct int, milestone bool) {
	if !r.pace.due(pct, r.p.Now(), milestone) {
		return
	}
	hook, err := r.p.store.Progress(r.ctx, r.acct, r.id, r.run, pct)
	if err != nil {
		if r.ctx.Err() == nil {
			r.log.Warn("could not record progress", zap.Int("progress", pct), zap.Error(err))
		}
		return
	}
	if hook {
		r.p.Hooks.Notify(context.WithoutCancel(r.ctx), r.acct, r.id, task.EventProgress, pct)
	}
}

// finish ends the run with the generation's outcome: the task completed,
// failed, or handed back to its queue to run again.
func (r *running) finish(results []task.Result, err error) error {
	p, ctx, log := r.p, r.ctx, r.log
	if err == nil {
		c, err := p.store.CompleteMade(context.WithoutCancel(ctx), r.acct, r.id, r.run, results, max(r.asked, len(results)))
		if err != nil {
			log.Error("could not mark the task completed", zap.Error(err))
			r.handBack()
			return err
		}
		if c.Outcome == task.Applied {
			p.Metrics.Finished(r.model, Completed, "")
			if c.Refunded > 0 {
				p.Metrics.Refunded(r.model, c.Refunded)
				log.Warn("the task made fewer images than asked; the others were refunded", zap.Int("made", len(results)), zap.Int("asked", r.asked), zap.Int64("refunded", c.Refunded))
			}
			r.notifyEnd(c, task.EventCompleted)
			r.admit(c)
		}
		log.Info("task completed", zap.Int("results", len(results)), zap.Duration("took", p.Now().Sub(r.started)), zap.Stringer("outcome", c.Outcome))
		return nil
	}
	// Canceled by its owner (the gateway's cancel stops the run through
	// Asynq): the task is final already, and refunded as the cancel said.
	if errors.Is(ctx.Err(), context.Canceled) && r.canceled() {
		log.Info("task canceled by its owner; the run stops")
		p.Metrics.Finished(r.model, Canceled, "")
		return nil
	}
	// Shutting down: Asynq puts the job back; leave the task processing.
	if errors.Is(ctx.Err(), context.Canceled) {
		log.Info("task interrupted by shutdown; it will run again")
		r.release()
		return err
	}
	f, retryable := classify(ctx, err)
	if retryable && !r.at.Last() {
		log.Warn("task attempt failed; retrying", zap.String("code", f.Code), zap.Error(err))
		r.handBack()
		return err
	}
	c, ferr := p.store.Fail(context.WithoutCancel(ctx), r.acct, r.id, r.run, f)
	if ferr != nil {
		log.Error("could not mark the task failed", zap.Error(ferr), zap.NamedError("cause", err))
		r.handBack()
		return ferr
	}
	if c.Outcome == task.Applied {
		r.failed(c, f.Code)
		r.admit(c)
	}
	log.Warn("task failed", zap.String("code", f.Code), zap.String("message", f.Message), zap.Error(err), zap.Stringer("outcome", c.Outcome))
	return nil
}

// release records that the run let go of its task alive (store Release),
// so that its next start is not counted as a crash.
func (r *running) release() {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 2*time.Second)
	defer cancel()
	if err := r.p.store.Release(rctx, r.acct, r.id, r.run); err != nil {
		r.log.Warn("could not release the task", zap.Error(err))
	}
}

// handBack releases the task for its job to run again, counted as a retry
// when one follows.
func (r *running) handBack() {
	r.release()
	if !r.at.Last() {
		r.p.Metrics.Retried(r.model)
	}
}

// failed records a task this run failed (or found poisoned), its refund,
// and queues its webhook event if the store said one is due.
func (r *running) failed(c store.Change, code string) {
	r.p.Metrics.Finished(r.model, Failed, code)
	if c.Refunded > 0 {
		r.p.Metrics.Refunded(r.model, c.Refunded)
	}
	r.notifyEnd(c, task.EventFailed)
}

// notifyEnd queues the task's final webhook event, if the change put one
// in the outbox.
func (r *running) notifyEnd(c store.Change, event string) {
	if c.Hooked {
		r.p.Hooks.Notify(context.WithoutCancel(r.ctx), r.acct, r.id, event, 0)
	}
}

// admit queues the tasks of the account the change admitted into the
// place it freed.
func (r *running) admit(c store.Change) {
	if len(c.Admitted) == 0 || r.p.Admitter == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 2*time.Second)
	defer cancel()
	if err := r.p.Admitter.EnqueueAdmitted(ctx, c.Admitted); err != nil {
		r.log.Warn("could not queue the tasks this one's end admitted; their queue checks will", zap.Int("tasks", len(c.Admitted)), zap.Error(err))
	}
}

// canceled reports whether the task's record says it was canceled: what
// tells a run stopped by its owner from one stopped by a shutdown.
func (r *running) canceled() bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 2*time.Second)
	defer cancel()
	t, err := r.p.store.Get(rctx, r.acct, r.id)
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

// run runs the generation: progress receives every report of it, the
// milestones said.
func (p *Processor) run(ctx context.Context, job jobs.GenerateImage, progress func(pct int, milestone bool)) ([]task.Result, error) {
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
	p.encoder.prepare(in.OutputFormat, in.OutputQuality)
	req := imagegen.Request{
		TaskID:      job.TaskID,
		Model:       model,
		Prompt:      in.Prompt,
		AspectRatio: in.AspectRatio,
		ImageSize:   in.ImageSize,
	}
	if len(in.ImageURLs) > 0 {
		start := p.Now()
		sources, err := p.fetch.Fetch(ctx, in.ImageURLs)
		if err != nil {
			return nil, err
		}
		p.Metrics.Stage(ctx, model.ID, StageFetch, p.Now().Sub(start))
		req.Sources = sources
		req.AspectRatio = in.OutputAspectRatio(sources[0].Width, sources[0].Height)
	}
	size, ok := model.Dimensions(req.AspectRatio, req.ImageSize)
	if !ok {
		return nil, apperr.Errorf(task.GenerationFailed, "model %s cannot make %s images at %s", model.ID, req.AspectRatio, req.ImageSize)
	}
	req.Size = size
	progress(progressFetched, true)

	// One generation an image, each with its own retries, each its share
	// of the progress. An image that cannot be made is left out (the
	// store refunds it when the task completes); the task fails only if
	// none is made, or the task itself ends (its deadline, a cancel, a
	// shutdown).
	n := max(in.NumImages, 1)
	span := progressGenerated - progressFetched
	start := p.Now()
	images := make([]imagegen.Image, 0, n)
	var last error
	for i := range n {
		req.Variant = i
		from := progressFetched + i*span/n
		imgs, err := p.generate(ctx, req, func(pct int) {
			progress(from+min(max(pct, 0), 99)*span/(100*n), false)
		})
		var img imagegen.Image
		if err == nil && len(imgs) == 0 {
			err = apperr.New(task.GenerationFailed, "the model returned no image")
		}
		if err == nil {
			// One image a generation (a model that answers more than one
			// gives the task no more than it asked), in the format asked.
			img, err = p.encoder.encode(ctx, imgs[0], in.OutputFormat, in.OutputQuality)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, err
		case err != nil:
			logging.From(ctx).Warn("an image of the task could not be made", zap.Int("image", i+1), zap.Int("of", n), zap.Error(err))
			last = err
		default:
			images = append(images, img)
		}
		if i+1 < n {
			progress(progressFetched+(i+1)*span/n, true)
		}
	}
	if len(images) == 0 {
		return nil, last
	}
	p.Metrics.Stage(ctx, model.ID, StageGenerate, p.Now().Sub(start))
	progress(progressGenerated, true)

	start = p.Now()
	results, err := p.storeResults(ctx, images)
	if err != nil {
		return nil, err
	}
	p.Metrics.Stage(ctx, model.ID, StageStore, p.Now().Sub(start))
	progress(progressStored, false)
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
	start := p.Now()
	var queued time.Duration
	var last error
	images, err := backoff.Retry(ctx, func() ([]imagegen.Image, error) {
		if attempts > 0 && p.Now().Sub(start)-queued > p.Retry.MaxElapsed {
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
		backoff.WithBackOff(p.Retry.backOff()),
		backoff.WithMaxTries(uint(p.Retry.MaxAttempts)),
		backoff.WithMaxElapsedTime(0), // the budget above
		backoff.WithNotify(func(err error, wait time.Duration) {
			log.Warn("generation failed; retrying", zap.Int("attempt", attempts), zap.Duration("wait", wait), zap.Error(err))
			p.Metrics.Retried(req.Model.ID)
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
	if p.Quota == nil {
		imgs, err := p.generateOnce(ctx, req, progress)
		return imgs, 0, err
	}
	asked := p.Now()
	release, err := p.Quota.Acquire(ctx, req.Model.ID)
	waited := p.Now().Sub(asked)
	if err != nil {
		return nil, waited, err // the task's deadline, or Redis unavailable: retryable
	}
	imgs, err := func() ([]imagegen.Image, error) {
		defer release() // a panicking generator must not keep its slot
		return p.generateOnce(ctx, req, progress)
	}()
	if errors.Is(err, imagegen.ErrThrottled) {
		if terr := p.Quota.Throttled(ctx, req.Model.ID, 0); terr != nil {
			logging.From(ctx).Warn("could not slow the other workers down after a 429", zap.Error(terr))
		}
	}
	return imgs, waited, err
}

// storeResults keeps the images made (keep), in a "result.store" span.
func (p *Processor) storeResults(ctx context.Context, images []imagegen.Image) (_ []task.Result, err error) {
	ctx, span := p.span(ctx, SpanStore)
	defer func() { endSpan(span, err) }()
	results := make([]task.Result, 0, len(images))
	for _, img := range images {
		key, err := p.keep(ctx, img)
		if err != nil {
			return nil, apperr.Transient(err, apperr.Internal, "the result could not be stored")
		}
		results = append(results, task.Result{Key: key, ContentType: img.MIME, Size: int64(len(img.Data)), Width: img.Width, Height: img.Height})
	}
	return results, nil
}

// generateOnce is one call to the generator: in an "upstream.call" span
// when the generator traces none itself (Upstream).
func (p *Processor) generateOnce(ctx context.Context, req imagegen.Request, progress func(int)) (_ []imagegen.Image, err error) {
	if p.Upstream != "" {
		var span trace.Span
		ctx, span = p.span(ctx, SpanCall, AttrUpstream.String(p.Upstream), AttrBreaker.String(BreakerNone))
		defer func() { endSpan(span, err) }()
	}
	return p.gen.Generate(ctx, req, progress)
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
	now := p.Now()
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
