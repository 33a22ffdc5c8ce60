package redisconn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/luascript"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// batchedOn starts a private redis-server and returns it, a plain client
// without retries and that client batched, with at most bound commands
// waiting (0: the default).
func batchedOn(t *testing.T, bound int) (*redistest.Server, redis.UniversalClient, redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t)
	rdb, err := New(srv.URL, Options{NoRetries: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := NewBatcher(rdb, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return srv, rdb, Batched(rdb, b)
}

// count.lua's keys, arguments and reply.
type (
	countKeys struct {
		Counter string `lua:"counter"`
	}
	countArgs struct {
		Field string `lua:"field"`
	}
	countReply struct {
		Code  int64 `lua:"code"`
		Count int64 `lua:"count"`
	}
)

// Commands sent through the batcher by many callers at once each get
// their own reply, scripts included (loaded on NOSCRIPT by Script.Run).
func TestBatchedReplies(t *testing.T) {
	_, rdb, c := batchedOn(t, 0)
	ctx := context.Background()
	incr := luascript.Load[countKeys, countArgs, countReply](
		luascript.NewLibrary("redisconn", os.DirFS("testdata"), ".", ""), "count", map[string]int64{"COUNTED": 1})
	// The records read back, written first in one pipeline of the plain
	// client: 200 callers at once would wait on its pool, not on the
	// batcher under test.
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 200 {
			p.HSet(ctx, fmt.Sprintf("r%d", i), "i", i)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			key := fmt.Sprintf("h%d", i%10)
			if _, err := incr.Call(ctx, c, countKeys{key}, countArgs{"n"}); err != nil {
				errs <- err
				return
			}
			m, err := c.HGetAll(ctx, fmt.Sprintf("r%d", i)).Result()
			if err != nil || m["i"] != fmt.Sprint(i) {
				errs <- fmt.Errorf("HGETALL r%d = %v, %v", i, m, err)
				return
			}
			v, err := c.HMGet(ctx, fmt.Sprintf("r%d", i), "i", "none").Result()
			if err != nil || v[0] != fmt.Sprint(i) || v[1] != nil {
				errs <- fmt.Errorf("HMGET r%d = %v, %v", i, v, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range 10 {
		if n, _ := rdb.HGet(ctx, fmt.Sprintf("h%d", i), "n").Int(); n != 20 {
			t.Errorf("h%d counted %d; want 20", i, n)
		}
	}
}

// A hung Redis (SIGSTOP) costs a caller its own deadline, not the
// connection's read timeout nor the wait of the batch before it, and the
// error says the reply was not awaited; once Redis is back the batcher
// works again.
func TestBatchedHonoursDeadlines(t *testing.T) {
	srv, _, c := batchedOn(t, 0)
	if err := c.HGetAll(context.Background(), "k").Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Proc.Resume()
		}
	}()
	const budget = 150 * time.Millisecond
	var wg sync.WaitGroup
	took := make(chan time.Duration, 32)
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			err := c.EvalSha(ctx, "0000000000000000000000000000000000000000", []string{"k"}).Err()
			took <- time.Since(start)
			errs <- err
		})
	}
	wg.Wait()
	close(took)
	close(errs)
	for d := range took {
		// The read timeout (3 s by default) is far past the budget.
		if d > budget+time.Second {
			t.Errorf("a caller waited %v on a hung Redis; its budget was %v", d, budget)
		}
	}
	for err := range errs {
		if !errors.Is(err, ErrAbandoned) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v; want ErrAbandoned and the deadline", err)
		}
	}
	if err := srv.Proc.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.HGetAll(ctx, "k").Err()
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batcher did not recover after Redis came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While Redis hangs, the commands waiting for it are bounded: past the
// bound a command fails at once, never sent, rather than queueing (and
// growing the process) for as long as the hang lasts.
func TestBatchedQueueBounded(t *testing.T) {
	const bound = 50
	srv, _, c := batchedOn(t, bound)
	if err := c.HGetAll(context.Background(), "k").Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Proc.Resume() }()
	// Callers at once, each waiting 300 ms: the queue holds at most the
	// bound of them, and the others are refused without waiting.
	var (
		mu              sync.Mutex
		full, abandoned int
		wg              sync.WaitGroup
	)
	for range 4 * bound {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := c.HGetAll(ctx, "k").Err()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, redis.ErrAutoPipelineQueueFull):
				full++
				if d := time.Since(start); d > 250*time.Millisecond {
					t.Errorf("a refusal took %v", d)
				}
			case errors.Is(err, ErrAbandoned):
				abandoned++
			default:
				t.Errorf("HGETALL on a hung Redis: %v", err)
			}
		})
	}
	wg.Wait()
	if full < 2*bound || abandoned > bound {
		t.Errorf("%d refused as the queue was full, %d queued and given up; want at most %d queued", full, abandoned, bound)
	}
}
