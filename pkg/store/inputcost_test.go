package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redisproc"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// BenchmarkTaskLife is what a task's life costs Redis in commands: a
// create, a start and a complete through the store, with inputs of 100
// (the load generator's), 300 and 1,000 bytes. It reports the commands
// the scripts run per task (calls/op; HGET and HDEL apart, where the
// input's pieces were read and removed one a command) and a pending
// record's MEMORY USAGE (record-B).
func BenchmarkTaskLife(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	for _, size := range []int{100, 300, 1000} {
		b.Run(fmt.Sprintf("input_%d", size), func(b *testing.B) {
			acct := fmt.Sprintf("acct_life_%d", size)
			seedAccount(b, rdb, acct, 1<<60, "")
			s := NewTasks(NewDB(rdb, Options{LedgerRetention: 30 * 24 * time.Hour}))
			input := []byte(strings.Repeat("x", size))
			ch := task.Charge{Price: 4, Tier: "standard", MaxInflight: 1 << 30, Queue: "standard"}
			i := 0
			var record int64
			life := func() {
				i++
				now := time.Now()
				ch.CountUntil, ch.ValidUntil = now.Add(time.Hour), now.Add(5*time.Second)
				id := fmt.Sprintf("task_lumen_%020d", i)
				tk := &task.Task{ID: id, AccountID: acct, Type: task.Type, Model: testModel, Status: task.Pending, CreateTime: now}
				if _, err := s.Create(ctx, tk, ch, input); err != nil {
					b.Fatal(err)
				}
				if record == 0 {
					record = rdb.MemoryUsage(ctx, taskKey(acct, id), 0).Val()
				}
				if st, err := s.Start(ctx, acct, id, id); err != nil || st.Outcome != task.Applied || len(st.Input) != size {
					b.Fatalf("start: %v, %v, %d bytes of input", st.Outcome, err, len(st.Input))
				}
				if c, err := s.Complete(ctx, acct, id, id, []task.Result{{Key: "2026112214/0123456789abcdef0123456789abcdef.png"}}); err != nil || c.Outcome != task.Applied {
					b.Fatalf("complete: %v, %v", c.Outcome, err)
				}
			}
			life()
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			n := 0
			for b.Loop() {
				life()
				n++
			}
			stats := redisproc.ParseCommandstats(rdb.Info(ctx, "commandstats").Val())
			var inner int64
			for name, st := range stats {
				if name != "evalsha" && name != "eval" && !strings.HasPrefix(name, "info") && !strings.HasPrefix(name, "memory") {
					inner += st.Calls
				}
			}
			if testing.Verbose() {
				for name, st := range stats {
					b.Logf("%s: %.2f calls/op", name, float64(st.Calls)/float64(n))
				}
			}
			b.ReportMetric(float64(inner)/float64(n), "calls/op")
			b.ReportMetric(float64(stats["hget"].Calls)/float64(n), "hget/op")
			b.ReportMetric(float64(stats["hdel"].Calls)/float64(n), "hdel/op")
			b.ReportMetric(float64(record), "record-B")
		})
	}
}
