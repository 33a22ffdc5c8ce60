// Package gatewaytest runs the gateway's HTTP applications for tests: the
// public API, the admin API and the console on one server, wired as
// gateway.go wires them, on a store over a Redis the test provides, with
// two accounts and their API keys and a disabled one.
package gatewaytest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/admin"
	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/api-gateway/internal/console"
	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/api-gateway/internal/pricing"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/api-gateway/internal/tasks"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

// AdminToken is the admin API's token in an Env.
const AdminToken = "admin-token-0123456789abcdef0123456789"

// The models of the catalog an Env serves, and the body of a create that
// works.
const (
	Standard   = "lumen-2.5-flash-image"
	Pro        = "lumen-3-pro-image-preview"
	CreateBody = `{"model":"` + Standard + `","task_type":"image","input":{"prompt":"a cat"}}`
)

// Deps are what the gateway's handler is built from: the shared server's
// configuration, the public API's, and the admin API and the console when
// they are on.
type Deps struct {
	web.Config
	api.Deps
	// Admin, when not nil, adds the admin API.
	Admin *admin.Deps
	// Console, when not nil, adds the console. Its task routes and pages
	// default to the gateway's.
	Console *console.Deps
}

// Server builds the gateway's server of d, every application registered
// (its handler taken: the routes are final).
func Server(d Deps) *web.Server {
	s := web.New(d.Config)
	public := api.Register(s, d.Deps)
	if d.Admin != nil {
		admin.Register(s, *d.Admin)
	}
	if d.Console != nil {
		c := *d.Console
		if c.Tasks == nil {
			c.Tasks = public
		}
		if c.Pages == nil {
			c.Pages = public.Pages
		}
		console.Register(s, c)
	}
	s.Handler()
	return s
}

// Handler is the handler of Server(d).
func Handler(d Deps) http.Handler { return Server(d).Echo }

// Env is a gateway handler on a private Redis, with two accounts.
type Env struct {
	T        *testing.T
	Srv      *httptest.Server
	RDB      *redis.Client
	DB       *store.DB
	Store    *store.Tasks
	Accounts *store.Accounts
	Hooks    *store.Hooks
	Blobs    *blob.FS
	Signer   *signedurl.Signer
	KeyA     string
	AcctA    string
	KeyB     string
	AcctB    string
	KeyOff   string
	// Now is the gateway's clock.
	Now time.Time
}

// QueueFunc is a task queue that queues each run through the function.
type QueueFunc func(ctx context.Context, j jobs.Ref, run string) error

func (f QueueFunc) CancelRun(context.Context, string) error { return nil }

func (f QueueFunc) QueueHook(context.Context, jobs.Outbox, jobs.DeliverWebhook) error { return nil }

func (f QueueFunc) EnqueueGenerateImage(ctx context.Context, j jobs.Ref, run string) error {
	return f(ctx, j, run)
}

// EnqueueAdmitted queues the first run of each task admitted, through f,
// as jobs.Enqueuer.EnqueueAdmitted does: the job of a task admitted is its
// Ref, its run ending at the task's run deadline.
func (f QueueFunc) EnqueueAdmitted(ctx context.Context, admitted []task.Admitted) error {
	for _, a := range admitted {
		j := jobs.Ref{AccountID: a.AccountID, TaskID: a.TaskID, Queue: a.Queue, Deadline: jobs.RunDeadline(a.Deadline)}
		if _, err := jobs.NewGenerateImageTask(j, jobs.RunID(a.TaskID, 0)); err != nil {
			return err
		}
		if err := f(ctx, j, jobs.RunID(a.TaskID, 0)); err != nil {
			return err
		}
	}
	return nil
}

// New starts a gateway on rdb (a private Redis: it writes accounts) with
// the public API and the admin API on; queue (nil: Asynq's on rdb) takes
// its jobs, log its logs, o are its store's options, and edit changes its
// dependencies before it is built.
func New(t *testing.T, rdb *redis.Client, queue tasks.Queue, log *zap.Logger, o store.Options, edit func(*Env, *Deps)) *Env {
	t.Helper()
	db := store.NewDB(rdb, o)
	e := &Env{T: t, RDB: rdb, DB: db, Store: store.NewTasks(db), Accounts: store.NewAccounts(db), Hooks: store.NewHooks(db), Now: time.Now()}
	ctx := context.Background()
	mk := func(name string, disabled bool) (string, string) {
		a, err := e.Accounts.Create(ctx, account.Spec{Name: name, Credits: 10_000})
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := e.Accounts.CreateKey(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if disabled {
			if err := e.Accounts.SetStatus(ctx, a.ID, account.Disabled); err != nil {
				t.Fatal(err)
			}
		}
		return a.ID, k
	}
	e.AcctA, e.KeyA = mk("a", false)
	e.AcctB, e.KeyB = mk("b", false)
	_, e.KeyOff = mk("off", true)

	var err error
	if e.Blobs, err = blob.OpenFS(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Blobs.Close() })
	cat, _ := catalog.New("lumen")
	if queue == nil {
		queue = jobs.NewEnqueuer(rdb)
	}
	e.Srv = httptest.NewUnstartedServer(nil)
	e.Srv.Start()
	t.Cleanup(e.Srv.Close)
	e.Signer = signedurl.New([]byte("0123456789abcdef0123456789abcdef"), e.Srv.URL)
	prices, _ := pricing.Parse(pricing.Default)
	d := Deps{
		Config: web.Config{
			Log:     log,
			Auth:    auth.New(e.Accounts, 100, 0),
			Limiter: ratelimit.New(rdb),
			Limits:  web.Limits{Create: 1000, Query: 1000},
			Now:     func() time.Time { return e.Now },
		},
		Deps: api.Deps{
			Tasks: tasks.NewService(tasks.Deps{
				Store: e.Store, Queues: store.NewQueues(db), Outbox: e.Hooks, Queue: queue,
				IDs: taskid.New("lumen"), Prices: prices,
			}, tasks.Config{Deadline: 10 * time.Minute, MaxInflight: 100}),
			Decoder: &createreq.Decoder{Catalog: cat, Uploads: e.Signer, Now: func() time.Time { return e.Now }},
			Signer:  e.Signer,
			Blobs:   e.Blobs,
			Ready:   func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
			// Test events and redeliveries reach receivers on loopback.
			AccountHooks: e.Hooks,
			HookSender:   webhook.NewClient(webhook.Options{Policy: egress.Policy{AllowPrivate: true}}),
			Usage:        e.Accounts,
			UsageDays:    store.UsageDays,
			Uploads:      api.Uploads{Counter: store.NewUploads(db), Blobs: e.Blobs},
		},
		Admin: &admin.Deps{Token: AdminToken, Accounts: e.Accounts, Secrets: e.Hooks, Catalog: cat},
	}
	if edit != nil {
		edit(e, &d)
	}
	e.Srv.Config.Handler = Handler(d)
	return e
}

// Reply is a response read whole.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object.
func (r Reply) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.Body, err)
	}
	return m
}

// Do sends a request with the headers hdr.
func (e *Env) Do(method, path string, hdr map[string]string, body string) Reply {
	e.T.Helper()
	req, err := http.NewRequest(method, e.Srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Reply{resp.StatusCode, resp.Header, b}
}

// Create creates a task with an API key.
func (e *Env) Create(key, body string) Reply {
	return e.Do("POST", "/v1/task/create", map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"}, body)
}

// Query queries a task with an API key.
func (e *Env) Query(key, id string) Reply {
	return e.Do("GET", "/v1/task/query?task_id="+url.QueryEscape(id), map[string]string{"Authorization": "Bearer " + key}, "")
}

// AssertEnvelope checks the error envelope: {"code": status, "msg": ..., "data": null}.
func AssertEnvelope(t *testing.T, r Reply, status int, msgPart string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d; want %d (body %s)", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	m := r.JSON(t)
	if len(m) != 3 {
		t.Errorf("envelope has fields %v; want code, msg, data", m)
	}
	if code, _ := m["code"].(float64); int(code) != status {
		t.Errorf("code %v; want %d", m["code"], status)
	}
	if d, ok := m["data"]; !ok || d != nil {
		t.Errorf("data %v; want null", d)
	}
	msg, _ := m["msg"].(string)
	if !strings.Contains(msg, msgPart) {
		t.Errorf("msg %q; want it to contain %q", msg, msgPart)
	}
	for _, leak := range []string{"goroutine", ".go:", "redis:", "panic", "asynq"} {
		if strings.Contains(strings.ToLower(msg), leak) {
			t.Errorf("msg %q leaks internals (%q)", msg, leak)
		}
	}
}
