package store

import (
	"context"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// A run learns the trace context of its task's create from Start (a run a
// promotion or a recovery queued carries none in its job), and, for a
// traced task that waited parked, when it was admitted: the run's trace
// shows its time parked. An untraced task's record holds neither, and a
// task keeps its admission time only until it ends.
func TestStartedTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	created, admitted := time.UnixMilli(1_700_000_000_123), time.UnixMilli(1_700_000_004_000)
	tests := map[string]struct {
		traced, parked bool
		wantTP         string
		wantAdmit      time.Time
	}{
		"untraced":        {},
		"untraced parked": {parked: true},
		"traced":          {traced: true, wantTP: tp},
		"traced parked":   {traced: true, parked: true, wantTP: tp, wantAdmit: admitted},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now := created
			s, _ := newStoreWith(t, Options{Share: 1, Now: func() time.Time { return now }})
			id := "task_lumen_2"
			if tt.parked {
				// The account's one place is taken: the task waits parked.
				create(t, s, "a", "task_lumen_1")
				mustOutcome(t, task.Applied)(start(s, "a", "task_lumen_1", "task_lumen_1"))
			}
			tk := pending("a", id)
			if tt.traced {
				tk.TraceParent = tp
			}
			c, err := s.tasks.Create(ctx, tk, std, nil)
			if err != nil || c.Admitted == tt.parked {
				t.Fatalf("create: admitted %v, %v; want %v", c.Admitted, err, !tt.parked)
			}
			if tt.parked {
				now = admitted
				ch, err := s.tasks.Fail(ctx, "a", "task_lumen_1", "task_lumen_1", task.Failure{Code: "generation_failed", Message: "m"})
				if err != nil || len(ch.Admitted) != 1 {
					t.Fatalf("the end of the first task admitted %v, %v; want the parked one", ch.Admitted, err)
				}
			}
			if n, err := s.rdb.HExists(ctx, taskKey("a", id), fTaskAdmitTime).Result(); err != nil || n != !tt.wantAdmit.IsZero() {
				t.Errorf("the record keeps an admission time: %v, %v; want %v", n, err, !tt.wantAdmit.IsZero())
			}
			now = admitted.Add(time.Second)
			st, err := s.tasks.Start(ctx, "a", id, id)
			if err != nil || st.Outcome != task.Applied {
				t.Fatalf("start: %v, %v", st.Outcome, err)
			}
			if st.TraceParent != tt.wantTP || !st.AdmitTime.Equal(tt.wantAdmit) {
				t.Errorf("started with trace %q admitted %v; want %q, %v", st.TraceParent, st.AdmitTime, tt.wantTP, tt.wantAdmit)
			}
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", id, id, task.Failure{Code: "generation_failed", Message: "m"}))
			if n, err := s.rdb.HExists(ctx, taskKey("a", id), fTaskAdmitTime).Result(); err != nil || n {
				t.Errorf("an ended task keeps its admission time (%v, %v)", n, err)
			}
		})
	}
}
