// Package gateway runs Easel's API gateway: the public HTTP API on Echo,
// validating requests, writing task records and enqueueing jobs, answering
// queries from the task records and serving signed result downloads.
package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/admin"
	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/api-gateway/internal/connlimit"
	"github.com/easelhq/easel/api-gateway/internal/console"
	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/api-gateway/internal/pricing"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/api-gateway/internal/tasks"
	"github.com/easelhq/easel/api-gateway/internal/watch"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/prom"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/service"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/pkg/tracing/otlp"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/pkg/users"
	"github.com/easelhq/easel/pkg/webhook"
)

// Run serves the API until ctx is done, then drains in-flight requests for up
// to EASEL_SHUTDOWN_TIMEOUT. ln, when not nil, replaces a listener on
// EASEL_HTTP_ADDR. The operations listener (EASEL_METRICS_ADDR), when on,
// serves /metrics, /healthz and /readyz until the API has drained.
func Run(ctx context.Context, cfg Config, log *zap.Logger, ln net.Listener) error {
	// Tracing, configured by the OTEL_* variables (off unless an endpoint
	// is set).
	tr, err := otlp.Setup(ctx, ServiceName, log)
	if err != nil {
		return err
	}
	defer shutdownTracing(tr, log)
	return run(ctx, cfg, log, ln, tr)
}

// ServiceName is the gateway's default service.name in traces.
const ServiceName = "easel-gateway"

// shutdownTracing exports the spans still buffered, within a few seconds.
func shutdownTracing(tr *tracing.Tracing, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans lost at shutdown", zap.Error(err))
	}
}

// run is Run with its tracing (tests give theirs).
func run(ctx context.Context, cfg Config, log *zap.Logger, ln net.Listener, tr *tracing.Tracing) error {
	cat, err := catalog.New(cfg.ModelFamily)
	if err != nil {
		return err
	}
	secret := []byte(cfg.SigningSecret)
	if len(secret) == 0 {
		// Only reachable in dev mode (config requires a secret otherwise).
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
		log.Warn("EASEL_SIGNING_SECRET is unset: using a random one; result URLs will not survive a restart and only this gateway can serve them")
	}
	// No retries: a request that fails is answered 503 at once, and a create
	// script is never sent twice.
	instance := service.InstanceID("gateway")
	deps, err := service.Open(ctx, cfg.Common, redisconn.Options{NoRetries: true, ClientName: instance}, log)
	if err != nil {
		return err
	}
	defer deps.Close()
	rdb, blobs := deps.Redis, deps.Blobs
	// With tracing on, a traced request's Redis commands are spans of its
	// trace.
	if err := tracing.InstrumentRedis(rdb, tr); err != nil {
		return err
	}
	var redirect api.Presigner
	if cfg.BlobRedirect {
		p, ok := blobs.(api.Presigner)
		if !ok {
			return fmt.Errorf("EASEL_BLOB_REDIRECT: the result store %s cannot presign URLs", blobs)
		}
		redirect = p
	}

	prices, err := pricing.Parse(cfg.Prices)
	if err != nil {
		return err
	}
	// The request path's scripts and reads ride one batcher: concurrent
	// requests' commands go to Redis together, each request waiting with
	// its own deadline (BENCHMARKS.md, "The hot path").
	batcher, err := redisconn.NewBatcher(rdb, 0)
	if err != nil {
		return err
	}
	defer batcher.Close()
	hot := redisconn.Batched(rdb, batcher)
	storeOpts := cfg.StoreOptions()
	storeOpts.Batched = hot
	db := store.NewDB(rdb, storeOpts)
	taskStore, accounts, hooks := store.NewTasks(db), store.NewAccounts(db), store.NewHooks(db)
	// Ready once Redis answered at start, then while it takes writes.
	var started atomic.Bool
	ready := func(ctx context.Context) error {
		if !started.Load() {
			return web.ErrStarting
		}
		return db.Probe(ctx, instance)
	}

	// The process's own registry: nothing registers globally.
	reg := prom.NewRegistry()
	meter := metrics.New(reg)
	meter.InitModels(modelIDs(cat))
	metricsHandler := prom.Handler(reg)
	var metricsOnAPI http.Handler
	if cfg.MetricsOnAPI {
		metricsOnAPI = metricsHandler
	}

	svc := tasks.NewService(tasks.Deps{
		Store: taskStore, Queues: store.NewQueues(db), Outbox: hooks, Queue: jobs.NewEnqueuer(hot),
		IDs: taskid.New(cfg.ModelFamily), Prices: prices, Tracing: tr,
	}, tasks.Config{Deadline: cfg.TaskDeadline, MaxInflight: cfg.MaxInflight})
	// One subscription to the task events for every waiting request of
	// this gateway (query's wait, the stream).
	hub := watch.New()
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHub()
	go hub.Run(hubCtx, taskStore, log)
	userStore := store.NewUsers(db)
	signIn := users.Defaults
	signIn.Idle, signIn.Max = cfg.ConsoleIdle, cfg.ConsoleMax
	// A sign-in's Redis calls get an API request's budget (its wait for a
	// hashing slot and its hash are bounded apart).
	signIn.Budget = 2 * cfg.RedisTimeout
	people, err := users.New(userStore, signIn)
	if err != nil {
		return err
	}
	// users.New hashed the sign-in decoy: argon2's 19 MiB, garbage now.
	// Collected at once, so that the heap's next goal is set from the live
	// heap (a few MB) and not from the hash's (at GOGC 400, 5 × 19 MiB: the
	// gateway's peak RSS under load doubled with it).
	runtime.GC()
	// The workers' upstream pool, as they recorded it.
	upstreams := func(ctx context.Context) ([]upstream.Status, error) { return upstream.Statuses(ctx, rdb) }
	upstreamsFile := func(ctx context.Context) (*upstream.FileState, error) { return upstream.ReadFileState(ctx, rdb) }
	signer := signedurl.New(secret, cfg.PublicURL)
	edge := web.New(web.Config{
		Log:     log,
		Auth:    auth.New(accounts, 100_000, cfg.AuthCacheTTL),
		Limiter: ratelimit.New(hot),
		Limits:  web.Limits{Create: cfg.RateLimit, Query: cfg.QueryRateLimit},
		// What requests get while the limiter cannot reach Redis.
		RateLimitFailOpen: cfg.RateLimitFailOpen,
		// Failed authentications per client address, network and in all,
		// before Redis.
		AuthGuard:      auth.NewGuard(auth.GuardLimits{PerAddress: cfg.AuthFailRate, PerPrefix: cfg.AuthFailPrefixRate, Global: cfg.AuthFailGlobalRate}),
		TrustedProxies: cfg.trustedProxies(),
		// An API request's Redis calls share this budget (each is bounded by
		// EASEL_REDIS_TIMEOUT too): a Redis that is down or hung costs a
		// client a 503 within it.
		RequestTimeout: 2 * cfg.RedisTimeout,
		Metrics:        meter,
		Tracing:        tr,
	})
	// The pages (the playground, the console) show results: their images
	// come from the result URLs' origin, or the bucket's.
	pages := web.NewPages(api.ImageSources(signer, redirect != nil, time.Now())...)
	public := api.Register(edge, api.Deps{
		Tasks: svc,
		// Uploads' URLs are this service's, read by the workers from the
		// blob store: the decoder tells them by path and signature.
		Decoder:        &createreq.Decoder{Catalog: cat, Egress: cfg.EgressPolicy(), Uploads: signer},
		Signer:         signer,
		Blobs:          blobs,
		Redirect:       redirect,
		Ready:          ready,
		MetricsHandler: metricsOnAPI,
		Watch:          hub,
		// A task's webhook deliveries (GET /v1/task/webhooks).
		Deliveries: hooks,
		// The accounts' default endpoints, their test events and
		// redeliveries (/v1/account/webhook), sent as the workers send
		// deliveries: through the egress policy.
		AccountHooks: hooks,
		HookSender:   webhook.NewClient(webhook.Options{Policy: cfg.EgressPolicy()}),
		Usage:        accounts,
		UsageDays:    store.UsageDays,
		Pages:        pages,
		Uploads: api.Uploads{Counter: store.NewUploads(db), Blobs: blobs,
			BytesPerDay: int64(cfg.UploadMBPerDay) << 20, MaxPixels: int64(cfg.FetchMaxMegapix) * 1_000_000},
	})
	if cfg.AdminToken != "" {
		admin.Register(edge, admin.Deps{Token: cfg.AdminToken, Accounts: accounts, Secrets: hooks, Catalog: cat, Users: people, Upstreams: upstreams, UpstreamsFile: upstreamsFile})
	}
	if cfg.Console {
		console.Register(edge, console.Deps{Users: people, Accounts: accounts, Directory: userStore, Secrets: hooks, Catalog: cat,
			Tasks: public, Upstreams: upstreams, UpstreamsFile: upstreamsFile, Pages: pages,
			SecureCookie: strings.HasPrefix(cfg.PublicURL, "https://"), Origins: []string{originOf(cfg.PublicURL)}, KeyCacheTTL: cfg.AuthCacheTTL})
	}
	handler := edge.Handler()

	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("gateway listener: %w", err)
		}
	}
	ops, err := serveOps(cfg, web.NewOps(web.OpsDeps{Ready: ready, Metrics: metricsHandler}), log)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer ops.stop()
	// Large results go to slow clients: ten minutes to write a response.
	srv := service.NewHTTPServer(handler, 10*time.Minute, cfg.HTTPIdleTimeout, log)
	// Shutting down: waiting requests answer now, streams end.
	srv.RegisterOnShutdown(hub.Close)
	files := service.FileLimit()
	caps := cfg.connCaps(files)
	capped := connlimit.Wrap(ln, caps)
	srv.ConnState = capped.ConnState
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(capped) }()
	log.Info("gateway listening",
		zap.String("addr", ln.Addr().String()),
		zap.String("public_url", cfg.PublicURL),
		zap.Strings("models", modelIDs(cat)),
		zap.String("blob_url", blobs.String()),
		zap.String("prices", prices.String()),
		zap.Bool("admin_api", cfg.AdminToken != ""),
		zap.Uint64("file_limit", files),
		zap.Int("max_conns", caps.Total),
		zap.Int("max_conns_per_client", caps.PerClient),
		zap.Int("max_conns_per_network", caps.PerNetwork),
		zap.String("metrics_addr", ops.addr()),
		zap.Bool("metrics_on_api", cfg.MetricsOnAPI))

	// Serving already (/healthz answers, /readyz says not ready), wait for
	// Redis, then do what needs it.
	if err := start(ctx, cfg, deps, accounts, people, log); err != nil {
		_ = srv.Close()
		return err
	}
	started.Store(true)
	log.Info("gateway ready")

	select {
	case err := <-serveErr:
		return fmt.Errorf("gateway: %w", err)
	case err := <-ops.err:
		_ = srv.Close()
		return fmt.Errorf("gateway operations listener: %w", err)
	case <-ctx.Done():
	}
	log.Info("gateway shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// Requests still running, or connections that never sent one, past
		// the grace period: close them.
		log.Warn("shutdown grace period over; closing the remaining connections", zap.Error(err))
		_ = srv.Close()
	}
	// The counts of tasks out of their queues a cluster's store holds to
	// batch them (store.DB.FlushQueueCounts): written before it goes.
	_ = db.FlushQueueCounts(shutdownCtx)
	log.Info("gateway stopped")
	return nil
}

// opsServer is the operations listener, or nothing when it is off.
type opsServer struct {
	srv *http.Server
	ln  net.Listener
	err chan error // never receives when off
}

// serveOps starts the operations listener on EASEL_METRICS_ADDR, if set.
func serveOps(cfg Config, h http.Handler, log *zap.Logger) (*opsServer, error) {
	o := &opsServer{err: make(chan error, 1)}
	if cfg.MetricsAddr == "" {
		return o, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("gateway operations listener (EASEL_METRICS_ADDR): %w", err)
	}
	o.ln = ln
	o.srv = service.NewHTTPServer(h, 30*time.Second, cfg.HTTPIdleTimeout, log)
	go func() { o.err <- o.srv.Serve(ln) }()
	return o, nil
}

func (o *opsServer) addr() string {
	if o.ln == nil {
		return ""
	}
	return o.ln.Addr().String()
}

func (o *opsServer) stop() {
	if o.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := o.srv.Shutdown(ctx); err != nil {
		_ = o.srv.Close()
	}
}

// start waits for Redis and makes the dev key work, if one is set.
func start(ctx context.Context, cfg Config, deps *service.Deps, accounts *store.Accounts, people *users.Service, log *zap.Logger) error {
	if err := deps.WaitRedis(ctx, cfg.Common, log); err != nil {
		return err
	}
	if cfg.DevAPIKey == "" {
		return nil
	}
	// Generous limits, so local load tests are not throttled. Each step is
	// tried again while Redis is slow to answer (both are safe to repeat).
	var a *account.Account
	err := redisconn.Retry(ctx, cfg.RedisStartTimeout, log, "EASEL_DEV_API_KEY", func(ctx context.Context) (err error) {
		a, err = accounts.EnsureKey(ctx, cfg.DevAPIKey, account.Spec{Name: "dev", Credits: cfg.DevCredits,
			RateLimit: 1000, QueryRateLimit: 5000, MaxInflight: 5000})
		return err
	})
	if err != nil {
		return fmt.Errorf("EASEL_DEV_API_KEY: %w", err)
	}
	log.Warn("EASEL_DEV_API_KEY is set: its account can use the API (development only)", zap.String("account_id", a.ID))
	if cfg.DevUserEmail == "" {
		return nil
	}
	// The dev account's console user, an admin; made once (every gateway
	// tries: the first wins, the others find it).
	err = redisconn.Retry(ctx, cfg.RedisStartTimeout, log, "EASEL_DEV_USER_EMAIL", func(ctx context.Context) error {
		if _, err := people.Create(ctx, a.ID, cfg.DevUserEmail, cfg.DevUserPassword, true); err != nil && apperr.CodeOf(err) != apperr.Conflict {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("EASEL_DEV_USER_EMAIL: %w", err)
	}
	log.Warn("EASEL_DEV_USER_EMAIL is set: a console user of the dev account (development only)", zap.String("email", cfg.DevUserEmail))
	return nil
}

// originOf is the scheme://host of a URL, "" if it has none.
func originOf(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" || p.Host == "" {
		return ""
	}
	return p.Scheme + "://" + p.Host
}

func modelIDs(c *catalog.Catalog) []string {
	var ids []string
	for _, m := range c.Models() {
		ids = append(ids, m.ID)
	}
	return ids
}
