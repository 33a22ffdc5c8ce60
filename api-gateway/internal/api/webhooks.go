package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/webhook"
)

// WebhookLog reads the record of a task's webhook deliveries.
type WebhookLog interface {
	// Deliveries returns the deliveries of a task's events, oldest first,
	// with their attempts.
	Deliveries(ctx context.Context, accountID, taskID string) ([]webhook.Delivery, error)
}

// webhooksReply is the body of GET /v1/task/webhooks.
type webhooksReply struct {
	TaskID string `json:"task_id"`
	// CallbackURL is absent for a task without a callback.
	CallbackURL string            `json:"callback_url,omitempty"`
	Events      []string          `json:"events"`
	Deliveries  []webhookDelivery `json:"deliveries"`
}

type webhookDelivery struct {
	// WebhookID is the webhook-id header of every attempt.
	WebhookID string `json:"webhook_id"`
	Type      string `json:"type"`
	// State is pending, retrying, delivered or failed.
	State    string           `json:"state"`
	Attempts []webhookAttempt `json:"attempts"`
}

type webhookAttempt struct {
	// Time is when the attempt started, Unix ms.
	Time int64 `json:"time"`
	// StatusCode is the receiver's answer, 0 when there was none.
	StatusCode int   `json:"status_code"`
	LatencyMs  int64 `json:"latency_ms"`
	// Error says why the attempt did not deliver; "" when it did.
	Error string `json:"error"`
}

// Webhooks handles GET /v1/task/webhooks?task_id=: a task's webhook
// deliveries and their attempts. A task of another account is not found,
// as in the query.
func (h *Handlers) Webhooks(c echo.Context) error {
	id := c.QueryParam("task_id")
	if id == "" {
		return apperr.New(apperr.Invalid, "task_id is required: GET /v1/task/webhooks?task_id=<task id>")
	}
	if !taskid.Valid(id) {
		return apperr.Errorf(apperr.NotFound, "task %s not found", web.ClipID(id))
	}
	ctx := c.Request().Context()
	acct := web.AccountOf(c).ID
	t, err := h.Tasks.Get(ctx, acct, id)
	if err != nil {
		return err
	}
	reply := webhooksReply{TaskID: t.ID, Events: []string{}, Deliveries: []webhookDelivery{}}
	if t.Callback.URL != "" {
		reply.CallbackURL = t.Callback.URL
		reply.Events = append(reply.Events, t.Callback.Events...)
	}
	if h.Deliveries != nil {
		ds, err := h.Deliveries.Deliveries(ctx, acct, id)
		if err != nil {
			var coded apperr.Coded
			if !errors.As(err, &coded) {
				err = apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
			}
			return err
		}
		for _, d := range ds {
			reply.Deliveries = append(reply.Deliveries, deliveryOf(id, d))
		}
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, reply)
}

// deliveryOf is a delivery of an event of task taskID as the replies show
// it.
func deliveryOf(taskID string, d webhook.Delivery) webhookDelivery {
	out := webhookDelivery{WebhookID: webhook.MessageID(taskID, d.Event, d.Seq), Type: d.Event, State: string(d.State), Attempts: make([]webhookAttempt, len(d.Attempts))}
	for i, a := range d.Attempts {
		out.Attempts[i] = webhookAttempt{Time: a.Time.UnixMilli(), StatusCode: a.StatusCode, LatencyMs: a.Latency.Milliseconds(), Error: a.Error}
	}
	return out
}
