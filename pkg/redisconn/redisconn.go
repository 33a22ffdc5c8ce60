// Package redisconn opens the Redis client every Easel process shares between
// its own stores and Asynq: the one constructor for one server, a Redis
// Cluster or a Sentinel-managed primary, all as a redis.UniversalClient, with
// the timeouts that let a request fail fast when Redis is down or hung; and
// it waits for Redis at start.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options tune a client.
type Options struct {
	// PoolSize is the connection pool's size (0: go-redis's default, 10
	// per CPU), per node on a cluster. A worker needs one per job it runs
	// at once, and a few more for Asynq's own loops.
	PoolSize int
	// Timeout bounds dialling, each read and write, and the wait for a
	// pooled connection (0: 400 ms). A context deadline sooner than it
	// applies too: a request's budget bounds all its Redis calls.
	Timeout time.Duration
	// NoRetries turns off go-redis's retries of a command after a network
	// error: a retried script may run twice if the server ran it before the
	// connection broke, and a caller that answers 503 at once has nothing to
	// gain from waiting.
	NoRetries bool
	// ClientName names the client's connections (CLIENT SETNAME), so
	// CLIENT LIST on a server shows which process holds each.
	ClientName string
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 400 * time.Millisecond

// Kind is the Redis deployment a URL names.
type Kind string

// Kinds.
const (
	Single   Kind = "single"   // redis://host:port/db
	Cluster  Kind = "cluster"  // redis://host:port?addr=host:port&addr=...: cluster seeds
	Sentinel Kind = "sentinel" // redis://host:port?master_name=NAME&addr=...: sentinels
)

// URLForms says which URLs EASEL_REDIS_URL takes.
const URLForms = "redis://[user:password@]host:port[/db] (one server; rediss:// for TLS), " +
	"redis://[user:password@]host1:port?addr=host2:port&addr=host3:port (a cluster, by its seed nodes), or " +
	"redis://[sentinel-user:password@]sentinel1:port?master_name=NAME&addr=sentinel2:port[&password=...] (Sentinel)"

// KindOf tells which deployment a URL names, following go-redis's own URL
// conventions: master_name= makes it Sentinel (the host and the addr= are
// sentinels), addr= without it a cluster (the host and the addr= are seed
// nodes), neither one server.
func KindOf(rawURL string) (Kind, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" || strings.Contains(u.Host, ",") {
		return "", fmt.Errorf("want %s", URLForms)
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		if q.Get("master_name") == "" {
			return "", errors.New("master_name is empty: name the master the sentinels watch")
		}
		return Sentinel, nil
	case q.Has("addr"):
		return Cluster, nil
	}
	return Single, nil
}

// New parses a Redis URL (KindOf) and returns a client of the deployment
// it names: one server, a cluster or a Sentinel-managed primary. It does
// not connect: see Wait. The caller closes it.
func New(rawURL string, o Options) (redis.UniversalClient, error) {
	kind, err := KindOf(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	// The same settings for the three kinds: go-redis's Options of each
	// name them alike.
	common := func(poolSize, maxRetries, protocol *int, clientName *string, dial, read, write, pool *time.Duration, ctxTimeout, noIdentity *bool) {
		*poolSize, *clientName = o.PoolSize, o.ClientName
		*maxRetries = 0 // go-redis's default
		if o.NoRetries {
			*maxRetries = -1
		}
		*dial, *read, *write, *pool = o.Timeout, o.Timeout, o.Timeout, o.Timeout
		// Without this go-redis ignores a context's deadline on reads: a
		// hung Redis held requests for 30 s and more.
		*ctxTimeout = true
		// Easel's stores only use RESP2-compatible replies; pinning the
		// protocol keeps replies identical across Redis versions and
		// miniredis. CLIENT SETINFO is Redis 7.2+: not sent.
		*protocol, *noIdentity = 2, true
	}
	switch kind {
	case Cluster:
		p, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		common(&p.PoolSize, &p.MaxRetries, &p.Protocol, &p.ClientName, &p.DialTimeout, &p.ReadTimeout, &p.WriteTimeout, &p.PoolTimeout, &p.ContextTimeoutEnabled, &p.DisableIdentity)
		p.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		return redis.NewClusterClient(p), nil
	case Sentinel:
		p, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		common(&p.PoolSize, &p.MaxRetries, &p.Protocol, &p.ClientName, &p.DialTimeout, &p.ReadTimeout, &p.WriteTimeout, &p.PoolTimeout, &p.ContextTimeoutEnabled, &p.DisableIdentity)
		return redis.NewFailoverClient(p), nil
	}
	p, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	common(&p.PoolSize, &p.MaxRetries, &p.Protocol, &p.ClientName, &p.DialTimeout, &p.ReadTimeout, &p.WriteTimeout, &p.PoolTimeout, &p.ContextTimeoutEnabled, &p.DisableIdentity)
	return redis.NewClient(p), nil
}

// Open is New, then a ping: for tools and tests, which want Redis now.
func Open(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	rdb, err := New(rawURL, Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	return rdb, nil
}

// Wait pings Redis until it answers, backing off from 100 ms to 2 s, for at
// most timeout: a service started before its Redis waits for it instead of
// exiting.
func Wait(ctx context.Context, rdb redis.UniversalClient, timeout time.Duration, log *zap.Logger) error {
	deadline := time.Now().Add(timeout)
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			if attempt > 1 {
				log.Info("Redis answers", zap.Int("attempts", attempt))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("redis: no answer within %s (EASEL_REDIS_START_TIMEOUT): %w", timeout, err)
		}
		if attempt == 1 {
			log.Warn("waiting for Redis", zap.Error(err), zap.Duration("for_at_most", timeout))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// Down says err is Redis not answering, in time or at all: a deadline, a
// network error (a read timed out, a connection refused or reset), or
// Unreachable. Such an error says nothing of the request: tried again, it
// may succeed.
func Down(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) || Unreachable(err)
}

// Retry runs step until it succeeds or fails other than by Redis being
// down (Down), for at most timeout, backing off from 100 ms to 2 s as Wait
// does: a start-up step after Wait (seeding a key, say) outlasts a Redis
// slow for a moment, on a loaded machine or during a failover, instead of
// stopping the process. what names the step in the log and the error.
func Retry(ctx context.Context, timeout time.Duration, log *zap.Logger, what string, step func(context.Context) error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 2*time.Second
	tries := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		tries++
		err := step(ctx)
		if err != nil && !Down(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		if err != nil && tries == 1 {
			log.Warn("Redis did not answer, trying again", zap.String("step", what), zap.Error(err), zap.Duration("for_at_most", timeout))
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(timeout))
	if err != nil && Down(err) {
		return fmt.Errorf("%s: Redis did not answer within %s (EASEL_REDIS_START_TIMEOUT): %w", what, timeout, err)
	}
	return err
}

// LogTo sends go-redis's own messages (pool dial failures and the like),
// which it otherwise prints to stderr, to l at warn level, each distinct
// message at most once every 10 s: while Redis is down, every request's
// failed dial says the same thing. go-redis keeps one process-wide logger,
// so a main function calls this once.
func LogTo(l *zap.Logger) {
	sampled := l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, 10*time.Second, 1, 0)
	}))
	redis.SetLogger(zapPrintf{sampled.Sugar().With("component", "go-redis")})
}

type zapPrintf struct{ s *zap.SugaredLogger }

func (z zapPrintf) Printf(_ context.Context, format string, v ...any) { z.s.Warnf(format, v...) }

// Unreachable says err is Redis not answering (in time, or at all) as
// this package's clients report it: a full connection pool, a closed
// client, a reply the batcher stopped waiting for. Deadlines and network
// errors are the standard library's, and callers check those themselves.
func Unreachable(err error) bool {
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) || errors.Is(err, ErrAbandoned)
}
