package loadgen

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Stage is one stretch of an open loop: over Duration the arrival rate moves
// in a straight line from the previous stage's Rate (0 before the first) to
// this Rate. A stage of 0s jumps to its rate.
type Stage struct {
	Duration time.Duration
	Rate     float64
}

// ParseStages reads "DURATION:RATE,..." e.g. "30s:100,60s:500,30s:0".
func ParseStages(s string) ([]Stage, error) {
	var out []Stage
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		d, r, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("stage %q: want DURATION:RATE, e.g. 30s:100", item)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur < 0 {
			return nil, fmt.Errorf("stage %q: %q is not a duration", item, d)
		}
		rate, err := strconv.ParseFloat(r, 64)
		if err != nil || rate < 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
			return nil, fmt.Errorf("stage %q: the rate must be a number >= 0", item)
		}
		out = append(out, Stage{Duration: dur, Rate: rate})
	}
	if len(out) == 0 {
		return nil, errors.New("no stages")
	}
	var total time.Duration
	for _, st := range out {
		total += st.Duration
	}
	if total == 0 {
		return nil, errors.New("the stages last 0s")
	}
	return out, nil
}

// segment is a stretch of the schedule with a rate moving linearly from r0
// to r1 over dur (dur < 0: endless at r0).
type segment struct {
	start  time.Duration
	dur    time.Duration
	r0, r1 float64
	n0     float64 // arrivals before the segment
}

func (s segment) arrivals() float64 {
	if s.dur < 0 {
		return math.Inf(1)
	}
	return (s.r0 + s.r1) / 2 * s.dur.Seconds()
}

// schedule gives each arrival of an open loop its moment: arrival k is due
// when the integral of the rate reaches k.
type schedule struct{ segs []segment }

func newSchedule(stages []Stage, rate float64, duration time.Duration) schedule {
	if len(stages) == 0 {
		d := duration
		if d <= 0 {
			d = -1
		}
		return schedule{segs: []segment{{dur: d, r0: rate, r1: rate}}}
	}
	var s schedule
	var at time.Duration
	var n, prev float64
	for _, st := range stages {
		seg := segment{start: at, dur: st.Duration, r0: prev, r1: st.Rate, n0: n}
		s.segs = append(s.segs, seg)
		n += seg.arrivals()
		at += st.Duration
		prev = st.Rate
	}
	return s
}

// length is when the last segment ends (-1: never).
func (s schedule) length() time.Duration {
	last := s.segs[len(s.segs)-1]
	if last.dur < 0 {
		return -1
	}
	return last.start + last.dur
}

// rateAt is the target rate at offset t.
func (s schedule) rateAt(t time.Duration) float64 {
	for _, seg := range s.segs {
		if seg.dur < 0 || t < seg.start+seg.dur {
			if seg.dur <= 0 {
				return seg.r1
			}
			f := float64(t-seg.start) / float64(seg.dur)
			return seg.r0 + (seg.r1-seg.r0)*max(f, 0)
		}
	}
	return s.segs[len(s.segs)-1].r1
}

// at is the offset of arrival k (from 0), false past the schedule's end.
func (s schedule) at(k int64) (time.Duration, bool) {
	n := float64(k)
	for _, seg := range s.segs {
		a := seg.arrivals()
		if n >= seg.n0+a || a == 0 {
			continue
		}
		m := n - seg.n0
		if m <= 0 {
			return seg.start, true
		}
		var tau float64
		if seg.dur < 0 || seg.r1 == seg.r0 {
			tau = m / seg.r0
		} else {
			// r0·τ + (r1-r0)/(2D)·τ² = m, in the form that is stable for
			// ramps up and down and for r0 = 0.
			acc := (seg.r1 - seg.r0) / (2 * seg.dur.Seconds())
			tau = 2 * m / (seg.r0 + math.Sqrt(max(seg.r0*seg.r0+4*acc*m, 0)))
		}
		return seg.start + time.Duration(tau*float64(time.Second)), true
	}
	return 0, false
}
