package loadgen

import (
	"encoding/base64"
	"sort"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Units of work end in exactly one of these.
const (
	unitCompleted  = "completed"
	unitFailed     = "failed"
	unitUnfinished = "unfinished"
)

// histograms hold microseconds, from 1 µs to an hour.
const histMax = int64(time.Hour / time.Microsecond)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, 3) }

// newSecondHist is coarser (2 significant digits), one a second of the run.
func newSecondHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, 2) }

func recordHist(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(d.Microseconds(), 1), histMax))
}

// tally accounts for every unit of work: each one offered ends as dropped,
// completed, failed or unfinished, and each is counted in the second it
// happened.
type tally struct {
	mu       sync.Mutex
	start    time.Time
	offered  int64
	sent     int64
	done     map[string]int64 // completed, failed, unfinished
	failures map[string]int64 // "status message" of failed units
	dropped  int64
	hist     map[string]*hdrhistogram.Histogram // completed, failed, unfinished, dropped, lag
	seconds  []*second
	groups   map[string]map[string]*group // dimension → value → figures
}

// second is one second of the run: what was offered and sent in it (by the
// units' scheduled and sending moments) and what ended in it.
type second struct {
	offered, sent, completed, failed, dropped, unfinished int64
	hist                                                  *hdrhistogram.Histogram // completed units ending in this second
}

// group is the units sharing a model, a key or a gateway.
type group struct {
	completed, failed, unfinished int64
	hist                          *hdrhistogram.Histogram
}

func newTally(start time.Time) *tally {
	return &tally{
		start: start, done: map[string]int64{}, failures: map[string]int64{},
		hist:   map[string]*hdrhistogram.Histogram{},
		groups: map[string]map[string]*group{},
	}
}

func (t *tally) h(name string) *hdrhistogram.Histogram {
	h := t.hist[name]
	if h == nil {
		h = newHist()
		t.hist[name] = h
	}
	return h
}

func (t *tally) sec(at time.Time) *second {
	i := max(int(at.Sub(t.start)/time.Second), 0)
	for len(t.seconds) <= i {
		t.seconds = append(t.seconds, &second{})
	}
	return t.seconds[i]
}

// offer counts a unit whose time came at scheduled, taken up at launched
// (the difference is the generator's lag).
func (t *tally) offer(scheduled, launched time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.offered++
	t.sec(scheduled).offered++
	recordHist(t.h("lag"), launched.Sub(scheduled))
}

// drop counts a unit refused at launched for being over --max-inflight.
func (t *tally) drop(scheduled, launched time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropped++
	t.sec(launched).dropped++
	recordHist(t.h("dropped"), launched.Sub(scheduled))
}

func (t *tally) send(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	t.sec(at).sent++
}

// labels name a unit's model, key and gateway for the breakdown.
type labels struct{ model, key, gateway, action string }

// end counts a sent unit's end: outcome is unitCompleted, unitFailed (with
// why, "status message") or unitUnfinished; latency is from its scheduled
// moment.
func (t *tally) end(at time.Time, latency time.Duration, outcome, why string, l labels) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done[outcome]++
	recordHist(t.h(outcome), latency)
	s := t.sec(at)
	switch outcome {
	case unitCompleted:
		s.completed++
		if s.hist == nil {
			s.hist = newSecondHist()
		}
		recordHist(s.hist, latency)
	case unitFailed:
		s.failed++
		if len(t.failures) < 100 || t.failures[why] > 0 {
			t.failures[why]++
		} else {
			t.failures["other"]++
		}
	default:
		s.unfinished++
	}
	for dim, v := range map[string]string{"model": l.model, "key": l.key, "gateway": l.gateway, "action": l.action} {
		if v == "" {
			continue
		}
		if t.groups[dim] == nil {
			t.groups[dim] = map[string]*group{}
		}
		g := t.groups[dim][v]
		if g == nil {
			g = &group{hist: newHist()}
			t.groups[dim][v] = g
		}
		switch outcome {
		case unitCompleted:
			g.completed++
			recordHist(g.hist, latency)
		case unitFailed:
			g.failed++
		default:
			g.unfinished++
		}
	}
}

// Percentiles are latencies in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	if h == nil || h.TotalCount() == 0 {
		return Percentiles{}
	}
	ms := func(v int64) float64 { return float64(v) / 1000 }
	return Percentiles{P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())}
}

// encode writes a histogram in HdrHistogram's compressed V2 form, base64;
// "" for none.
func encode(h *hdrhistogram.Histogram) string {
	if h == nil || h.TotalCount() == 0 {
		return ""
	}
	b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return ""
	}
	return string(b)
}

// decode reads what encode wrote; nil for "".
func decode(s string) (*hdrhistogram.Histogram, error) {
	if s == "" {
		return nil, nil
	}
	if _, err := base64.StdEncoding.DecodeString(s); err != nil {
		return nil, err
	}
	return hdrhistogram.Decode([]byte(s))
}

// Point is one second of the run.
type Point struct {
	T          int64       `json:"t"` // seconds from the start
	Offered    int64       `json:"offered"`
	Sent       int64       `json:"sent"`
	Completed  int64       `json:"completed"`
	Failed     int64       `json:"failed"`
	Dropped    int64       `json:"dropped"`
	Unfinished int64       `json:"unfinished"`
	InFlight   int64       `json:"in_flight"` // at the second's end
	TargetRate float64     `json:"target_rate,omitempty"`
	Latency    Percentiles `json:"latency_ms"` // of the units completed in it
	Hist       string      `json:"hist,omitempty"`
}

// Group is the figures of the units sharing a model, key or gateway.
type Group struct {
	Completed  int64       `json:"completed"`
	Failed     int64       `json:"failed"`
	Unfinished int64       `json:"unfinished"`
	Latency    Percentiles `json:"latency_ms"`
	Hist       string      `json:"hist,omitempty"`
}

// summarize fills the report's unit figures.
func (t *tally) summarize(rep *Report, sched *schedule) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rep.Offered, rep.Sent, rep.Dropped = t.offered, t.sent, t.dropped
	rep.Completed, rep.Failed, rep.Unfinished = t.done[unitCompleted], t.done[unitFailed], t.done[unitUnfinished]
	rep.Failures = t.failures
	rep.Latency = percentiles(t.hist[unitCompleted])
	rep.FailedLatency = percentiles(t.hist[unitFailed])
	rep.DroppedLatency = percentiles(t.hist["dropped"])
	rep.UnfinishedLatency = percentiles(t.hist[unitUnfinished])
	rep.GeneratorLag = percentiles(t.hist["lag"])
	rep.Histograms = map[string]string{}
	for name, h := range t.hist {
		if s := encode(h); s != "" {
			rep.Histograms[name] = s
		}
	}
	var inflight int64
	rep.Series = make([]Point, len(t.seconds))
	for i, s := range t.seconds {
		inflight += s.sent - s.completed - s.failed - s.unfinished
		p := Point{T: int64(i), Offered: s.offered, Sent: s.sent, Completed: s.completed, Failed: s.failed, Dropped: s.dropped, Unfinished: s.unfinished,
			InFlight: inflight, Latency: percentiles(s.hist), Hist: encode(s.hist)}
		if sched != nil {
			p.TargetRate = sched.rateAt(time.Duration(i)*time.Second + time.Second/2)
		}
		rep.Series[i] = p
	}
	if len(t.groups) > 0 {
		rep.Breakdown = map[string]map[string]*Group{}
	}
	for dim, vals := range t.groups {
		rep.Breakdown[dim] = map[string]*Group{}
		for v, g := range vals {
			rep.Breakdown[dim][v] = &Group{Completed: g.completed, Failed: g.failed, Unfinished: g.unfinished, Latency: percentiles(g.hist), Hist: encode(g.hist)}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
