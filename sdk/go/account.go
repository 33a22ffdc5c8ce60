package easel

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// WebhookEndpoint is an account's default webhook endpoint: where the
// events of its tasks created without a callback URL go. URL is "" while
// none is set.
type WebhookEndpoint struct {
	URL    string   `json:"callback_url,omitempty"`
	Events []string `json:"callback_events"`
}

// WebhookSend is one attempt the server made at once: a test event or a
// redelivery.
type WebhookSend struct {
	WebhookID  string `json:"webhook_id"`
	Delivered  bool   `json:"delivered"`
	StatusCode int    `json:"status_code"`
	LatencyMs  int64  `json:"latency_ms"`
	Error      string `json:"error"`
}

// UsageCount is a usage figure: tasks and credits charged, refunded
// tasks left out, and the tasks refunded and their credits.
type UsageCount struct {
	Tasks           int64 `json:"tasks"`
	Credits         int64 `json:"credits"`
	Refunds         int64 `json:"refunds"`
	RefundedCredits int64 `json:"refunded_credits"`
}

// UsageDay is an account's usage on one UTC day: by model id, and by API
// key (its visible prefix) and model id.
type UsageDay struct {
	Date   string                           `json:"date"`
	Models map[string]UsageCount            `json:"models"`
	Keys   map[string]map[string]UsageCount `json:"keys"`
}

// Usage is an account's usage over days, oldest first, with the models
// and keys used in them.
type Usage struct {
	Days   []UsageDay `json:"days"`
	Models []string   `json:"models"`
	Keys   []string   `json:"keys"`
}

// UsageOptions choose the usage read. Zero values are left out.
type UsageOptions struct {
	Days int    // 1 to 31; the server's default is 30
	Key  string // an API key's visible prefix: its usage alone
}

// AccountWebhook returns the account's default webhook endpoint.
func (c *Client) AccountWebhook(ctx context.Context) (*WebhookEndpoint, error) {
	var out struct {
		Data WebhookEndpoint `json:"data"`
	}
	if err := c.call(ctx, call{method: http.MethodGet, path: "/v1/account/webhook", replay: true}, &out); err != nil {
		return nil, err
	}
	return &out.Data, nil
}

// SetAccountWebhook sets the account's default webhook endpoint; events
// nil: the final events.
func (c *Client) SetAccountWebhook(ctx context.Context, endpointURL string, events []string) (*WebhookEndpoint, error) {
	body, err := json.Marshal(WebhookEndpoint{URL: endpointURL, Events: events})
	if err != nil {
		return nil, err
	}
	if events == nil {
		body, _ = json.Marshal(map[string]string{"callback_url": endpointURL})
	}
	var out struct {
		Data WebhookEndpoint `json:"data"`
	}
	if err := c.call(ctx, call{method: http.MethodPut, path: "/v1/account/webhook", body: body, replay: true}, &out); err != nil {
		return nil, err
	}
	return &out.Data, nil
}

// DeleteAccountWebhook clears the account's default webhook endpoint.
func (c *Client) DeleteAccountWebhook(ctx context.Context) error {
	return c.call(ctx, call{method: http.MethodDelete, path: "/v1/account/webhook", replay: true}, nil)
}

// TestAccountWebhook sends the endpoint one signed webhook.test event
// and returns the receiver's answer. No endpoint set is ErrConflict.
func (c *Client) TestAccountWebhook(ctx context.Context) (*WebhookSend, error) {
	var out struct {
		Data WebhookSend `json:"data"`
	}
	if err := c.call(ctx, call{method: http.MethodPost, path: "/v1/account/webhook/test", body: []byte("{}")}, &out); err != nil {
		return nil, err
	}
	return &out.Data, nil
}

// Usage returns the account's usage by day, model and API key.
func (c *Client) Usage(ctx context.Context, o UsageOptions) (*Usage, error) {
	var out struct {
		Data Usage `json:"data"`
	}
	if err := c.call(ctx, call{method: http.MethodGet, path: "/v1/account/usage", query: o.query(), replay: true}, &out); err != nil {
		return nil, err
	}
	return &out.Data, nil
}

// UsageCSV writes the account's usage to w as the API serves it in CSV
// (GET /v1/account/usage.csv): a header, then a row per day, model and
// key. An error while w is written is not retried: w may hold part of it.
func (c *Client) UsageCSV(ctx context.Context, o UsageOptions, w io.Writer) error {
	return c.call(ctx, call{method: http.MethodGet, path: "/v1/account/usage.csv", query: o.query(), replay: true, stream: func(r io.Reader) error {
		_, err := io.Copy(w, r)
		return err
	}}, nil)
}

// query is the usage request's parameters.
func (o UsageOptions) query() url.Values {
	q := url.Values{}
	if o.Days != 0 {
		q.Set("days", strconv.Itoa(o.Days))
	}
	if o.Key != "" {
		q.Set("key", o.Key)
	}
	return q
}
