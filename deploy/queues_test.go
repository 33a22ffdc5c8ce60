package deploy

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
)

// TestQueueKeys checks, against the Asynq the services are built with, the
// list names the ScaledObjects read: a job Easel queues for a tier is on
// asynq:{queue}:pending, and once a worker runs it, on asynq:{queue}:active
// (an embedded Redis, so no server is needed).
func TestQueueKeys(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cat, err := catalog.New("lumen")
	if err != nil {
		t.Fatal(err)
	}
	enq := jobs.NewEnqueuer(rdb)
	for i, tier := range catalog.Tiers {
		model, ok := cat.ByTier(tier)
		if !ok {
			t.Fatalf("no model of tier %s", tier)
		}
		id := "task-" + string(tier)
		j := jobs.GenerateImage{
			TaskID: id, AccountID: "acct",
			Input:      task.Input{Model: model, Prompt: "p"}.WithDefaults(),
			CreateTime: time.Now(), Deadline: time.Now().Add(time.Hour),
		}
		if err := enq.EnqueueGenerateImage(ctx, jobs.RefOf(j), jobs.RunID(id, 0)); err != nil {
			t.Fatal(err)
		}
		q := jobs.Queue(tier)
		for _, other := range catalog.Tiers[:i+1] {
			oq := jobs.Queue(other)
			if n := rdb.LLen(ctx, asynqKey(oq, "pending")).Val(); n != 1 {
				t.Errorf("after queueing a %s job, %s holds %d jobs; want 1", q, asynqKey(oq, "pending"), n)
			}
		}
	}

	// A worker of the standard queue takes its job: it moves to active.
	q := jobs.Queue(catalog.Standard)
	running, release := make(chan struct{}), make(chan struct{})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: 1, Queues: map[string]int{q: 1}, TaskCheckInterval: 10 * time.Millisecond,
		LogLevel: asynq.FatalLevel, ShutdownTimeout: time.Second,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(jobs.TypeGenerateImage, func(ctx context.Context, _ *asynq.Task) error {
		close(running)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the worker did not take the job")
	}
	if n := rdb.LLen(ctx, asynqKey(q, "active")).Val(); n != 1 {
		t.Errorf("while the job runs, %s holds %d jobs; want 1", asynqKey(q, "active"), n)
	}
	if n := rdb.LLen(ctx, asynqKey(q, "pending")).Val(); n != 0 {
		t.Errorf("while the job runs, %s holds %d jobs; want 0", asynqKey(q, "pending"), n)
	}
	close(release)
}
