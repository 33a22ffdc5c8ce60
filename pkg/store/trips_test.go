package store

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redisproc"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// tripCounter counts a client's round trips: a command, or a pipeline
// (whose calls to several nodes go out together), is one.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkTaskTrips is what a task's life costs in the store's client
// round trips (trips/task) and Redis commands (cmds/task, the scripts'
// own and the calls), on one server and on a 3-master cluster: a task
// admitted at once (create, start, complete), and a task parked then
// admitted by the end of the one before it (an account with one place:
// two tasks a loop, the second promoted by the first's complete). Asynq's
// own round trips (enqueue, dequeue, done) are on top. On a cluster the
// queues' books (the numbers of the tasks admitted, the counts of those
// out) are flushed every queueCountEvery: the loop's last flush is waited
// for and counted.
func BenchmarkTaskTrips(b *testing.B) {
	for _, where := range []string{"server", "cluster"} {
		for _, kind := range []string{"admitted", "parked"} {
			b.Run(where+"/"+kind, func(b *testing.B) {
				var rdb redis.UniversalClient
				var reset func()
				var commands func() int64
				if where == "server" {
					srv := redistest.Start(b)
					c := srv.Client(b)
					rdb = c
					reset = func() { c.ConfigResetStat(context.Background()) }
					commands = func() int64 { return commandsOf(c.Info(context.Background(), "commandstats").Val()) }
				} else {
					cl := redistest.StartCluster(b)
					opt, err := redis.ParseClusterURL(cl.URL)
					if err != nil {
						b.Fatal(err)
					}
					cc := redis.NewClusterClient(opt)
					b.Cleanup(func() { _ = cc.Close() })
					rdb = cc
					ctx := context.Background()
					reset = func() {
						_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ConfigResetStat(ctx).Err() })
					}
					commands = func() int64 {
						var n atomic.Int64
						_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
							n.Add(commandsOf(m.Info(ctx, "commandstats").Val()))
							return nil
						})
						return n.Load()
					}
				}
				ctx := context.Background()
				acct := "acct_trips_" + kind
				seedAccount(b, rdb, acct, 1<<60, "")
				share := 0
				if kind == "parked" {
					share = 1
				}
				trips := &tripCounter{}
				rdb.AddHook(trips)
				db := NewDB(rdb, Options{Share: share})
				s := NewTasks(db)
				ch := task.Charge{Price: 4, Tier: "standard", MaxInflight: 1 << 30, Queue: "standard"}
				i := 0
				create := func() string {
					i++
					now := time.Now()
					ch.CountUntil, ch.ValidUntil = now.Add(time.Hour), now.Add(5*time.Second)
					id := fmt.Sprintf("task_lumen_%020d", i)
					tk := &task.Task{ID: id, AccountID: acct, Type: task.Type, Model: testModel, Status: task.Pending, CreateTime: now}
					if _, err := s.Create(ctx, tk, ch, []byte("in")); err != nil {
						b.Fatal(err)
					}
					return id
				}
				run := func(id string) {
					if st, err := s.Start(ctx, acct, id, id); err != nil || st.Outcome != task.Applied {
						b.Fatalf("start %s: %v, %v", id, st.Outcome, err)
					}
					if c, err := s.Complete(ctx, acct, id, id, []task.Result{{Key: "2026112214/0123456789abcdef0123456789abcdef.png"}}); err != nil || c.Outcome != task.Applied {
						b.Fatalf("complete %s: %v, %v", id, c.Outcome, err)
					}
				}
				life := func() int {
					if kind == "admitted" {
						run(create())
						return 1
					}
					first, second := create(), create() // the second parked
					run(first)                          // admits the second
					run(second)
					return 2
				}
				life()
				_ = db.FlushQueueCounts(ctx)
				reset()
				trips.n.Store(0)
				tasks := 0
				for b.Loop() {
					tasks += life()
				}
				_ = db.FlushQueueCounts(ctx) // the last counts held, on a cluster
				b.ReportMetric(float64(trips.n.Load())/float64(tasks), "trips/task")
				b.ReportMetric(float64(commands())/float64(tasks), "cmds/task")
			})
		}
	}
}

// commandsOf sums an INFO commandstats's calls, but for the benchmark's
// own INFO and CONFIG and the cluster client's CLUSTER.
func commandsOf(info string) int64 {
	var n int64
	for name, st := range redisproc.ParseCommandstats(info) {
		if !strings.HasPrefix(name, "info") && !strings.HasPrefix(name, "config") && !strings.HasPrefix(name, "cluster") {
			n += st.Calls
		}
	}
	return n
}
