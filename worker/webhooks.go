package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/pkg/webhook"
	"github.com/easelhq/easel/worker/internal/processor"
)

// Webhook deliveries: a task's events are queued on jobs.WebhookQueue
// (Notify, after the run that ended or advanced the task; the gateway
// after a cancel) and delivered by a server of their own in each worker,
// so a slow receiver holds a delivery slot, never a generation's. A final
// event whose queueing failed stays in the account's outbox, where the
// recovery finds it.
const (
	// notifyTimeout bounds what queueing an event may cost the run that
	// ended the task.
	notifyTimeout = 2 * time.Second
	// hookCheckInterval is how often Asynq moves deliveries whose retry is
	// due back onto the queue (its default, 5 s, would add up to that to
	// every retry).
	hookCheckInterval = time.Second
)

// hookStore is what webhook deliveries need of the webhook store
// (store.Hooks): it is also the outbox queueing records into.
type hookStore interface {
	jobs.Outbox
	Secrets(ctx context.Context, accountID string) ([]string, error)
	Outgoing(ctx context.Context, accountID, taskID, event string, seq int) (webhook.State, webhook.Outgoing, error)
	RecordAttempt(ctx context.Context, accountID, taskID, event string, seq int, a webhook.Attempt, state webhook.State, msg webhook.Outgoing) (bool, error)
}

// taskReader reads a task's record: a delivery's body is the record.
type taskReader interface {
	Get(ctx context.Context, accountID, taskID string) (*task.Task, error)
}

// hookQueue queues deliveries (jobs.Enqueuer).
type hookQueue interface {
	QueueHook(ctx context.Context, o jobs.Outbox, d jobs.DeliverWebhook) error
}

// hookSender makes one delivery attempt (webhook.Client).
type hookSender interface {
	Send(ctx context.Context, url string, m webhook.Message) webhook.Result
}

// hooks queues and delivers webhook events.
type hooks struct {
	st       hookStore
	tasks    taskReader
	q        hookQueue
	send     hookSender
	signer   taskview.Signer
	schedule webhook.Schedule
	log      *zap.Logger
	now      func() time.Time
	// tr traces deliveries in their task's trace, when on (nil: off).
	tr     *tracing.Tracing
	tracer trace.Tracer
}

func newHooks(st hookStore, tasks taskReader, q hookQueue, send hookSender, signer taskview.Signer, schedule webhook.Schedule, log *zap.Logger) *hooks {
	return &hooks{st: st, tasks: tasks, q: q, send: send, signer: signer, schedule: schedule, log: log, now: time.Now}
}

// traced makes h trace its deliveries with tr, when it is on.
func (h *hooks) traced(tr *tracing.Tracing) *hooks {
	if tr != nil && tr.Enabled() {
		h.tr, h.tracer = tr, tr.Provider().Tracer(processor.TracerName)
	}
	return h
}

// The span of a delivery attempt, and its attributes.
const (
	spanDeliver    = "webhook.deliver"
	attrEvent      = attribute.Key("easel.event")
	attrHTTPStatus = attribute.Key("http.response.status_code")
	attrHookResult = attribute.Key("easel.webhook_outcome")
)

// deliverSpan starts the span of a delivery attempt, in the trace of
// traceparent (the task's); none when h is not traced or the task was
// not.
func (h *hooks) deliverSpan(ctx context.Context, d jobs.DeliverWebhook, traceparent string) (context.Context, trace.Span) {
	if h.tracer == nil || traceparent == "" {
		return ctx, nil
	}
	return h.tracer.Start(tracing.Extract(ctx, traceparent, ""), spanDeliver,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(processor.AttrTaskID.String(d.TaskID), attrEvent.String(d.Event)))
}

// Notify queues the delivery of an event of a task that the store said is
// due (processor.Hooks). It takes at most notifyTimeout; a final event it
// could not queue is left in the outbox for the recovery, a progress
// event is dropped.
func (h *hooks) Notify(ctx context.Context, accountID, taskID, event string, seq int) {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	d := jobs.DeliverWebhook{AccountID: accountID, TaskID: taskID, Event: event, Seq: seq}
	if h.tr != nil {
		// The delivery joins the trace of the run that made the event.
		d.TraceParent = tracing.Inject(ctx, h.tr.Propagator())
	}
	if err := h.q.QueueHook(ctx, h.st, d); err != nil {
		h.log.Warn("webhook: could not queue an event; a final one is queued later from the outbox, a progress one is dropped",
			zap.String("task_id", taskID), zap.String("account_id", accountID), zap.String("event", event), zap.Error(err))
	}
}

// retryLater is a delivery attempt to be tried again: after the schedule's
// wait, or the receiver's Retry-After if longer.
type retryLater struct {
	why   string
	after time.Duration
}

func (e *retryLater) Error() string { return "webhook not delivered: " + e.why }

// retryDelay is the wait before retry n+1 of a delivery that failed with
// err.
func (h *hooks) retryDelay(n int, err error) time.Duration {
	d := h.schedule.Delay(n)
	var r *retryLater
	if errors.As(err, &r) && r.after > d {
		d = r.after
	}
	return d
}

// errGiveUp: a delivery was given up on (an answer not worth retrying, its
// retries used up, its task gone); the job is not to run again.
var errGiveUp = errors.New("webhook given up")

// deliver makes an attempt at delivering d; retried is how many attempts
// came before. It returns nil once the delivery has ended (delivered, or
// ended before), an error wrapping errGiveUp when it gives up, and
// another error to be retried.
func (h *hooks) deliver(ctx context.Context, d jobs.DeliverWebhook, retried int) error {
	log := h.log.With(zap.String("task_id", d.TaskID), zap.String("account_id", d.AccountID), zap.String("event", d.Event), zap.Int("seq", d.Seq), zap.Int("attempt", retried+1))
	state, msg, err := h.st.Outgoing(ctx, d.AccountID, d.TaskID, d.Event, d.Seq)
	if err != nil {
		return err
	}
	if state.Final() {
		log.Debug("webhook: delivery ended already; dropping the duplicate job")
		return nil
	}
	// The delivery's trace is the one its job names, or else (queued by
	// the recovery) its task's.
	traceparent := d.TraceParent
	if msg.URL == "" {
		// First attempt: the message is the task's record now, kept for
		// the retries.
		var tp string
		if msg, tp, err = h.message(ctx, d); err != nil {
			var nf *apperr.NotFoundError
			if !errors.As(err, &nf) {
				return err
			}
			h.record(ctx, log, d, webhook.Attempt{Time: h.now(), Error: "the task's record expired before the event could be delivered"}, webhook.StateFailed, webhook.Outgoing{})
			return fmt.Errorf("%w: task record gone", errGiveUp)
		}
		if traceparent == "" {
			traceparent = tp
		}
	}
	secrets, err := h.st.Secrets(ctx, d.AccountID)
	if err != nil {
		return err
	}
	m, err := webhook.NewMessage(secrets, webhook.MessageID(d.TaskID, d.Event, d.Seq), h.now(), msg.Body)
	if err != nil {
		return err
	}
	ctx, span := h.deliverSpan(ctx, d, traceparent)
	if span != nil {
		defer span.End()
		log = log.With(tracing.Fields(ctx)...)
	}
	start := h.now()
	res := h.send.Send(ctx, msg.URL, m)
	if span != nil {
		span.SetAttributes(attrHookResult.String(res.Outcome.String()))
		if res.StatusCode != 0 {
			span.SetAttributes(attrHTTPStatus.Int(res.StatusCode))
		}
		if res.Outcome != webhook.Delivered {
			span.SetStatus(codes.Error, res.Error)
		}
	}
	if ctx.Err() != nil {
		// Shutting down (or out of time): not the receiver's doing, not
		// recorded; Asynq runs the job again.
		return ctx.Err()
	}
	a := webhook.Attempt{Time: start, StatusCode: res.StatusCode, Latency: res.Latency, Error: res.Error}
	switch {
	case res.Outcome == webhook.Delivered:
		h.record(ctx, log, d, a, webhook.StateDelivered, webhook.Outgoing{})
		log.Debug("webhook delivered", zap.Int("status", res.StatusCode), zap.Duration("latency", res.Latency))
		return nil
	case res.Outcome == webhook.Retry && retried < h.schedule.Retries():
		if !h.record(ctx, log, d, a, webhook.StateRetrying, msg) {
			return nil // a duplicate ended it meanwhile
		}
		log.Info("webhook not delivered; will retry", zap.Int("status", res.StatusCode), zap.String("error", res.Error))
		return &retryLater{why: res.Error, after: res.RetryAfter}
	}
	h.record(ctx, log, d, a, webhook.StateFailed, webhook.Outgoing{})
	log.Warn("webhook not delivered; giving up", zap.Int("status", res.StatusCode), zap.String("error", res.Error), zap.Stringer("outcome", res.Outcome))
	return fmt.Errorf("%w: %s", errGiveUp, res.Error)
}

// record adds an attempt to the delivery's log, and reports whether the
// delivery was still going (false: a duplicate ended it, or the log could
// not be written, which is logged).
func (h *hooks) record(ctx context.Context, log *zap.Logger, d jobs.DeliverWebhook, a webhook.Attempt, state webhook.State, msg webhook.Outgoing) bool {
	ok, err := h.st.RecordAttempt(ctx, d.AccountID, d.TaskID, d.Event, d.Seq, a, state, msg)
	if err != nil {
		log.Warn("webhook: could not record an attempt", zap.String("state", string(state)), zap.Error(err))
		return true
	}
	return ok
}

// message renders the message of an event from the task's record, and
// says the task's trace context (its traceparent, if it was traced). The
// store decided the callback wants the event when it was queued: this only
// reads where it goes.
func (h *hooks) message(ctx context.Context, d jobs.DeliverWebhook) (webhook.Outgoing, string, error) {
	t, err := h.tasks.Get(ctx, d.AccountID, d.TaskID)
	if err != nil {
		return webhook.Outgoing{}, "", err
	}
	if t.Callback.URL == "" {
		return webhook.Outgoing{}, "", &apperr.NotFoundError{Kind: "callback of task", ID: d.TaskID}
	}
	at := t.CompleteTime
	if d.Event == task.EventProgress || at.IsZero() {
		at = h.now()
	}
	body, err := webhook.Body(d.Event, at, taskview.New(t, h.signer))
	if err != nil {
		return webhook.Outgoing{}, "", err
	}
	return webhook.Outgoing{URL: t.Callback.URL, Body: body}, t.TraceParent, nil
}
