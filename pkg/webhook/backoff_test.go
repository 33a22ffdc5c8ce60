package webhook

import (
	"testing"
	"time"
)

func TestScheduleDelay(t *testing.T) {
	s := Schedule{Initial: 5 * time.Second, Max: time.Hour, Jitter: 0.1, Span: 24 * time.Hour}
	tests := []struct {
		n    int
		base time.Duration
	}{
		{0, 5 * time.Second},
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{5, 160 * time.Second},
		{9, 2560 * time.Second},
		{10, time.Hour}, // 5120 s, capped
		{50, time.Hour},
		{1000, time.Hour},
	}
	for _, tt := range tests {
		lo, hi := time.Duration(float64(tt.base)*0.9), time.Duration(float64(tt.base)*1.1)
		seen := map[time.Duration]bool{}
		for i := 0; i < 200; i++ {
			d := s.Delay(tt.n)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) = %v; want %v ± 10%%", tt.n, d, tt.base)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("Delay(%d) took %d values in 200 draws: no jitter", tt.n, len(seen))
		}
	}
	exact := Schedule{Initial: time.Second, Max: 8 * time.Second}
	for n, want := range []time.Duration{1, 2, 4, 8, 8} {
		if got := exact.Delay(n); got != want*time.Second {
			t.Errorf("without jitter Delay(%d) = %v; want %v", n, got, want*time.Second)
		}
	}
}

// The retries span at least Span even when every wait comes out shortest,
// and one retry fewer would not.
func TestScheduleRetriesSpanADay(t *testing.T) {
	for _, s := range []Schedule{
		DefaultSchedule(0),
		DefaultSchedule(100 * time.Millisecond),
		DefaultSchedule(time.Minute),
		{Initial: time.Second, Max: 10 * time.Second, Jitter: 0.5, Span: time.Minute},
	} {
		n := s.Retries()
		shortest := func(k int) time.Duration {
			var total time.Duration
			for i := 0; i < k; i++ {
				total += time.Duration(float64(s.base(i)) * (1 - s.Jitter))
			}
			return total
		}
		if shortest(n) < s.Span || shortest(n-1) >= s.Span {
			t.Errorf("%+v: %d retries span %v at least (%v with one fewer); want just over %v", s, n, shortest(n), shortest(n-1), s.Span)
		}
		if n > 100 {
			t.Errorf("%+v: %d retries; the job allows 100", s, n)
		}
	}
	if n := DefaultSchedule(0).Retries(); n != 18 {
		t.Errorf("the default schedule makes %d retries; the documentation says 18", n)
	}
	if n := (Schedule{}).Retries(); n != 0 {
		t.Errorf("an empty schedule makes %d retries", n)
	}
}
