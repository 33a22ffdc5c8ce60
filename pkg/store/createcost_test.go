package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// commandStats returns INFO commandstats as calls and microseconds per
// command name.
func commandStats(tb testing.TB, rdb *redis.Client) (calls, usec map[string]int64) {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	calls, usec = map[string]int64{}, map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls[name] = n
			case "usec":
				usec[name] = n
			}
		}
	}
	return calls, usec
}

// BenchmarkCreateScript is what a create costs Redis: the script's time
// inside Redis (INFO commandstats, µs per create: redis-µs/op) and the
// commands it runs (calls/op), for a task admitted at once (no share: its
// job queued) and one parked behind a full window (share 64), with a 100
// byte input as the load generator's tasks have. ns/op is the client's
// round trip, one at a time.
func BenchmarkCreateScript(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	input := []byte(strings.Repeat("x", 100))
	var seq atomic.Int64
	for _, c := range []struct {
		name  string
		share int
	}{{"admitted", 0}, {"parked", 64}} {
		b.Run(c.name, func(b *testing.B) {
			acct := "bench_" + c.name
			seedAccount(b, rdb, acct, 1<<60, "")
			s := NewTasks(NewDB(rdb, Options{Share: c.share, LedgerRetention: 30 * 24 * time.Hour}))
			ch := task.Charge{Price: 4, Tier: "standard", MaxInflight: 1 << 30, Queue: "standard"}
			create := func() {
				now := time.Now()
				ch.CountUntil, ch.ValidUntil = now.Add(time.Hour), now.Add(5*time.Second)
				tk := &task.Task{ID: fmt.Sprintf("task_lumen_%020d", seq.Add(1)), AccountID: acct, Type: task.Type, Model: testModel, Status: task.Pending, CreateTime: now}
				if _, err := s.Create(context.Background(), tk, ch, input); err != nil {
					b.Fatal(err)
				}
			}
			for range 200 { // past the window, when there is one
				create()
			}
			if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			n := 0
			for b.Loop() {
				create()
				n++
			}
			calls, usec := commandStats(b, rdb)
			var inner int64
			for name, c := range calls {
				if name != "evalsha" && name != "eval" {
					inner += c
				}
			}
			if testing.Verbose() {
				for name, c := range calls {
					b.Logf("%s: %.2f calls/op, %.2f µs/op", name, float64(c)/float64(n), float64(usec[name])/float64(n))
				}
			}
			b.ReportMetric(float64(usec["evalsha"]+usec["eval"])/float64(n), "redis-µs/op")
			b.ReportMetric(float64(inner)/float64(n), "calls/op")
		})
	}
}
