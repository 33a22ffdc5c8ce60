package worker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// BenchmarkRecoveryBacklog is the recovery of one account's large backlog,
// by a lone worker on a private Redis, with the recovery's own timings:
// N pending admitted tasks of one account (so all in one shard), all due
// for their queue check at once and none with a job (every job lost). It
// reports how long until every job is queued again (requeue-s), then,
// the jobs on their queue and the clock moved a QueueRecheck on (every
// task due for its next check at once), how long until the one job
// deleted meanwhile, the last in the due order, is queued again (recheck-s):
// a whole pass of checks over the backlog, and the CPU Redis spent on
// that pass (recheck-redis-cpu-s).
//
//	go test -run '^$' -bench BenchmarkRecoveryBacklog -benchtime 1x ./worker/
//
// EASEL_BENCH_BACKLOG sets the sizes (default 10000,100000).
func BenchmarkRecoveryBacklog(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if v := os.Getenv("EASEL_BENCH_BACKLOG"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("EASEL_BENCH_BACKLOG=%q: %v", v, err)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			// A round takes seconds (its ns/op, seeding included): one is
			// enough for the default -benchtime.
			for range b.N {
				requeue, recheck, cpu := recoverBacklog(b, n)
				b.ReportMetric(requeue.Seconds(), "requeue-s")
				b.ReportMetric(recheck.Seconds(), "recheck-s")
				b.ReportMetric(cpu.Seconds(), "recheck-redis-cpu-s")
			}
		})
	}
}

// recoverBacklog runs one round of BenchmarkRecoveryBacklog of n tasks.
func recoverBacklog(b *testing.B, n int) (requeue, recheck, redisCPU time.Duration) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client(b)
	db := store.NewDB(rdb, store.Options{}) // no share: every task admitted
	accounts := store.NewAccounts(db)
	a, err := accounts.Create(ctx, account.Spec{Name: "backlog", Credits: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	tasks := store.NewTasks(db)
	q := jobs.NewEnqueuer(rdb)
	ids, due := seedPending(b, rdb, tasks, a.ID, n)

	var offset atomic.Int64 // the recovery's clock, ahead of the wall's
	r := newRecovery(tasks, store.NewLeases(db), q, &notifyLog{}, nil, "w1", zap.NewNop())
	r.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	pending := "asynq:{" + jobs.Queue(catalog.Standard) + "}:pending" // Asynq's list of a queue's pending jobs
	start := time.Now()
	go func() { defer close(done); r.run(rctx) }()
	waitUntil(b, 30*time.Minute, func() bool { return rdb.LLen(ctx, pending).Val() == int64(n) })
	requeue = time.Since(start)

	// A job lost among jobs all present: the task read last.
	last := ids[n-1]
	if m, err := rdb.ZRevRangeWithScores(ctx, due, 0, 0).Result(); err == nil && len(m) == 1 {
		s := m[0].Member.(string)
		last = s[strings.LastIndex(s, "|")+1:]
	}
	ins := asynq.NewInspectorFromRedisClient(rdb)
	if err := ins.DeleteTask(jobs.Queue(catalog.Standard), last); err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, rdb)
	start = time.Now()
	offset.Add(int64(store.QueueRecheck))
	waitUntil(b, 30*time.Minute, func() bool {
		_, err := ins.GetTaskInfo(jobs.Queue(catalog.Standard), last)
		return err == nil
	})
	recheck = time.Since(start)
	redisCPU = serverCPU(b, rdb) - cpu0
	if got := rdb.LLen(ctx, pending).Val(); got != int64(n) {
		b.Errorf("%d jobs pending; want %d, each task's once", got, n)
	}
	return requeue, recheck, redisCPU
}

// serverCPU is the CPU time the Redis server has used, user and system.
func serverCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// seedPending leaves n pending admitted tasks of an account as creates
// leave them, and returns their ids: the first is created (Tasks.Create),
// the others are copies of what that create wrote (its record, its due
// entry), their ids in place of its id, written in pipelines; the
// account's counters count them. Every entry is due now. The index for
// listing is left out (the recovery never reads it). No job is queued.
// It returns the ids and the key of the shard's due work.
func seedPending(b *testing.B, rdb *redis.Client, tasks *store.Tasks, acct string, n int) (ids []string, due string) {
	ctx := context.Background()
	ids = make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("task_seed_%08d", i)
	}
	now := time.Now()
	in, err := jobs.EncodeInput(task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"})
	if err != nil {
		b.Fatal(err)
	}
	c, err := tasks.Create(ctx, &task.Task{ID: ids[0], AccountID: acct, Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: now},
		task.Charge{Price: 10, Tier: "standard", CountUntil: now.Add(time.Hour), Queue: jobs.Queue(catalog.Standard)}, in)
	if err != nil || !c.Admitted {
		b.Fatalf("Create = %+v, %v; want admitted", c, err)
	}
	one := func(match string) string {
		keys, _, err := rdb.Scan(ctx, 0, match, 1000).Result()
		if err != nil || len(keys) != 1 {
			b.Fatalf("keys %s: %v, %v; want one", match, keys, err)
		}
		return keys[0]
	}
	recKey, acctKey := one("*:t:"+ids[0]), one("*:acct")
	due = one("*:due")
	rec, err := rdb.HGetAll(ctx, recKey).Result()
	if err != nil {
		b.Fatal(err)
	}
	fields := make([]any, 0, 2*len(rec))
	for k, v := range rec {
		fields = append(fields, k, v)
	}
	ttl := rdb.PTTL(ctx, recKey).Val()
	members, err := rdb.ZRange(ctx, due, 0, -1).Result()
	if err != nil || len(members) != 1 || !strings.HasSuffix(members[0], "|"+ids[0]) {
		b.Fatalf("due entries %v, %v; want the created task's", members, err)
	}
	at := float64(now.UnixMilli())
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range ids[lo:min(lo+batch, n)] {
				if id != ids[0] {
					k := strings.TrimSuffix(recKey, ids[0]) + id
					p.HSet(ctx, k, fields...)
					p.PExpire(ctx, k, ttl)
				}
				p.ZAdd(ctx, due, redis.Z{Score: at, Member: strings.TrimSuffix(members[0], ids[0]) + id})
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.HIncrBy(ctx, acctKey, "infl", int64(n-1)).Err(); err != nil {
		b.Fatal(err)
	}
	if err := rdb.HIncrBy(ctx, acctKey, "adm", int64(n-1)).Err(); err != nil {
		b.Fatal(err)
	}
	if got := rdb.ZCard(ctx, due).Val(); got != int64(n) {
		b.Fatalf("%d due entries; want %d", got, n)
	}
	return ids, due
}

// waitUntil polls cond every 20 ms until it holds, failing after within.
func waitUntil(b *testing.B, within time.Duration, cond func() bool) {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("not within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
