package store

import (
	"context"
	"testing"

	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// A progress write says a webhook event is due only when the task's
// callback wants progress events, and costs the same whether it has one
// or not: the script, one read of the record (the callback with the
// rest), the HSET and the PUBLISH. A report that changes nothing is the
// script and its read.
func TestProgressHookAndCost(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		events []string // nil: no callback
		hook   bool
	}{
		{"no callback", nil, false},
		{"a callback for the end only", task.DefaultEvents, false},
		{"a callback for progress", task.Events, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "t_" + tc.name
			withCallback(t, s, id, tc.events...)
			mustOutcome(t, task.Applied)(start(s, "acct_a", id, id))
			progress(t, s, "acct_a", id, id, 5) // the script loaded
			must(t, rdb.ConfigResetStat(ctx).Err())
			if got := progress(t, s, "acct_a", id, id, 10); got != tc.hook {
				t.Errorf("hook %v; want %v", got, tc.hook)
			}
			want := map[string]int64{"evalsha": 1, "hmget": 1, "hset": 1, "publish": 1}
			if got := scriptCommands(t, rdb.Info(ctx, "commandstats").Val()); !equalCounts(got, want) {
				t.Errorf("a write ran %v; want %v", got, want)
			}
			must(t, rdb.ConfigResetStat(ctx).Err())
			if got := progress(t, s, "acct_a", id, id, 10); got {
				t.Error("hook for a report that changed nothing")
			}
			want = map[string]int64{"evalsha": 1, "hmget": 1}
			if got := scriptCommands(t, rdb.Info(ctx, "commandstats").Val()); !equalCounts(got, want) {
				t.Errorf("a report that changes nothing ran %v; want %v", got, want)
			}
		})
	}
}

// scriptCommands are the calls of each command INFO commandstats counts,
// the counting's own left out.
func scriptCommands(t *testing.T, info string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name, st := range redisproc.ParseCommandstats(info) {
		if name != "info" && name != "config|resetstat" && st.Calls > 0 {
			out[name] = st.Calls
		}
	}
	return out
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
