package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// TestQueueETA: a pending task's ETA is taken from the rate its queue
// moves at while busy, so time a queue spent idle is not read as slow
// workers; first in a queue that was empty, a task's ETA is the pick-up
// time.
func TestQueueETA(t *testing.T) {
	t.Parallel()
	const queue = "standard"
	t0 := time.UnixMilli(1_800_000_000_000)
	tests := []struct {
		name string
		// steps run on the store at the clock's times; they return the
		// task whose position is asked, and when.
		steps func(t *testing.T, s *stores, clock *time.Time) string
		pos   int64
		known bool
		// lo, hi bound the ETA when known.
		lo, hi time.Duration
	}{
		{"first in a queue idle for 25 s, after a busy spell", func(t *testing.T, s *stores, clock *time.Time) string {
			busySpell(t, s, clock, 10)
			*clock = clock.Add(25 * time.Second)
			createQueued(t, s, "late", queue)
			*clock = clock.Add(200 * time.Millisecond) // the client's first query
			return "late"
		}, 1, true, PickUp, PickUp},
		{"first in a queue that was never used", func(t *testing.T, s *stores, clock *time.Time) string {
			createQueued(t, s, "first", queue)
			return "first"
		}, 1, true, PickUp, PickUp},
		{"behind four in a queue that has just become busy: no rate yet", func(t *testing.T, s *stores, clock *time.Time) string {
			busySpell(t, s, clock, 10)
			*clock = clock.Add(25 * time.Second)
			for i := range 5 {
				createQueued(t, s, fmt.Sprintf("b%d", i), queue)
			}
			return "b4"
		}, 5, false, 0, 0},
		{"behind others in a busy queue: the rate of its busy spell", func(t *testing.T, s *stores, clock *time.Time) string {
			busySpell(t, s, clock, 10)
			*clock = clock.Add(25 * time.Second) // idle: not counted
			for i := range 10 {
				createQueued(t, s, fmt.Sprintf("b%d", i), queue)
			}
			for i := range 5 { // one a second
				*clock = clock.Add(time.Second)
				mustOutcome(t, task.Applied)(start(s, "a", fmt.Sprintf("b%d", i), fmt.Sprintf("b%d", i)))
			}
			return "b9" // 4 ahead, 1 a second
		}, 5, true, 4500 * time.Millisecond, 5500 * time.Millisecond},
		{"nobody picks it up for 10 s: unknown", func(t *testing.T, s *stores, clock *time.Time) string {
			createQueued(t, s, "stuck", queue)
			*clock = clock.Add(queueSampleEvery)
			return "stuck"
		}, 1, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := t0
			s, _ := newStoreWith(t, Options{Now: func() time.Time { return clock }})
			id := tt.steps(t, s, &clock)
			tk, err := s.tasks.Get(ctx, "a", id)
			must(t, err)
			st, err := s.queues.Stats(ctx, queue)
			must(t, err)
			p := st.PositionOf(tk.QueueSeq, clock)
			if p.Position != tt.pos || p.Known != tt.known || (p.Known && (p.ETA < tt.lo || p.ETA > tt.hi)) {
				t.Fatalf("position %+v; want %d, known %v, ETA in [%s, %s]", p, tt.pos, tt.known, tt.lo, tt.hi)
			}
		})
	}
}

// createQueued creates a pending task of account "a" in queue.
func createQueued(t *testing.T, s *stores, id, queue string) {
	t.Helper()
	c := std
	c.Queue = queue
	if _, err := s.tasks.Create(ctx, pending("a", id), c, nil); err != nil {
		t.Fatal(err)
	}
}

// busySpell runs n tasks through the standard queue, all created at once
// and started one a second: the queue's rate is then 1 a second.
func busySpell(t *testing.T, s *stores, clock *time.Time, n int) {
	t.Helper()
	for i := range n {
		createQueued(t, s, fmt.Sprintf("s%d", i), "standard")
	}
	for i := range n {
		*clock = clock.Add(time.Second)
		id := fmt.Sprintf("s%d", i)
		mustOutcome(t, task.Applied)(start(s, "a", id, id))
	}
}
