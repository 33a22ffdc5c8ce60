package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// A task's whole life in Redis, create → complete, counted in the drain
// part: the real gateway and worker (zero-delay generator, the fair share
// at its default, one account's backlog over it) against raw Asynq
// enqueueing and processing as many no-op tasks. The commands are counted
// in a counting round of their own (the first round, after its throughput
// runs), with MONITOR on: MONITOR costs Redis CPU, so the throughput and
// CPU figures come from the throughput runs, which run without it.

// lifeCounts are the Redis commands of a task's whole life, per task and
// by command: Sent, the commands clients sent (round trips: MONITOR's
// lines from a client, a script's own left out); Stats, INFO commandstats
// (every command, the scripts' own included), summed over the masters of
// a cluster. The benchmark's own commands are left out of both.
type lifeCounts struct {
	Tasks int64              `json:"tasks"`
	Sent  map[string]float64 `json:"sent_per_task"`
	Stats map[string]float64 `json:"commandstats_per_task"`
	// PeakParked is the most tasks of the account parked past its fair
	// share at once, sampled while counting (the real side): above 0, the
	// backlog was over the share.
	PeakParked *int64 `json:"peak_parked,omitempty"`
}

// lifeCountTasks is how many tasks a counting round runs (fewer with a
// smaller --drain).
const lifeCountTasks = 2000

func (o options) lifeTasks() int { return max(1, min(lifeCountTasks, o.drain)) }

// lifeSettle is how long the real side's counting runs on after the last
// task is completed: the worker acknowledges a job to Asynq after its task
// is recorded completed.
const lifeSettle = 200 * time.Millisecond

// baselineEnqueuers is how many enqueues the baseline runs at once, as the
// count and create runs send 32 creates at once to the gateway.
const baselineEnqueuers = 32

// enqueueBaseline enqueues n no-op jobs on the baseline's queue, 32 at a
// time through an autopipelined client: the baseline gateway's set-up, so
// that Redis's CPU per enqueue is that of a gateway's, not of one client
// waiting out each round trip.
func (e *env) enqueueBaseline(ctx context.Context, n int) error {
	ap, err := e.rdb.AutoPipeline()
	if err != nil {
		return err
	}
	defer ap.Close()
	client := asynq.NewClientFromRedisClient(ap)
	payload := []byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"a lighthouse on a cliff at dusk, oil painting","aspect_ratio":"1:1"}}`)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, baselineEnqueuers)
	for range baselineEnqueuers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask(baselineType, payload, asynq.Queue(baselineQueue))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// ownCommands counts the commands the benchmark sends on a client of its
// own while a count runs, by name, to take them out of the count.
type ownCommands struct {
	mu sync.Mutex
	n  map[string]int64
}

func (h *ownCommands) add(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int64{}
	}
	for _, c := range cmds {
		h.n[strings.ToLower(c.Name())]++
	}
}

func (h *ownCommands) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n = map[string]int64{}
}

func (h *ownCommands) counts() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(h.n))
	for k, v := range h.n {
		out[k] = v
	}
	return out
}

func (h *ownCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ownCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}

func (h *ownCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}

// commandstats reads INFO commandstats, summed over the masters, without
// the counting's own commands.
func commandstats(ctx context.Context, rdb redis.UniversalClient) (map[string]float64, error) {
	stats := map[string]float64{}
	var mu sync.Mutex
	if err := eachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for name, st := range redisproc.ParseCommandstats(info) {
			stats[name] += float64(st.Calls)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for _, own := range []string{"info", "config|resetstat", "monitor", "echo"} {
		delete(stats, own)
	}
	return stats, nil
}

// startCount zeroes every master's commandstats and starts MONITOR on
// each: the commands from here on are counted.
func (e *env) startCount(ctx context.Context) (*monitors, error) {
	if err := eachServer(ctx, e.rdb, func(ctx context.Context, c *redis.Client) error {
		return c.ConfigResetStat(ctx).Err()
	}); err != nil {
		return nil, err
	}
	mon := &monitors{}
	if err := mon.start(ctx, e.rdb); err != nil {
		mon.stop()
		return nil, err
	}
	return mon, nil
}

// finishCount ends a count of n tasks: the commands sent and run per
// task, the benchmark's own (own) taken out.
func (e *env) finishCount(ctx context.Context, mon *monitors, own map[string]int64, n int) (*lifeCounts, error) {
	sent, err := mon.finish(ctx, e.rdb)
	if err != nil {
		return nil, err
	}
	stats, err := commandstats(ctx, e.rdb)
	if err != nil {
		return nil, err
	}
	lc := &lifeCounts{Tasks: int64(n), Sent: map[string]float64{}, Stats: map[string]float64{}}
	for name, v := range sent {
		if v -= own[name]; v > 0 {
			lc.Sent[name] = float64(v) / float64(n)
		}
	}
	for name, v := range stats {
		if v -= float64(own[name]); v > 0 {
			lc.Stats[name] = v / float64(n)
		}
	}
	return lc, nil
}

// lifeBaseline counts raw Asynq's commands for n tasks: enqueued 32 at a
// time, then processed by the baseline worker, already polling when the
// count starts; the count ends when it has processed them and stopped.
func (e *env) lifeBaseline(ctx context.Context, n int) (*lifeCounts, error) {
	if err := flushAll(ctx, e.rdb); err != nil {
		return nil, err
	}
	out := &strings.Builder{}
	p, err := startProc("baseline-worker", e.o.self, []string{"baseline-worker", e.redis.url, strconv.Itoa(n), strconv.Itoa(e.o.workerConcurrency), "50ms"}, os.Environ(), out)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	time.Sleep(time.Second) // let it start polling
	mon, err := e.startCount(ctx)
	if err != nil {
		return nil, err
	}
	defer mon.stop()
	if err := e.enqueueBaseline(ctx, n); err != nil {
		return nil, err
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			return nil, fmt.Errorf("baseline worker: %w", err)
		}
	case <-time.After(5 * time.Minute):
		return nil, errors.New("baseline worker did not finish")
	}
	if !strings.Contains(out.String(), `"processed":`+strconv.Itoa(n)+",") {
		return nil, fmt.Errorf("baseline worker result %q; want %d processed", out.String(), n)
	}
	return e.finishCount(ctx, mon, nil, n)
}

// lifeReal counts the real services' commands for n tasks of one account,
// the share at its default: created through the gateway while the worker,
// warmed up first, runs them; the count ends a moment after the last is
// completed. The benchmark watches on a client of its own whose commands
// are taken out of the count.
func (e *env) lifeReal(ctx context.Context, n int) (*lifeCounts, error) {
	if err := e.fresh(ctx); err != nil {
		return nil, err
	}
	gw, base, err := e.startGateway(ctx)
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	wk, err := startProc("worker", filepath.Join(e.o.binDir, "worker"), nil, e.workerEnv("EASEL_WORKER_HTTP_ADDR="+freeAddr()), io.Discard)
	if err != nil {
		return nil, err
	}
	defer wk.stop()
	const warm = 32
	if err := e.createTasks(ctx, base, warm); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := e.waitTasks(ctx, warm, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	wc, err := redisconn.New(e.redis.url, redisconn.Options{PoolSize: 2})
	if err != nil {
		return nil, err
	}
	defer wc.Close()
	own := &ownCommands{}
	wc.AddHook(own)
	st := store.NewTasks(store.NewDB(wc, store.Options{}))
	if _, err := st.Parked(ctx, e.acct); err != nil { // connected before the count
		return nil, err
	}
	own.reset()
	mon, err := e.startCount(ctx)
	if err != nil {
		return nil, err
	}
	defer mon.stop()
	created := make(chan error, 1)
	go func() { created <- e.createTasks(ctx, base, n) }()
	var peak int64
	allCreated := false
	deadline := time.Now().Add(5 * time.Minute)
	for {
		parked, err := st.Parked(ctx, e.acct)
		if err != nil {
			return nil, err
		}
		peak = max(peak, parked)
		if !allCreated {
			select {
			case err := <-created:
				if err != nil {
					return nil, err
				}
				allCreated = true
			default:
			}
		}
		if allCreated {
			left, err := st.Inflight(ctx, e.acct)
			if err != nil {
				return nil, err
			}
			if left == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the %d counted tasks not finished in 5 minutes", n)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	time.Sleep(lifeSettle)
	lc, err := e.finishCount(ctx, mon, own.counts(), n)
	if err != nil {
		return nil, err
	}
	lc.PeakParked = &peak
	// Every one completed, none failed (read after the count).
	if _, err := e.waitTasks(ctx, warm+n, time.Minute); err != nil {
		return nil, err
	}
	return lc, nil
}
