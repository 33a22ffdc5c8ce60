package main

import (
	"testing"

	easel "github.com/easelhq/easel/sdk/go"
)

// TestQueueText: a task about to be picked up says so rather than "about
// 0s" (first in an idle queue, a task's ETA is its pick-up time).
func TestQueueText(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	cases := []struct {
		pos, eta *int64
		want     string
	}{
		{n(1), n(100), "#1 in queue, starting"},
		{n(1), n(999), "#1 in queue, starting"},
		{n(3), n(12_400), "#3 in queue, about 12s"},
		{n(2), nil, "#2 in queue"},
		{nil, nil, ""},
	}
	for _, c := range cases {
		if got := queueText(&easel.Task{QueuePosition: c.pos, EtaMs: c.eta}); got != c.want {
			t.Errorf("queueText(%v, %v) = %q, want %q", c.pos, c.eta, got, c.want)
		}
	}
}
