// Package worker runs an Easel worker: an Asynq server that takes image jobs
// off the queues named by EASEL_QUEUES, a small HTTP server for /healthz,
// /readyz and /metrics, and the janitor of the blob directory.
package worker

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/prom"
	"github.com/easelhq/easel/pkg/quota"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/service"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/pkg/tracing/otlp"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/pkg/webhook"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/imagegen/gemini"
	"github.com/easelhq/easel/worker/imagegen/pool"
	"github.com/easelhq/easel/worker/imagegen/procedural"
	"github.com/easelhq/easel/worker/internal/fetch"
	"github.com/easelhq/easel/worker/internal/metrics"
	"github.com/easelhq/easel/worker/internal/processor"
)

// Options are a worker's dependencies beyond its configuration. Zero fields
// are built from the configuration.
type Options struct {
	// Generator replaces the one EASEL_GENERATOR names.
	Generator imagegen.Generator
	// HealthListener serves /healthz, /readyz and /metrics instead of a
	// listener on EASEL_WORKER_HTTP_ADDR.
	HealthListener net.Listener
	// Tracing replaces the one the OTEL_* variables configure (the caller
	// shuts it down).
	Tracing *tracing.Tracing
}

// Run runs a worker until ctx is done, then shuts down gracefully: it stops
// taking jobs, gives running ones EASEL_SHUTDOWN_TIMEOUT to finish and puts
// the rest back on their queues.
func Run(ctx context.Context, cfg Config, log *zap.Logger, opts Options) error {
	cat, err := catalog.New(cfg.ModelFamily)
	if err != nil {
		return err
	}
	weights, err := ParseQueues(cfg.Queues)
	if err != nil {
		return err
	}
	queues := make(map[string]int, len(weights))
	for tier, w := range weights {
		queues[jobs.Queue(tier)] = w
	}
	tr := opts.Tracing
	if tr == nil {
		if tr, err = otlp.Setup(ctx, "easel-worker", log); err != nil {
			return err
		}
		defer func() {
			// The spans still buffered are sent before the worker goes.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr.Shutdown(sctx); err != nil {
				log.Warn("tracing: could not send the last spans", zap.Error(err))
			}
		}()
	}
	gen, provider := opts.Generator, "custom"
	if gen == nil && cfg.UpstreamsFile == "" {
		if gen, err = newGenerator(ctx, cfg, tr); err != nil {
			return err
		}
		provider = cfg.Generator
	}
	// A job holds a Redis connection only for its state changes, a few
	// milliseconds of a generation that waits seconds on its upstream: the
	// pool does not grow with the jobs in flight (redisPool), so thousands
	// of them share at most 60 connections with Asynq's own loops and the
	// sweeper.
	instance := service.InstanceID("worker")
	deps, err := service.Open(ctx, cfg.Common, redisconn.Options{PoolSize: redisPool(cfg.Concurrency), ClientName: instance}, log)
	if err != nil {
		return err
	}
	defer deps.Close()
	rdb, blobs := deps.Redis, deps.Blobs
	// Commands within a traced run are spans of it; the worker's
	// background loops make none.
	if err := tracing.InstrumentRedis(rdb, tr); err != nil {
		return fmt.Errorf("tracing the Redis client: %w", err)
	}

	signer := signedurl.New(resultSecret(cfg, log), cfg.PublicURL)
	fetcher := fetch.New(fetch.Options{
		// Uploaded images are read from the blob store, never fetched.
		Uploads:        signer,
		Blobs:          blobs,
		Policy:         cfg.EgressPolicy(),
		MaxBytes:       int64(cfg.FetchMaxImageMB) << 20,
		MaxTotalBytes:  int64(cfg.FetchMaxTotalMB) << 20,
		MaxPixels:      int64(cfg.FetchMaxMegapix) * 1_000_000,
		MaxDecoded:     int64(cfg.FetchMaxDecoded) << 20,
		ConnectTimeout: cfg.FetchConnTimeout,
		Timeout:        cfg.FetchTimeout,
		Tracing:        tr,
	})
	// Task state changes go straight to the pool: with one job per
	// connection there is little to batch, and go-redis's autopipeliner
	// (which the gateway uses) costs the worker more in hand-offs to its
	// flush goroutine than it saves (BENCHMARKS.md, "End-to-end drain").
	db := store.NewDB(rdb, cfg.StoreOptions())
	// The runs this worker starts name it, and its liveness key tells a
	// run it never let go because it died from one cut short by Redis
	// being away: only a death counts toward a task's crashes.
	pulse := store.NewPulse(db, instance)
	tasks, leases := store.NewTasks(db).WithPulse(pulse), store.NewLeases(db)
	retry := processor.Retry{
		MaxAttempts: cfg.RetryMaxAttempts,
		MaxElapsed:  cfg.RetryMaxElapsed,
		Initial:     cfg.RetryInitial,
		MaxInterval: min(20*time.Second, cfg.RetryMaxElapsed),
	}
	reg, meter := newMetrics(rdb, cat)
	enq := jobs.NewEnqueuer(rdb)
	hk := newHooks(store.NewHooks(db), tasks, enq,
		webhook.NewClient(webhook.Options{Policy: cfg.EgressPolicy(), Timeout: cfg.WebhookTimeout, Tracing: tr}),
		signer,
		webhook.DefaultSchedule(cfg.WebhookRetryInitial), log).traced(tr)
	popts := processor.Options{Retry: retry, Metrics: meter, Hooks: hk, Admitter: enq,
		Pacing:  processor.Pacing{Step: cfg.ProgressStep, Interval: cfg.ProgressInterval},
		Tracing: tr, Worker: instance, Upstream: provider}
	if gen == nil {
		// A pool of upstream credentials, re-read when its file changes:
		// it traces each upstream it tries.
		upstreams, err := newPool(ctx, cfg, rdb, meter, tr, log)
		if err != nil {
			return err
		}
		gen, provider, popts.Upstream = upstreams, "pool", ""
	}
	limits, err := quota.ParseLimits(cfg.UpstreamRPM, cfg.UpstreamConcurrency)
	if err != nil {
		return err
	}
	if len(limits) > 0 {
		popts.Quota = upstreamQuota{quota.New(rdb, limits, quota.Options{})}
		log.Info("upstream quota", zap.String("limits", limits.String()))
	}
	proc := processor.New(tasks, blobs, metrics.Generator(gen, provider, meter), fetcher, cat, log, popts)

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       cfg.Concurrency,
		Queues:            queues,
		TaskCheckInterval: cfg.TaskCheckInterval,
		ShutdownTimeout:   cfg.ShutdownTimeout,
		RetryDelayFunc:    func(n int, err error, _ *asynq.Task) time.Duration { return retry.Delay(n) },
		Logger:            asynqLogger{log.Sugar().With("component", "asynq")},
		LogLevel:          asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(jobs.TypeGenerateImage, func(ctx context.Context, t *asynq.Task) error {
		run, _ := asynq.GetTaskID(ctx)
		queue, _ := asynq.GetQueueName(ctx)
		deadline, _ := ctx.Deadline()
		ref, err := jobs.ParseGenerateImage(t, run, queue, deadline)
		if err != nil {
			log.Error("undecodable job; archiving it", zap.String("task_id", run), zap.Error(err))
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		}
		retry, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		return proc.Process(ctx, ref, processor.Attempt{Retry: retry, MaxRetry: maxRetry, Run: run})
	})

	hl := opts.HealthListener
	if hl == nil {
		if hl, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("worker health listener: %w", err)
		}
	}
	// Ready once started, then while Redis takes writes.
	var started atomic.Bool
	ready := func(ctx context.Context) error {
		if !started.Load() {
			return errors.New("starting")
		}
		return db.Probe(ctx, instance)
	}
	health := service.NewHTTPServer(healthHandler(ready, prom.Handler(reg)), 10*time.Second, cfg.HTTPIdleTimeout, log)
	healthErr := make(chan error, 1)
	go func() { healthErr <- health.Serve(hl) }()

	// Live already (/healthz), wait for Redis before taking jobs.
	if err := deps.WaitRedis(ctx, cfg.Common, log); err != nil {
		_ = health.Close()
		return err
	}
	// Alive before it takes a job, until it has stopped taking them.
	pulseCtx, stopPulse := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPulse()
	pulseDone := make(chan struct{})
	go func() {
		defer close(pulseDone)
		pulse.Run(pulseCtx)
	}()
	if err := srv.Start(mux); err != nil {
		_ = health.Close()
		return fmt.Errorf("start asynq server: %w", err)
	}
	// Webhook deliveries, on a server of their own.
	var hooksSrv *hookServer
	if cfg.WebhookConcurrency > 0 {
		hooksSrv = newHookServer(rdb, cfg, hk, log)
	}
	if err := hooksSrv.start(); err != nil {
		srv.Shutdown()
		_ = health.Close()
		return fmt.Errorf("start the webhook server: %w", err)
	}
	started.Store(true)
	log.Info("worker started",
		zap.Any("queues", queues),
		zap.Int("concurrency", cfg.Concurrency),
		zap.Int("webhook_concurrency", cfg.WebhookConcurrency),
		zap.String("generator", cfg.Generator),
		zap.String("health_addr", hl.Addr().String()),
		zap.String("blob_url", blobs.String()))

	background, stopBackground := context.WithCancel(ctx)
	var backgroundDone sync.WaitGroup
	backgroundDone.Add(3)
	go func() {
		defer backgroundDone.Done()
		runJanitor(background, blobs, cfg.BlobRetention, log)
	}()
	go func() {
		defer backgroundDone.Done()
		sw := newSweeper(tasks, enq, hk, meter, log)
		everyUnderLease(background, leases, "orphans", orphanEvery, func(ctx context.Context) { sw.takeOverOrphans(ctx) })
	}()
	go func() {
		defer backgroundDone.Done()
		newRecovery(tasks, leases, enq, hk, meter, instance, log).run(background)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-healthErr:
		runErr = fmt.Errorf("worker health server: %w", err)
	}
	log.Info("worker shutting down")
	shutdown(srv, hooksSrv) // waits for running jobs up to ShutdownTimeout
	stopBackground()
	backgroundDone.Wait()
	stopPulse()
	<-pulseDone
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Stopped, not dead: a run the shutdown ran out of time for is no
	// crash when it runs again.
	if err := pulse.Stop(shutdownCtx); err != nil {
		log.Warn("could not record the worker's stop", zap.Error(err))
	}
	// The counts of tasks out of their queues a cluster's store holds to
	// batch them (store.DB.FlushQueueCounts): written before it goes.
	_ = db.FlushQueueCounts(shutdownCtx)
	_ = health.Shutdown(shutdownCtx)
	log.Info("worker stopped")
	return runErr
}

// hookServer is the Asynq server of webhook deliveries: the "webhooks"
// queue only, with its own concurrency.
type hookServer struct {
	srv *asynq.Server
	mux *asynq.ServeMux
}

func newHookServer(rdb redis.UniversalClient, cfg Config, h *hooks, log *zap.Logger) *hookServer {
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              cfg.WebhookConcurrency,
		Queues:                   map[string]int{jobs.WebhookQueue: 1},
		TaskCheckInterval:        cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: hookCheckInterval,
		ShutdownTimeout:          cfg.ShutdownTimeout,
		RetryDelayFunc:           func(n int, err error, _ *asynq.Task) time.Duration { return h.retryDelay(n, err) },
		Logger:                   asynqLogger{log.Sugar().With("component", "asynq-webhooks")},
		LogLevel:                 asynq.ErrorLevel, // a delivery given up on is logged by deliver
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(jobs.TypeDeliverWebhook, func(ctx context.Context, t *asynq.Task) error {
		d, err := jobs.ParseDeliverWebhook(t)
		if err != nil {
			id, _ := asynq.GetTaskID(ctx)
			log.Error("undecodable webhook job; archiving it", zap.String("job", id), zap.Error(err))
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		}
		retried, _ := asynq.GetRetryCount(ctx)
		if err := h.deliver(ctx, d, retried); errors.Is(err, errGiveUp) {
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		} else if err != nil {
			return err
		}
		return nil
	})
	return &hookServer{srv: srv, mux: mux}
}

func (s *hookServer) start() error {
	if s == nil {
		return nil
	}
	return s.srv.Start(s.mux)
}

// shutdown stops the servers at once, each waiting for its running jobs
// up to its shutdown timeout.
func shutdown(srv *asynq.Server, hs *hookServer) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.Shutdown()
	}()
	if hs != nil {
		hs.srv.Shutdown()
	}
	wg.Wait()
}

// resultSecret is the key of the result URLs in webhook bodies: the
// gateways' EASEL_SIGNING_SECRET. Without it those URLs could not be
// verified: a random key stands in, and the worker says so.
func resultSecret(cfg Config, log *zap.Logger) []byte {
	if cfg.SigningSecret != "" {
		return []byte(cfg.SigningSecret)
	}
	if cfg.WebhookConcurrency > 0 {
		log.Warn("EASEL_SIGNING_SECRET is unset on this worker: the result URLs in its webhook bodies will not verify; set it to the gateways' secret")
	}
	b := make([]byte, MinSecretLen)
	_, _ = crand.Read(b)
	return b
}

// newGenerator builds the generator EASEL_GENERATOR names. A new provider
// is a package under imagegen/ and a case here.
func newGenerator(ctx context.Context, cfg Config, tr *tracing.Tracing) (imagegen.Generator, error) {
	switch cfg.Generator {
	case "procedural":
		return procedural.New(procedural.Options{Delay: cfg.SimDelay, DecodeBudget: int64(cfg.DecodeBudgetMB) << 20})
	case "gemini":
		models, err := ParseModelMap(cfg.GeminiModels)
		if err != nil {
			return nil, err
		}
		return gemini.New(ctx, gemini.Config{APIKey: cfg.GeminiAPIKey, BaseURL: cfg.GeminiBaseURL, Models: models, Timeout: cfg.GeminiTimeout, Tracing: tr})
	}
	return nil, fmt.Errorf("unknown generator %q", cfg.Generator)
}

// newPool loads EASEL_UPSTREAMS_FILE into a pool and watches it (every
// EASEL_UPSTREAMS_RELOAD, and on SIGHUP) until ctx is done.
func newPool(ctx context.Context, cfg Config, rdb redis.UniversalClient, meter *metrics.Metrics, tr *tracing.Tracing, log *zap.Logger) (*pool.Pool, error) {
	models, err := ParseModelMap(cfg.GeminiModels)
	if err != nil {
		return nil, err
	}
	newGen := func(ctx context.Context, u upstream.Upstream) (imagegen.Generator, error) {
		m := maps.Clone(models)
		for t, id := range u.ModelIDs {
			m[catalog.Tier(t)] = id
		}
		return gemini.New(ctx, gemini.Config{APIKey: u.APIKey, BaseURL: u.BaseURL, Models: m, Timeout: cfg.GeminiTimeout,
			Vertex: u.Provider == upstream.Vertex, Project: u.Project, Location: u.Location, CredentialsFile: u.CredentialsFile,
			Tracing: tr})
	}
	data, err := os.ReadFile(cfg.UpstreamsFile)
	if err != nil {
		return nil, fmt.Errorf("EASEL_UPSTREAMS_FILE: %w", err)
	}
	pl, err := upstream.Parse(data, cfg.lookup)
	if err != nil {
		return nil, fmt.Errorf("EASEL_UPSTREAMS_FILE: %w", err)
	}
	p := pool.New(rdb, newGen, meter, log)
	// A probe holds its breaker as long as a call may take.
	p.ProbeLease = max(p.ProbeLease, cfg.GeminiTimeout+30*time.Second)
	if tr.Enabled() {
		p.Tracer = tr.Provider().Tracer(processor.TracerName)
	}
	if err := p.Load(ctx, pl, data); err != nil {
		return nil, fmt.Errorf("EASEL_UPSTREAMS_FILE: %w", err)
	}
	p.LoadedFrom(ctx, cfg.UpstreamsFile)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		p.Watch(ctx, cfg.UpstreamsFile, cfg.lookup, cfg.UpstreamsReload, hup)
	}()
	return p, nil
}

// upstreamQuota adapts quota.Quota to the processor's Quota.
type upstreamQuota struct{ q *quota.Quota }

func (u upstreamQuota) Acquire(ctx context.Context, model string) (func(), error) {
	slot, err := u.q.Acquire(ctx, model)
	if err != nil {
		return nil, err
	}
	return slot.Release, nil
}

func (u upstreamQuota) Throttled(ctx context.Context, model string, retryAfter time.Duration) error {
	return u.q.Throttled(ctx, model, retryAfter)
}

// redisPool is the Redis pool size of a worker running concurrency jobs at
// once: one connection a job up to 44, and 16 for Asynq's loops (dequeue,
// heartbeat, recovery) and the sweeper. Connections outside the pool
// (Asynq's cancellation subscription among them) add a few more: 60 leaves
// the worker within the 64 connections `easelbench --only inflight` allows.
func redisPool(concurrency int) int { return min(concurrency, 44) + 16 }

// newMetrics makes the process's own registry (nothing registers
// globally) with the worker's metrics, and Asynq's collector of the
// queues' metrics, which reads them from Redis at each scrape: every
// worker exports the same queue figures.
func newMetrics(rdb redis.UniversalClient, cat *catalog.Catalog) (*prometheus.Registry, *metrics.Metrics) {
	reg := prom.NewRegistry()
	meter := metrics.New(reg)
	meter.InitModels(modelIDs(cat))
	reg.MustRegister(asynqmetrics.NewQueueMetricsCollector(asynq.NewInspectorFromRedisClient(rdb)))
	return reg, meter
}

// healthHandler serves /healthz (the process lives), /readyz (it has
// started and Redis takes its writes) and /metrics.
func healthHandler(ready func(ctx context.Context) error, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Cache-Control", "no-store")
			write(w, http.StatusServiceUnavailable, map[string]any{"code": http.StatusServiceUnavailable, "msg": "not ready: Redis is unreachable or refuses writes, or the worker is starting", "data": nil})
			return
		}
		write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

// asynqLogger adapts zap to Asynq's logger.
type asynqLogger struct{ s *zap.SugaredLogger }

func (l asynqLogger) Debug(args ...any) { l.s.Debug(args...) }
func (l asynqLogger) Info(args ...any)  { l.s.Info(args...) }
func (l asynqLogger) Warn(args ...any)  { l.s.Warn(args...) }
func (l asynqLogger) Error(args ...any) { l.s.Error(args...) }
func (l asynqLogger) Fatal(args ...any) { l.s.Fatal(args...) }

func modelIDs(c *catalog.Catalog) []string {
	var ids []string
	for _, m := range c.Models() {
		ids = append(ids, m.ID)
	}
	return ids
}
