package logging

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestBurst(t *testing.T) {
	boom := errors.New("boom")
	// Events: 'f' a failure, 'o' a success, a digit n the clock moving n
	// seconds.
	for _, tc := range []struct {
		name   string
		events string
		want   []string
	}{
		{"no failure, nothing logged", "ooo", nil},
		{"a burst logs its start once", "ffff1fff", []string{"limiter: failing"}},
		{"and a count every interval", "fff5f1f4f", []string{"limiter: failing", "limiter: still failing", "limiter: still failing"}},
		{"its end once", "ff1foo", []string{"limiter: failing", "limiter: recovered"}},
		{"a new burst starts over", "fofo", []string{"limiter: failing", "limiter: recovered", "limiter: failing", "limiter: recovered"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.DebugLevel)
			log := zap.New(core)
			clock := time.Unix(1_700_000_000, 0)
			b := NewBurst("limiter", 5*time.Second)
			b.now = func() time.Time { return clock }
			for _, e := range tc.events {
				switch {
				case e == 'f':
					b.Fail(log, boom)
				case e == 'o':
					b.OK(log)
				default:
					clock = clock.Add(time.Duration(e-'0') * time.Second)
				}
			}
			var got []string
			for _, l := range logs.All() {
				got = append(got, l.Message)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("logged %q; want %q", got, tc.want)
			}
		})
	}
}

func TestBurstCounts(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(core)
	clock := time.Unix(1_700_000_000, 0)
	b := NewBurst("limiter", time.Second)
	b.now = func() time.Time { return clock }
	for range 10 {
		b.Fail(log, errors.New("boom"))
	}
	clock = clock.Add(2 * time.Second)
	b.Fail(log, errors.New("boom"))
	b.OK(log)
	all := logs.All()
	if len(all) != 3 {
		t.Fatalf("%d lines", len(all))
	}
	if n := all[1].ContextMap()["failures"]; n != int64(10) {
		t.Errorf("still failing: failures=%v; want 10 since the last line", n)
	}
	if n := all[2].ContextMap()["failures"]; n != int64(11) {
		t.Errorf("recovered: failures=%v; want 11 in the burst", n)
	}
	if d := all[2].ContextMap()["after"]; d != 2*time.Second {
		t.Errorf("recovered after %v; want 2s", d)
	}
}
