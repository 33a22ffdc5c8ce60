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
// the end of the generation are milestones, written whenever they raise
// the progress; completion sets 100 with the task's end.
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
// written four times (the first report, two points of its curve, its
// end), where a write of every rise costs 30 to 40.
const (
	DefaultProgressStep     = 20
	DefaultProgressInterval = 10 * time.Second
)

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
	at      time.Time // when it was written
}

// due reports whether pct, reported at now, is to be written, and if so
// takes it as written. Only a rise is written: the first report, a
// milestone, a rise of Step points once Interval/2 has passed since the
// last write, any rise once Interval has.
func (p *pacer) due(pct int, now time.Time, milestone bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pct <= p.written {
		return false
	}
	since := now.Sub(p.at)
	switch {
	case p.written == 0, milestone, since >= p.Interval:
	case pct-p.written >= p.Step && since >= p.Interval/2:
	default:
		return false
	}
	p.written, p.at = pct, now
	return true
}
