package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/easelhq/easel/pkg/task"
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
// callback URL. The worker reads the rest (the URL, the record) from the
// task.
type DeliverWebhook struct {
	AccountID string
	TaskID    string
	// Event is a task.Event*.
	Event string
	// Seq tells apart the progress events of a task (their percent); 0 for
	// the others.
	Seq int
}

// webhookWire is the job's payload: small JSON.
type webhookWire struct {
	AccountID string `json:"a"`
	TaskID    string `json:"t"`
	Event     string `json:"e"`
	Seq       int    `json:"s,omitempty"`
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
	b, err := json.Marshal(webhookWire{AccountID: d.AccountID, TaskID: d.TaskID, Event: d.Event, Seq: d.Seq})
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
	var w webhookWire
	if err := json.Unmarshal(t.Payload(), &w); err != nil {
		return DeliverWebhook{}, fmt.Errorf("jobs: decode webhook payload: %w", err)
	}
	d := DeliverWebhook{AccountID: w.AccountID, TaskID: w.TaskID, Event: w.Event, Seq: w.Seq}
	if err := d.check(); err != nil {
		return DeliverWebhook{}, err
	}
	return d, nil
}

// EnqueueWebhook queues the delivery of an event of a task. An event
// queued already (waiting, running or waiting for a retry) is not queued
// again, and is no error.
func (e *Enqueuer) EnqueueWebhook(ctx context.Context, accountID, taskID, event string, seq int) error {
	t, err := NewDeliverWebhookTask(DeliverWebhook{AccountID: accountID, TaskID: taskID, Event: event, Seq: seq})
	if err != nil {
		return err
	}
	switch _, err := e.client.EnqueueContext(ctx, t); {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		return nil
	case err != nil:
		return fmt.Errorf("jobs: enqueue webhook %s: %w", WebhookID(taskID, event, seq), err)
	}
	return nil
}

// HookOutbox is the store's outbox of a task's final events (package
// store): an event queued is taken off it.
type HookOutbox interface {
	HookQueued(ctx context.Context, accountID, taskID, event string) error
}

// QueueFinalHook queues the delivery of a task's final event (completed,
// failed, canceled) and takes it off the account's outbox: what a service
// that ended a task calls (the gateway after a cancel, the worker after a
// run). If it fails, the workers' recovery queues the event from the
// outbox a few seconds later.
func (e *Enqueuer) QueueFinalHook(ctx context.Context, outbox HookOutbox, accountID, taskID, event string) error {
	if err := e.EnqueueWebhook(ctx, accountID, taskID, event, 0); err != nil {
		return err
	}
	return outbox.HookQueued(ctx, accountID, taskID, event)
}
