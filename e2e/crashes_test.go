package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/localnet"
)

// A Redis outage followed by one worker kill -9 fails no task
// worker_crashed: the runs the outage cut (their release lost) are no
// crashes, so the one death that follows is each task's first. The real
// gateway and worker binaries, on a redis-server with AOF: 30 tasks of
// 3 s on one worker of 10 slots, Redis killed while they run and
// restarted from its AOF 5 s later,
// then the worker killed once the runs the outage cut run again, and
// restarted.
func TestRedisOutageThenOneWorkerDeathFailsNoTask(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults on the real binaries")
	}
	bin, dir, rp, rdb := faultStack(t)
	ctx := context.Background()
	db := store.NewDB(rdb, store.Options{})
	accounts, tasks := store.NewAccounts(db), store.NewTasks(db)
	acct, err := accounts.Create(ctx, account.Spec{Name: "faults", Credits: 1_000_000, RateLimit: 100_000, MaxInflight: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := accounts.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	gwAddr := localnet.FreeAddr(t)
	base := "http://" + gwAddr
	env := append(cleanEnv(),
		"EASEL_REDIS_URL="+rp.URL,
		"EASEL_BLOB_URL=file://"+filepath.Join(dir, "blobs"),
		"EASEL_SIGNING_SECRET="+secret,
		"EASEL_LOG_LEVEL=warn", // the recovery's takeovers are warnings
		"EASEL_SIM_DELAY=3s",
		"EASEL_WORKER_CONCURRENCY=10",
		"EASEL_TASK_CHECK_INTERVAL=50ms",
		"EASEL_SHUTDOWN_TIMEOUT=10s",
		"EASEL_REDIS_START_TIMEOUT=60s",
	)
	startProc(t, dir, "gateway", filepath.Join(bin, "gateway"), slices.Concat(env, []string{"EASEL_HTTP_ADDR=" + gwAddr, "EASEL_PUBLIC_URL=" + base, "EASEL_METRICS_ADDR=off"}))
	w := startProc(t, dir, "worker", filepath.Join(bin, "worker"), slices.Concat(env, []string{"EASEL_WORKER_HTTP_ADDR=" + localnet.FreeAddr(t)}))
	waitHTTP(t, base+"/readyz")

	c := newClient(t, base, key)
	var ids []string
	for i := range 30 {
		ids = append(ids, c.create(createBody(std, fmt.Sprintf(`{"prompt":"fault %d"}`, i))))
	}
	count := func() (processing, completed int) {
		all, err := accountTasks(ctx, tasks, acct.ID)
		if err != nil {
			return 0, 0
		}
		for _, tk := range all {
			switch tk.Status {
			case task.Processing:
				processing++
			case task.Completed:
				completed++
			}
		}
		return processing, completed
	}
	waitUntil := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.After(timeout)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for !ok() {
			select {
			case <-deadline:
				t.Fatalf("%s: not within %s\n--- worker\n%s", what, timeout, w.tail())
			case <-tick.C:
			}
		}
	}
	waitUntil("the worker runs a full set of tasks", 30*time.Second, func() bool { p, _ := count(); return p >= 10 })

	// The outage: Redis killed, and restarted from its AOF 5 s later
	// (its length is the fault under test). The runs under way cannot
	// record their outcome, nor let go of their task.
	rp.Stop()
	<-time.After(5 * time.Second)
	if err := rp.Restart(); err != nil {
		t.Fatal(err)
	}
	// The runs the outage cut run again: handed back to their queue
	// (Asynq's retry set), or, their Asynq lease lapsed while Redis was
	// away, taken over by a new run by the recovery (the worker logs it).
	// The kill comes once they run again, so that it cuts them a second
	// time.
	ins := asynq.NewInspectorFromRedisClient(rdb)
	queued := func() (retry, active int) {
		for _, q := range jobs.Queues() {
			if qi, err := ins.GetQueueInfo(q); err == nil {
				retry, active = retry+qi.Retry, active+qi.Active
			}
		}
		return retry, active
	}
	takenOver := func() bool {
		b, _ := os.ReadFile(w.log.Name())
		return strings.Contains(string(b), "a new run takes it over")
	}
	sawRetry := false
	waitUntil("the runs the outage cut run again", 90*time.Second, func() bool {
		retry, active := queued()
		sawRetry = sawRetry || retry > 0
		return (sawRetry || takenOver()) && retry == 0 && active > 0
	})
	w.signal(t, syscall.SIGKILL)
	w.restart(t, "EASEL_WORKER_HTTP_ADDR="+localnet.FreeAddr(t))

	// A dead worker's runs are taken over once its 30 s lease runs out.
	waitUntil("every task ends", 150*time.Second, func() bool {
		all, err := accountTasks(ctx, tasks, acct.ID)
		return err == nil && len(all) == len(ids) && unfinished(all) == 0
	})
	all, err := accountTasks(ctx, tasks, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for _, tk := range all {
		o := string(tk.Status)
		if tk.Failure != nil {
			o += " " + tk.Failure.Code
		}
		outcomes[o]++
	}
	t.Logf("outcomes: %v", outcomes)
	if outcomes[string(task.Completed)] != len(ids) {
		t.Errorf("outcomes %v; want all %d completed (no task failed worker_crashed by one death after an outage)", outcomes, len(ids))
	}
}

// unfinished counts the tasks not ended.
func unfinished(tasks map[string]*task.Task) int {
	n := 0
	for _, tk := range tasks {
		if !tk.Status.Final() {
			n++
		}
	}
	return n
}
