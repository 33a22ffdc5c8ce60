// Package service is what every Easel service process does around its own
// work: the thin main (a signal-cancelled context, one run function, an exit
// status), the logger, and the dependencies both services open from the
// common configuration (the Redis client, the blob store, the profiler).
package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/pkg/debugserver"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/redisconn"
)

// Main runs run with a context cancelled by SIGINT or SIGTERM, and exits 1,
// printing the error under the service's name, if it fails.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Configured is a service's configuration: it embeds config.Common.
type Configured interface {
	CommonSettings() config.Common
}

// Start loads a service's configuration (load is its LoadConfig), builds its
// logger on stderr as the configuration asks (go-redis's own messages go to
// it too), sets the Go memory limit (SetMemoryLimit: GOMEMLIMIT, else from
// the container's memory limit, else the configuration's MemoryFallback)
// and GOGC, when unset, to the configuration's GCPercentDefault, runs run, and flushes the logger when run returns.
func Start[C Configured](ctx context.Context, name string, load func(environ map[string]string) (C, error), run func(ctx context.Context, cfg C, log *zap.Logger) error) error {
	cfg, err := load(nil)
	if err != nil {
		return err
	}
	c := cfg.CommonSettings()
	log, err := logging.New(os.Stderr, c.LogLevel, c.LogFormat, name)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	redisconn.LogTo(log)
	SetMemoryLimit(log, fallbackOf(cfg))
	SetGCPercent(log, cfg)
	return run(ctx, cfg, log)
}

// Deps are what every service opens from the common configuration.
type Deps struct {
	Redis redis.UniversalClient
	Blobs blob.Store
	close []func() error
}

// Open opens the profiler (when EASEL_PPROF_ADDR is set), a Redis client
// (its options beyond the common configuration's timeout in redis) and the
// blob store. It does not wait for Redis (WaitRedis does). Close releases
// them.
func Open(ctx context.Context, c config.Common, redis redisconn.Options, log *zap.Logger) (_ *Deps, err error) {
	d := &Deps{}
	defer func() {
		if err != nil {
			_ = d.Close() // what opened before the failure
		}
	}()
	stopPprof, err := debugserver.Start(c.PprofAddr, log)
	if err != nil {
		return nil, fmt.Errorf("EASEL_PPROF_ADDR: %w", err)
	}
	d.close = append(d.close, func() error { stopPprof(); return nil })
	redis.Timeout = c.RedisTimeout
	if d.Redis, err = redisconn.New(c.RedisURL, redis); err != nil {
		return nil, err
	}
	d.close = append(d.close, d.Redis.Close)
	if d.Blobs, err = blob.Open(ctx, c.BlobConfig()); err != nil {
		return nil, err
	}
	d.close = append(d.close, d.Blobs.Close)
	if b, ok := d.Blobs.(interface{ Check(context.Context) error }); ok {
		// A missing bucket or refused credentials, said at start; not fatal:
		// the service may start before its store, and stays useful
		// meanwhile for all but results.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := b.Check(cctx); err != nil {
			log.Error("the result store does not answer: results cannot be stored or served until it does", zap.String("blob_url", d.Blobs.String()), zap.Error(err))
		}
		cancel()
	}
	return d, nil
}

// WaitRedis waits for Redis to answer, for at most EASEL_REDIS_START_TIMEOUT.
func (d *Deps) WaitRedis(ctx context.Context, c config.Common, log *zap.Logger) error {
	return redisconn.Wait(ctx, d.Redis, c.RedisStartTimeout, log)
}

// InstanceID names this process for the readiness probe and logs: host name
// and process id.
func InstanceID(service string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%s:%d", service, host, os.Getpid())
}

// Close releases what Open opened, last first. A nil Deps has nothing to
// release.
func (d *Deps) Close() error {
	if d == nil {
		return nil
	}
	var errs []error
	for i := len(d.close) - 1; i >= 0; i-- {
		errs = append(errs, d.close[i]())
	}
	d.close = nil
	return errors.Join(errs...)
}

// HTTP server limits every Easel listener shares. WriteTimeout is the
// caller's: the gateway streams large results to slow clients.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// NewHTTPServer returns a server for h with Easel's timeouts: a client must
// send its headers within ReadHeaderTimeout and its request within
// ReadTimeout, gets writeTimeout for the response, and an idle keep-alive
// connection is closed after idleTimeout (EASEL_HTTP_IDLE_TIMEOUT).
func NewHTTPServer(h http.Handler, writeTimeout, idleTimeout time.Duration, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.With(zap.String("component", "http"))),
	}
}
