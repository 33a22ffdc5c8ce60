package main

import (
	"slices"
	"testing"
	"time"
)

// The drain part, briefly: both sides timed, and a task's whole life
// counted in Redis on each side, the real one's backlog over its
// account's share (two worker slots, so the tasks past the 64 admitted
// wait parked).
func TestDrainRunCountsLife(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and the worker")
	}
	res := runPart(t, 3*time.Minute, "--only", "drain", "--rounds", "1", "--drain", "300", "--worker-concurrency", "2")
	if !slices.Equal(res.Parts, []string{"drain"}) || len(res.DrainReal) != 1 || len(res.DrainBaseline) != 1 {
		t.Fatalf("parts %v, drain %v / %v", res.Parts, res.DrainReal, res.DrainBaseline)
	}
	for name, cpu := range map[string][]map[string]float64{"real": res.LifeCPUReal, "baseline": res.LifeCPUBaseline} {
		if len(cpu) != 1 || cpu[0]["redis"] <= 0 {
			t.Errorf("%s whole-life Redis CPU %v", name, cpu)
		}
	}
	real, base := res.LifeCommandsReal, res.LifeCommandsBaseline
	if real == nil || base == nil {
		t.Fatalf("whole-life counts real %+v, baseline %+v", real, base)
	}
	if real.Tasks != 300 || base.Tasks != 300 {
		t.Errorf("counted %d real, %d baseline tasks; want 300", real.Tasks, base.Tasks)
	}
	if real.PeakParked == nil || *real.PeakParked < 1 {
		t.Errorf("peak parked %v: the backlog was not over the share", real.PeakParked)
	}
	if base.PeakParked != nil {
		t.Errorf("baseline peak parked %v: raw Asynq parks nothing", *base.PeakParked)
	}
	// Raw Asynq sends an enqueue, a dequeue and a done script a task, and
	// its polling besides; the real life more, never fewer.
	if s := sum(base.Sent); s < 3 || s > 6 {
		t.Errorf("baseline: %.2f commands sent a task (%v); want 3 to 6", s, base.Sent)
	}
	if base.Sent["evalsha"] < 3 {
		t.Errorf("baseline: %.2f EVALSHA a task; want 3 or more", base.Sent["evalsha"])
	}
	if sum(real.Sent) < sum(base.Sent) || sum(real.Stats) < sum(base.Stats) {
		t.Errorf("real sends %.2f and runs %.2f a task, fewer than raw Asynq's %.2f and %.2f", sum(real.Sent), sum(real.Stats), sum(base.Sent), sum(base.Stats))
	}
	for name, c := range map[string]*lifeCounts{"real": real, "baseline": base} {
		if sum(c.Stats) < sum(c.Sent) {
			t.Errorf("%s: commandstats %v count fewer than were sent %v", name, c.Stats, c.Sent)
		}
		for _, own := range []string{"info", "echo", "monitor", "config|resetstat"} {
			if c.Stats[own] != 0 || c.Sent[own] != 0 {
				t.Errorf("%s: the counting's own %s counted", name, own)
			}
		}
	}
}
