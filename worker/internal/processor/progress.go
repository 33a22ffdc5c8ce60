package processor

import (
	"sync"
	"time"
)

// Pacing says which of a run's progress reports are written to its task.
// Each write is a script run in Redis and a PUBLISH to every gateway,
// while a generator reports whenever its curve moves (the Gemini
// generator checks every 500 ms): every generator's reports go through
// one pacer, which writes them on a coarser grid. The first report and
// the end of the generation are milestones, written as soon as the quiet
// period allows; completion sets 100 with the task's end. Nothing is
// written within progressQuiet of the last write or of the start, so a
// generation shorter than that writes none.
type Pacing struct {
	// Step: a rise of at least Step points since the last write is
	// written once half of Interval has passed since it (0:
	// DefaultProgressStep).
	Step int
	// Interval: any rise is written once Interval has passed since the
	// last write (0: DefaultProgressInterval).
	Interval time.Duration
}

// The default pacing: a 20-second generation paced like Gemini's is
// written four times (its first report, two points of its curve, its
// end), where a write of every rise cost 30 to 40.
const (
	DefaultProgressStep     = 20
	DefaultProgressInterval = 10 * time.Second
)

// progressQuiet is the least time between two writes of a run's progress,
// its start counted as one.
const progressQuiet = 200 * time.Millisecond

func (p Pacing) withDefaults() Pacing {
	if p.Step <= 0 {
		p.Step = DefaultProgressStep
	}
	if p.Interval <= 0 {
		p.Interval = DefaultProgressInterval
	}
	return p
}

// pacer decides which of one run's progress reports are written. Reports
// may come from several goroutines (a generator's own, the run's).
type pacer struct {
	Pacing
	mu      sync.Mutex
	written int       // the last progress written; 0: none yet
	at      time.Time // when it was written, or the run started
}

// due reports whether pct, reported at now, is to be written, and if so
// takes it as written. Only a rise is written, and none within
// progressQuiet of the last write: the first, a milestone, a rise of
// Step points once Interval/2 has passed since the last write, any rise
// once Interval has.
func (p *pacer) due(pct int, now time.Time, milestone bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pct <= p.written {
		return false
	}
	since := now.Sub(p.at)
	switch {
	case since < progressQuiet:
		return false
	case p.written == 0, milestone, since >= p.Interval:
	case pct-p.written >= p.Step && since >= p.Interval/2:
	default:
		return false
	}
	p.written, p.at = pct, now
	return true
}
