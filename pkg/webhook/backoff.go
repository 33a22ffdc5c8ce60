package webhook

import (
	"math/rand/v2"
	"time"
)

// Schedule is when a failed delivery is tried again: Initial after the
// first attempt, doubling each time up to Max, each wait shortened or
// lengthened at random by up to Jitter of itself, for as many retries as
// it takes to have waited at least Span in all even if every wait came out
// shortest.
type Schedule struct {
	Initial time.Duration
	Max     time.Duration
	// Jitter is a fraction, 0 to 1.
	Jitter float64
	// Span is how long, at least, a delivery is retried.
	Span time.Duration
}

// Defaults of a Schedule: 5 s, 10 s, 20 s, ... 4 h, 4 h, ... for 24 hours
// (18 retries; about 30 hours in all on average).
const (
	DefaultInitial = 5 * time.Second
	DefaultMax     = 4 * time.Hour
	DefaultJitter  = 0.1
	DefaultSpan    = 24 * time.Hour
)

// DefaultSchedule is the schedule deliveries use unless told otherwise,
// with its first wait initial (DefaultInitial when 0).
func DefaultSchedule(initial time.Duration) Schedule {
	if initial <= 0 {
		initial = DefaultInitial
	}
	return Schedule{Initial: initial, Max: max(DefaultMax, initial), Jitter: DefaultJitter, Span: DefaultSpan}
}

// base is the wait before retry n+1 (n retries made so far), without
// jitter.
func (s Schedule) base(n int) time.Duration {
	d := s.Initial
	for i := 0; i < n && d < s.Max; i++ {
		d *= 2
	}
	return min(d, s.Max)
}

// Delay is the wait before retry n+1, n retries having been made: the
// exponential wait with its jitter.
func (s Schedule) Delay(n int) time.Duration {
	d := s.base(n)
	if s.Jitter > 0 {
		f := 1 - s.Jitter + 2*s.Jitter*rand.Float64()
		d = time.Duration(float64(d) * f)
	}
	return max(d, time.Millisecond)
}

// Retries is how many retries a delivery gets: the fewest whose shortest
// waits add up to Span.
func (s Schedule) Retries() int {
	if s.Initial <= 0 || s.Jitter >= 1 {
		return 0
	}
	var total time.Duration
	n := 0
	for total < s.Span {
		total += time.Duration(float64(s.base(n)) * (1 - s.Jitter))
		n++
	}
	return n
}
