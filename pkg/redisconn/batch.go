package redisconn

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Batcher sends the commands of many callers together: go-redis's
// autopipeliner writes what callers submitted while the previous batch was
// on the wire as one pipeline (one write and one read for the lot, on
// both sides, instead of a round trip each). Each caller waits for its
// command with its own context: a request's deadline holds against a hung
// Redis, which the autopipeliner's blocking face does not give (it runs a
// batch on a context of its own). A wait given up may still have been
// sent: the command may run later, as a reply lost on a timeout may have.
type Batcher struct {
	ap *redis.AutoPipeliner
}

// NewBatcher returns a batcher on rdb (a single server or a cluster: a
// batch goes to the nodes of its keys), which closes with rdb or Close.
// The client's retry setting applies to whole batches, so a client with
// retries off (Options.NoRetries) never sends a command twice.
//
// At most maxQueued commands wait for Redis at once (0: DefaultMaxQueued):
// while Redis hangs, abandoned commands stay queued until their batch
// fails, and new ones past the bound fail at once with
// redis.ErrAutoPipelineQueueFull, never sent (NotSent), instead of
// growing the process without bound.
func NewBatcher(rdb redis.UniversalClient, maxQueued int) (*Batcher, error) {
	if maxQueued <= 0 {
		maxQueued = DefaultMaxQueued
	}
	o := redis.DefaultAutoPipelineOptions()
	o.MaxQueuedCommands = maxQueued
	ap, err := rdb.AsyncAutoPipelineWithOptions(o)
	if err != nil {
		return nil, fmt.Errorf("redis: autopipeliner: %w", err)
	}
	return &Batcher{ap: ap}, nil
}

// DefaultMaxQueued bounds a batcher's commands waiting for Redis: a
// command is at most a few KB (a create's input), so 10,000 are tens of
// MB at worst, and a gateway under full load has a few hundred at once.
const DefaultMaxQueued = 10_000

// Close stops the batcher (commands still queued are sent first).
func (b *Batcher) Close() error { return b.ap.Close() }

// ErrAbandoned is wrapped by the error of a command whose caller's context
// ended before its reply: it may have run, or may still run.
var ErrAbandoned = errors.New("redis: reply not awaited")

// Do sends cmd in the next batch and waits for its reply or for ctx. It
// returns the command's error once it ran; if ctx ends first, an error
// wrapping ErrAbandoned and ctx's error, and cmd must not be read (its
// batch may still be filling it in).
func (b *Batcher) Do(ctx context.Context, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		// Not sent: nothing to abandon.
		cmd.SetErr(err)
		return err
	}
	err := b.ap.Submit(ctx, cmd).WaitContext(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w: %w", ErrAbandoned, err)
	}
	return err
}

// Batched is rdb with its scripts (EVALSHA, EVAL) and the reads of a
// request's hot path (HGETALL, HMGET) sent through b: the client to give
// code that takes a redis.UniversalClient (Asynq's client, the rate
// limiter) and runs those commands per request. Everything else goes to rdb
// as it is.
func Batched(rdb redis.UniversalClient, b *Batcher) redis.UniversalClient {
	return &batched{UniversalClient: rdb, b: b}
}

type batched struct {
	redis.UniversalClient
	b *Batcher
}

// run sends cmd through the batcher; an abandoned command is answered
// with a command of its own carrying the error, never cmd (which its batch
// may still write).
func run[C redis.Cmder](ctx context.Context, b *Batcher, cmd C, failed func() C) C {
	if err := b.Do(ctx, cmd); errors.Is(err, ErrAbandoned) {
		f := failed()
		f.SetErr(err)
		return f
	}
	return cmd
}

func (c *batched) script(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // a cluster routes the script by its first key
	}
	return run(ctx, c.b, cmd, func() *redis.Cmd { return redis.NewCmd(ctx) })
}

func (c *batched) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.script(ctx, "evalsha", sha, keys, args)
}

func (c *batched) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.script(ctx, "eval", script, keys, args)
}

func (c *batched) HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd {
	return run(ctx, c.b, redis.NewMapStringStringCmd(ctx, "hgetall", key),
		func() *redis.MapStringStringCmd { return redis.NewMapStringStringCmd(ctx) })
}

func (c *batched) HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd {
	a := make([]any, 0, 2+len(fields))
	a = append(a, "hmget", key)
	for _, f := range fields {
		a = append(a, f)
	}
	return run(ctx, c.b, redis.NewSliceCmd(ctx, a...), func() *redis.SliceCmd { return redis.NewSliceCmd(ctx) })
}
