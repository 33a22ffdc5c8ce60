// Package api is the public task API (/v1), the playground page that
// calls it from a browser (/playground) and the OpenAPI document that
// describes it (/openapi.json): its Echo handlers and JSON shapes, on the
// shared middleware and error mapping of package web. Everything behind
// it takes a context and returns apperr errors.
package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/api-gateway/internal/watch"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
)

// Tasks creates and reads tasks.
type Tasks interface {
	// Create creates a task; under an idempotency key (idem.Key not empty)
	// a repeat of an earlier create returns its task, Replayed.
	Create(ctx context.Context, by task.Caller, in task.Input, idem task.Idempotency) (task.Created, error)
	// Quote checks and prices a create as Create would, making nothing.
	Quote(ctx context.Context, by task.Caller, in task.Input) (task.Quote, error)
	Get(ctx context.Context, accountID, taskID string) (*task.Task, error)
	Cancel(ctx context.Context, accountID, taskID string) (task.Cancellation, error)
	List(ctx context.Context, accountID string, f task.Filter) ([]*task.Task, string, error)
	// GetPositioned is Get with a pending task's place in its queue (nil:
	// none known).
	GetPositioned(ctx context.Context, accountID, taskID string) (*task.Task, *task.QueuePosition, error)
}

// Signer makes and checks result URLs.
type Signer interface {
	Sign(path string, expires time.Time) string
	Verify(path, expires, sig string, now time.Time) error
}

// Blobs opens stored results.
type Blobs interface {
	Open(ctx context.Context, key string) (blob.Object, blob.Info, error)
}

// Presigner gives out a store's own short-lived URLs of results, for
// downloads answered with a redirect (EASEL_BLOB_REDIRECT).
type Presigner interface {
	Presign(ctx context.Context, key string, ttl time.Duration) (string, error)
}

// Deps is what the public API needs besides the server.
type Deps struct {
	Tasks   Tasks
	Decoder *createreq.Decoder
	Signer  Signer
	Blobs   Blobs
	// Redirect, when set, answers downloads with a 302 to a URL it
	// presigns instead of streaming them.
	Redirect Presigner
	// Ready reports whether the gateway can serve (Redis takes writes).
	Ready func(ctx context.Context) error
	// MetricsHandler, when not nil, serves /metrics on the API's port
	// (EASEL_METRICS_ON_API).
	MetricsHandler http.Handler
	// Deliveries reads tasks' webhook deliveries (GET /v1/task/webhooks).
	Deliveries WebhookLog
	// AccountHooks keeps accounts' default webhook endpoints and their
	// recent deliveries (/v1/account/webhook); nil: those routes answer
	// 503.
	AccountHooks AccountHooks
	// HookSender sends an account's test events and redeliveries, through
	// the egress policy of deliveries.
	HookSender HookSender
	// Usage reads accounts' daily usage (/v1/account/usage); nil: those
	// routes answer 503.
	Usage UsageReader
	// UsageDays is the most days a usage request may ask for (the days
	// the store keeps, store.UsageDays); 0: 31.
	UsageDays int
	// Watch wakes requests waiting on a task (query's wait, the stream);
	// nil: a hub nothing feeds (waits run to their end).
	Watch *watch.Hub
	// Pages serves the playground (nil: pages whose images come from
	// the gateway and the result URLs' origin, ImageSources).
	Pages *web.Pages
	// Uploads takes images for image_urls (POST /v1/uploads).
	Uploads Uploads
}

// Paths.
const (
	PathCreate = "/v1/task/create"
	PathQuery  = "/v1/task/query"
	// FilesPrefix starts every result URL path; the blob key follows.
	FilesPrefix = taskview.FilesPrefix
)

// Handlers are the public API's handlers: the task routes, which the
// console also serves for a signed-in user's account.
type Handlers struct {
	Deps
	s *web.Server
}

// Register adds the public API to s: the probes, /openapi.json, the
// playground, the task routes under /v1 (API keys, rate limits, request
// budgets) and the result downloads; and /metrics when MetricsHandler is
// set. It returns the task handlers for other applications to mount.
func Register(s *web.Server, d Deps) *Handlers {
	if d.Watch == nil {
		d.Watch = watch.New()
	}
	if d.UsageDays == 0 {
		d.UsageDays = 31
	}
	if d.Pages == nil {
		d.Pages = web.NewPages(ImageSources(d.Signer, d.Redirect != nil, s.Now())...)
	}
	h := &Handlers{Deps: d, s: s}
	e := s.Echo
	web.Get(e, "/healthz", web.Healthz)
	web.Get(e, "/readyz", web.Readyz(d.Ready))
	web.Get(e, "/openapi.json", h.openapi)
	web.Get(e, "/playground", h.playground)
	web.Get(e, "/playground/*", h.playground)

	v1 := e.Group("/v1")
	query := s.Limit(ratelimit.Query)
	v1.POST("/task/create", h.Create, s.Deadline, s.Authenticate, s.Limit(ratelimit.Create))
	web.Get(v1, "/task/query", h.Query, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/task/webhooks", h.Webhooks, s.Deadline, s.Authenticate, query)
	v1.POST("/task/cancel", h.Cancel, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/task/list", h.List, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/task/stream", h.Stream, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/account/webhook", h.AccountWebhook, s.Deadline, s.Authenticate, query)
	v1.PUT("/account/webhook", h.SetAccountWebhook, s.Deadline, s.Authenticate, query)
	v1.DELETE("/account/webhook", h.DeleteAccountWebhook, s.Deadline, s.Authenticate, query)
	v1.POST("/account/webhook/test", h.TestAccountWebhook, s.Deadline, s.Authenticate, query)
	v1.POST("/account/webhook/redeliver", h.Redeliver, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/account/webhook/deliveries", h.AccountDeliveries, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/account/usage", h.AccountUsage, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/account/usage.csv", h.AccountUsageCSV, s.Deadline, s.Authenticate, query)
	web.Get(v1, "/files/*", h.download)
	// Reading the body may take longer than a request's budget: past it,
	// the handler gives its calls budgets of their own.
	v1.POST("/uploads", h.Upload, s.Deadline, s.Authenticate, s.Limit(ratelimit.Create))
	if d.MetricsHandler != nil {
		web.Get(e, "/metrics", echo.WrapHandler(d.MetricsHandler))
	}
	return h
}

// ImageSources are the origins besides the gateway's own that pages
// showing results load images from: the result URLs' origin (signer's, at
// now), and any https origin when downloads redirect to the result
// store's presigned URLs.
func ImageSources(signer Signer, redirect bool, now time.Time) []string {
	var out []string
	if o := resultsOrigin(signer, now); o != "" {
		out = append(out, o)
	}
	if redirect {
		out = append(out, "https:")
	}
	return out
}

// resultsOrigin is the scheme://host[:port] of result URLs, "" when it
// cannot be told.
func resultsOrigin(signer Signer, now time.Time) string {
	if signer == nil {
		return ""
	}
	u, err := url.Parse(signer.Sign(FilesPrefix, now))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(u.Host, " ;,'\"") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
