package e2e

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/worker"
)

// A worker told to stop takes no more tasks and gives its running ones the
// grace period (EASEL_SHUTDOWN_TIMEOUT); what it must cut off goes back on
// the queue at once, not after its lease runs out, and another worker
// finishes it: charged once, its progress never going back.
func TestShutdownHandsBackCutTasks(t *testing.T) {
	t.Parallel()
	// The stack's own worker serves only pro: standard is the stopping
	// worker's.
	s := startStack(t, stackOptions{env: map[string]string{"EASEL_QUEUES": "pro"}})
	const credits = 1000
	acct, key := s.newAccount(t, account.Spec{Name: "shutdown", Credits: credits})
	c := newClient(t, s.base, key)

	startWorker := func(simDelay string) (stop func() time.Duration) {
		env := maps.Clone(s.env)
		ln := listen(t)
		env["EASEL_QUEUES"], env["EASEL_SIM_DELAY"], env["EASEL_SHUTDOWN_TIMEOUT"] = "standard", simDelay, "1s"
		env["EASEL_WORKER_HTTP_ADDR"] = ln.Addr().String()
		cfg, err := worker.LoadConfig(env)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- worker.Run(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), worker.Options{HealthListener: ln})
		}()
		waitHTTP(t, "http://"+ln.Addr().String()+"/readyz")
		stopped := false
		stop = func() time.Duration {
			if stopped {
				return 0
			}
			stopped = true
			start := time.Now()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker stopped with: %v", err)
			}
			return time.Since(start)
		}
		t.Cleanup(func() { stop() })
		return stop
	}

	stopSlow := startWorker("40s") // progress every 5 s
	ids := []string{c.create(createBody(std, `{"prompt":"one"}`)), c.create(createBody(std, `{"prompt":"two"}`))}
	progress := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for len(progress) < len(ids) {
		for _, id := range ids {
			if _, rec, _ := c.query(id); rec.Status == "processing" && rec.Progress > 0 {
				progress[id] = rec.Progress
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks not running with progress within 20 s: %v", progress)
		}
		time.Sleep(100 * time.Millisecond)
	}

	took := stopSlow()
	if took > 5*time.Second {
		t.Errorf("the worker took %v to stop with a 1 s grace period", took)
	}
	// Back on the queue at once: pending, not left active until the lease
	// runs out.
	rdb, err := redisconn.Open(context.Background(), s.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	q, err := insp.GetQueueInfo(jobs.Queue(catalog.Standard))
	if err != nil {
		t.Fatal(err)
	}
	if q.Active != 0 || q.Pending+q.Retry != len(ids) {
		t.Errorf("after the stop: %d active, %d pending, %d retry; want the %d cut tasks queued again", q.Active, q.Pending, q.Retry, len(ids))
	}
	for _, id := range ids {
		if _, rec, _ := c.query(id); rec.Status != "processing" || rec.Progress < progress[id] {
			t.Errorf("task %s after the stop: %s at %d%%; want still processing, at %d%% or more", id, rec.Status, rec.Progress, progress[id])
		}
	}

	// Another worker finishes them.
	startWorker("0s")
	for _, id := range ids {
		if rec, _, _ := c.poll(id, 30*time.Second); rec.Status != "completed" {
			t.Errorf("task %s: %s", id, rec.Status)
		}
	}
	a, err := s.accounts.Get(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(credits - 4*len(ids)); a.Credits != want {
		t.Errorf("balance %d; want %d (each task charged once)", a.Credits, want)
	}
}
