package store

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redisproc"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

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
		key   bool // through an API key with a spend limit
	}{{"admitted", 0, false}, {"parked", 64, false}, {"admitted_key_limit", 0, true}} {
		b.Run(c.name, func(b *testing.B) {
			acct := "bench_" + c.name
			seedAccount(b, rdb, acct, 1<<60, "")
			s := NewTasks(NewDB(rdb, Options{Share: c.share, LedgerRetention: 30 * 24 * time.Hour}))
			ch := task.Charge{Price: 4, Tier: "standard", MaxInflight: 1 << 30, Queue: "standard"}
			if c.key {
				ch.KeyHash, ch.SpendLimit = strings.Repeat("ab", 32), 1<<60
			}
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
			info, err := rdb.Info(context.Background(), "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			stats := redisproc.ParseCommandstats(info)
			var inner int64
			for name, st := range stats {
				if name != "evalsha" && name != "eval" {
					inner += st.Calls
				}
			}
			if testing.Verbose() {
				for name, st := range stats {
					b.Logf("%s: %.2f calls/op, %.2f µs/op", name, float64(st.Calls)/float64(n), float64(st.Usec)/float64(n))
				}
			}
			b.ReportMetric(float64(stats["evalsha"].Usec+stats["eval"].Usec)/float64(n), "redis-µs/op")
			b.ReportMetric(float64(inner)/float64(n), "calls/op")
		})
	}
}

// BenchmarkCreateArguments is what building a create's keys and
// arguments costs the client, without Redis. They are kept (argsSink), as
// a call hands them to go-redis: none stays on the stack.
func BenchmarkCreateArguments(b *testing.B) {
	k, a := benchCreateCall()
	b.ReportAllocs()
	for b.Loop() {
		keysSink, argsSink = createLua.Keys(k), createLua.Argv(a)
	}
}

var (
	keysSink []string
	argsSink []any
)

func benchCreateCall() (createKeys, createArgs) {
	acct, id := "acct_bench", "task_lumen_00000000000000000001"
	k := createKeys{Task: taskKey(acct, id), Account: accountKey(acct), Ledger: ledgerKey(acct), Parked: parkedKey(acct),
		Due: dueOf(acct), Index: tasksIndexKey(acct), Idem: noKey(acct), Queue: noKey(acct), Spend: spendKey(acct), Usage: usageKey(acct, 20000)}
	a := createArgs{Now: 1_700_000_000_000, TTL: 86_400_000, Price: 4, DefaultMax: 100, Deadline: 1_700_000_600_000, Tier: "standard",
		AccountID: acct, TaskID: id, CheckAt: 1_700_000_010_000, Share: 64, Keep: 2_592_000_000, QueueName: "standard",
		Input: make([]byte, 100), Type: task.Type, Model: testModel, Created: 1_700_000_000_000, UsageUntil: 1_800_000_000_000}
	return k, a
}
