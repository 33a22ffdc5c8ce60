package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
	"github.com/easelhq/easel/pkg/webhook"
)

// AccountHooks keeps an account's default webhook endpoint and reads its
// recent deliveries (store.Hooks).
type AccountHooks interface {
	Endpoint(ctx context.Context, accountID string) (task.Callback, error)
	// SetEndpoint sets the endpoint; an empty URL clears it.
	SetEndpoint(ctx context.Context, accountID string, cb task.Callback) error
	// Recent returns the account's newest deliveries, newest first.
	Recent(ctx context.Context, accountID string, limit int) ([]webhook.Delivery, error)
	// Secrets are what the account's deliveries are signed with.
	Secrets(ctx context.Context, accountID string) ([]string, error)
	// Redelivered records the attempt of a redelivery.
	Redelivered(ctx context.Context, accountID, taskID, event string, seq int, a webhook.Attempt, state webhook.State) error
}

// HookSender makes one delivery attempt (webhook.Client).
type HookSender interface {
	Send(ctx context.Context, url string, m webhook.Message) webhook.Result
}

// EventTest is the type of the test event an account sends its endpoint.
const EventTest = "webhook.test"

// Account webhook paths.
const (
	PathAccountWebhook    = "/v1/account/webhook"
	PathAccountDeliveries = "/v1/account/webhook/deliveries"
)

// endpointData is the data of the account webhook routes' replies.
type endpointData struct {
	// CallbackURL is absent while none is set.
	CallbackURL    string   `json:"callback_url,omitempty"`
	CallbackEvents []string `json:"callback_events"`
}

func endpointOf(cb task.Callback) endpointData {
	d := endpointData{CallbackURL: cb.URL, CallbackEvents: []string{}}
	if cb.URL != "" {
		d.CallbackEvents = append(d.CallbackEvents, cb.Events...)
	}
	return d
}

func (h *Handlers) accountHooks() (AccountHooks, error) {
	if h.AccountHooks == nil {
		return nil, apperr.New(apperr.Unavailable, "account webhooks are not available")
	}
	return h.AccountHooks, nil
}

// unavailable marks a store failure that is not a domain error.
func unavailable(err error) error {
	var coded apperr.Coded
	if !errors.As(err, &coded) {
		err = apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
	}
	return err
}

// AccountWebhook handles GET /v1/account/webhook: the account's default
// webhook endpoint.
func (h *Handlers) AccountWebhook(c echo.Context) error {
	st, err := h.accountHooks()
	if err != nil {
		return err
	}
	cb, err := st.Endpoint(c.Request().Context(), web.AccountOf(c).ID)
	if err != nil {
		return unavailable(err)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return web.OK(c, endpointOf(cb))
}

// SetAccountWebhook handles PUT /v1/account/webhook: sets the endpoint the
// events of the account's tasks without a callback_url go to, by the
// rules of a create's callback_url and callback_events.
func (h *Handlers) SetAccountWebhook(c echo.Context) error {
	st, err := h.accountHooks()
	if err != nil {
		return err
	}
	body, err := web.JSONBody(c)
	if err != nil {
		return err
	}
	cb, err := h.Decoder.Endpoint(body)
	if err != nil {
		return err
	}
	if err := st.SetEndpoint(c.Request().Context(), web.AccountOf(c).ID, cb); err != nil {
		return unavailable(err)
	}
	return web.OK(c, endpointOf(cb))
}

// DeleteAccountWebhook handles DELETE /v1/account/webhook: the account's
// tasks without a callback_url send no events.
func (h *Handlers) DeleteAccountWebhook(c echo.Context) error {
	st, err := h.accountHooks()
	if err != nil {
		return err
	}
	if err := st.SetEndpoint(c.Request().Context(), web.AccountOf(c).ID, task.Callback{}); err != nil {
		return unavailable(err)
	}
	return web.OK(c, endpointOf(task.Callback{}))
}

// attemptData is one attempt's result, as the test and the redelivery
// answer it.
type attemptData struct {
	WebhookID  string `json:"webhook_id"`
	Delivered  bool   `json:"delivered"`
	StatusCode int    `json:"status_code"`
	LatencyMs  int64  `json:"latency_ms"`
	Error      string `json:"error"`
}

// send signs body as message id with the account's secrets and posts it
// to url once.
func (h *Handlers) send(ctx context.Context, st AccountHooks, accountID, url, id string, body []byte) (webhook.Attempt, webhook.Result, error) {
	secrets, err := st.Secrets(ctx, accountID)
	if err != nil {
		return webhook.Attempt{}, webhook.Result{}, unavailable(err)
	}
	now := h.s.Now()
	m, err := webhook.NewMessage(secrets, id, now, body)
	if err != nil {
		return webhook.Attempt{}, webhook.Result{}, err
	}
	res := h.HookSender.Send(ctx, url, m)
	return webhook.Attempt{Time: now, StatusCode: res.StatusCode, Latency: res.Latency, Error: res.Error}, res, nil
}

// TestAccountWebhook handles POST /v1/account/webhook/test: sends the
// endpoint one webhook.test event, signed as every delivery is, and
// answers the receiver's reply. Nothing is retried or logged.
func (h *Handlers) TestAccountWebhook(c echo.Context) error {
	st, err := h.accountHooks()
	if err != nil {
		return err
	}
	if h.HookSender == nil {
		return apperr.New(apperr.Unavailable, "webhook delivery is not available")
	}
	ctx := c.Request().Context()
	acct := web.AccountOf(c).ID
	cb, err := st.Endpoint(ctx, acct)
	if err != nil {
		return unavailable(err)
	}
	if cb.URL == "" {
		return apperr.New(apperr.Conflict, "the account has no webhook endpoint: set one with PUT /v1/account/webhook first")
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	id := "msg_test_" + hex.EncodeToString(nonce[:])
	body, err := webhook.Body(EventTest, h.s.Now(), map[string]string{"account_id": acct})
	if err != nil {
		return err
	}
	_, res, err := h.send(ctx, st, acct, cb.URL, id, body)
	if err != nil {
		return err
	}
	return web.OK(c, attemptData{WebhookID: id, Delivered: res.Outcome == webhook.Delivered, StatusCode: res.StatusCode, LatencyMs: res.Latency.Milliseconds(), Error: res.Error})
}

// Account delivery log limits.
const (
	deliveriesDefault = 50
	deliveriesMax     = 100
)

type accountDelivery struct {
	TaskID string `json:"task_id"`
	// Seq tells apart a task's progress events (their percent); 0
	// otherwise. A redelivery names the delivery by task_id, type, seq.
	Seq int `json:"seq"`
	webhookDelivery
}

// AccountDeliveries handles GET /v1/account/webhook/deliveries?limit=:
// the account's newest webhook deliveries of every task, newest first,
// with their attempts.
func (h *Handlers) AccountDeliveries(c echo.Context) error {
	st, err := h.accountHooks()
	if err != nil {
		return err
	}
	limit := deliveriesDefault
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > deliveriesMax {
			return apperr.Errorf(apperr.Invalid, "limit must be 1 to %d", deliveriesMax)
		}
		limit = n
	}
	ds, err := st.Recent(c.Request().Context(), web.AccountOf(c).ID, limit)
	if err != nil {
		return unavailable(err)
	}
	out := make([]accountDelivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, accountDelivery{TaskID: d.TaskID, Seq: d.Seq, webhookDelivery: deliveryOf(d.TaskID, d)})
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return web.OK(c, map[string]any{"deliveries": out})
}

// Redeliver handles POST /v1/account/webhook/redeliver {"task_id",
// "type", "seq"}: sends an event of a task again, now, to where the task's
// events go, with the event's webhook-id and the task's record as it is
// now; the attempt is added to the delivery's log.
func (h *Handlers) Redeliver(c echo.Context) error {
	st, err := h.accountHooks()
	if err != nil {
		return err
	}
	if h.HookSender == nil {
		return apperr.New(apperr.Unavailable, "webhook delivery is not available")
	}
	body, err := web.JSONBody(c)
	if err != nil {
		return err
	}
	var req struct {
		TaskID string `json:"task_id"`
		Type   string `json:"type"`
		Seq    int    `json:"seq"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.TaskID == "" || req.Type == "" {
		return apperr.New(apperr.Invalid, `the body must be a JSON object: {"task_id": "<task id>", "type": "<event type>", "seq": <progress percent, 0 otherwise>}`)
	}
	if !slices.Contains(task.Events, req.Type) {
		return apperr.Errorf(apperr.Invalid, "type %q is not an event", web.ClipID(req.Type))
	}
	if !taskid.Valid(req.TaskID) {
		return apperr.Errorf(apperr.NotFound, "task %s not found", web.ClipID(req.TaskID))
	}
	ctx := c.Request().Context()
	acct := web.AccountOf(c).ID
	t, err := h.Tasks.Get(ctx, acct, req.TaskID)
	if err != nil {
		return err
	}
	if t.Callback.URL == "" {
		return apperr.Errorf(apperr.Conflict, "task %s has no webhook endpoint", t.ID)
	}
	at := t.CompleteTime
	if req.Type == task.EventProgress || at.IsZero() {
		at = h.s.Now()
	}
	msg, err := webhook.Body(req.Type, at, taskview.New(t, h.Signer))
	if err != nil {
		return err
	}
	id := webhook.MessageID(t.ID, req.Type, req.Seq)
	a, res, err := h.send(ctx, st, acct, t.Callback.URL, id, msg)
	if err != nil {
		return err
	}
	state := webhook.StateFailed
	if res.Outcome == webhook.Delivered {
		state = webhook.StateDelivered
	}
	if err := st.Redelivered(ctx, acct, t.ID, req.Type, req.Seq, a, state); err != nil {
		return unavailable(err)
	}
	return web.OK(c, attemptData{WebhookID: id, Delivered: res.Outcome == webhook.Delivered, StatusCode: res.StatusCode, LatencyMs: res.Latency.Milliseconds(), Error: res.Error})
}
