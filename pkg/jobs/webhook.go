package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"google.golang.org/protobuf/proto"

	"github.com/easelhq/easel/pkg/task"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
)

// TypeDeliverWebhook is the Asynq type of a webhook delivery.
const TypeDeliverWebhook = "webhook:deliver"

// WebhookQueue is the queue of webhook deliveries: a queue of their own,
// served by a server of its own in each worker, so a slow receiver never
// holds a generation's slot.
const WebhookQueue = "webhooks"

// WebhookMaxRetry bounds the retries of a delivery. The workers' schedule
// (webhook.Schedule.Retries) gives up before it: the retries of a
// delivery are theirs to count, not whoever queued it.
const WebhookMaxRetry = 100

// webhookTimeout bounds one run of a delivery job: an attempt (at most a
// minute) and the store's reads and writes around it.
const webhookTimeout = 2 * time.Minute

// DeliverWebhook is the job of delivering one event of a task to its
// callback URL (its payload: proto/easel/job/v1 DeliverWebhook). The
// worker reads the rest (the URL, the record) from the task.
type DeliverWebhook struct {
	AccountID string
	TaskID    string
	// Event is a task.Event*.
	Event string
	// Seq tells apart the progress events of a task (their percent); 0 for
	// the others.
	Seq int
	// TraceParent is the W3C traceparent of the task's trace when it was
	// traced (the delivery's span is its child); empty otherwise. It is no
	// part of the delivery's identity (WebhookID).
	TraceParent string
}

func (d DeliverWebhook) check() error {
	switch {
	case d.AccountID == "" || d.TaskID == "":
		return errors.New("jobs: a webhook delivery needs an account id and a task id")
	case !slices.Contains(task.Events, d.Event):
		return fmt.Errorf("jobs: task %s: unknown webhook event %q", d.TaskID, d.Event)
	case d.Seq < 0:
		return fmt.Errorf("jobs: task %s: webhook sequence number %d", d.TaskID, d.Seq)
	}
	return nil
}

// WebhookID is the Asynq TaskID of the delivery of an event:
// "wh:<task id>:<event>:<seq>". One event is queued once: queueing it
// again while it is queued, running or waiting to be retried is a no-op.
func WebhookID(taskID, event string, seq int) string {
	return "wh:" + taskID + ":" + event + ":" + strconv.Itoa(seq)
}

// NewDeliverWebhookTask builds the Asynq task of a delivery: its TaskID is
// WebhookID, it goes on WebhookQueue.
func NewDeliverWebhookTask(d DeliverWebhook) (*asynq.Task, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	b, err := proto.Marshal(&jobv1.DeliverWebhook{
		AccountId: d.AccountID, TaskId: d.TaskID, Event: d.Event, Seq: int32(d.Seq), Traceparent: d.TraceParent,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: encode webhook of %s: %w", d.TaskID, err)
	}
	return asynq.NewTask(TypeDeliverWebhook, b,
		asynq.TaskID(WebhookID(d.TaskID, d.Event, d.Seq)),
		asynq.Queue(WebhookQueue),
		asynq.MaxRetry(WebhookMaxRetry),
		asynq.Timeout(webhookTimeout),
	), nil
}

// ParseDeliverWebhook decodes the job of a TypeDeliverWebhook task.
func ParseDeliverWebhook(t *asynq.Task) (DeliverWebhook, error) {
	if t.Type() != TypeDeliverWebhook {
		return DeliverWebhook{}, fmt.Errorf("jobs: task type %q is not %q", t.Type(), TypeDeliverWebhook)
	}
	var w jobv1.DeliverWebhook
	if err := proto.Unmarshal(t.Payload(), &w); err != nil {
		return DeliverWebhook{}, fmt.Errorf("jobs: decode webhook payload: %w", err)
	}
	d := DeliverWebhook{
		AccountID: w.GetAccountId(), TaskID: w.GetTaskId(), Event: w.GetEvent(), Seq: int(w.GetSeq()),
		TraceParent: w.GetTraceparent(),
	}
	if err := d.check(); err != nil {
		return DeliverWebhook{}, err
	}
	return d, nil
}

// Outbox records which webhook deliveries are queued (the store's Hooks):
// a final event queued leaves the account's outbox, where the scripts that
// end a task put it.
type Outbox interface {
	Queued(ctx context.Context, accountID, taskID, event string, seq int) error
}

// QueueHook queues the delivery of an event of a task and records it in
// the outbox: the one way a delivery is queued (by the worker that ended
// or advanced the task, the gateway after a cancel, the recovery of the
// outbox). An event queued already (waiting, running or waiting for a
// retry) is not queued again. If it fails, a final event stays in the
// outbox and the workers' recovery queues it a few seconds later.
func (e *Enqueuer) QueueHook(ctx context.Context, o Outbox, d DeliverWebhook) error {
	t, err := NewDeliverWebhookTask(d)
	if err != nil {
		return err
	}
	switch _, err := e.client.EnqueueContext(ctx, t); {
	case errors.Is(err, asynq.ErrTaskIDConflict):
	case err != nil:
		return fmt.Errorf("jobs: enqueue webhook %s: %w", WebhookID(d.TaskID, d.Event, d.Seq), err)
	}
	return o.Queued(ctx, d.AccountID, d.TaskID, d.Event, d.Seq)
}
