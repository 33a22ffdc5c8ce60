package processor

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// report is a progress report at a time since the run started.
type report struct {
	at        time.Duration
	pct       int
	milestone bool
}

// curve is the processor's reports of a generation that reports as the
// Gemini generator paces it (every 500 ms, toward 95 % as expected
// passes) for took: the fetched mark, the curve put between it and the
// generated mark, the generated and stored marks.
func curve(expected, took time.Duration) []report {
	rs := []report{{0, progressFetched, true}}
	last := 0
	for at := 500 * time.Millisecond; at <= took; at += 500 * time.Millisecond {
		pct := int(95 * (1 - math.Exp(-2*at.Seconds()/expected.Seconds())))
		if pct > last {
			rs = append(rs, report{at, progressFetched + pct*(progressGenerated-progressFetched)/100, false})
			last = pct
		}
	}
	return append(rs, report{took, progressGenerated, true}, report{took + 50*time.Millisecond, progressStored, false})
}

// steps is a generation of took in n even steps, each reported.
func steps(n int, took time.Duration) []report {
	rs := []report{{0, progressFetched, true}}
	for i := 1; i <= n; i++ {
		rs = append(rs, report{took * time.Duration(i) / time.Duration(n), progressFetched + i*100/(n+1)*(progressGenerated-progressFetched)/100, false})
	}
	return append(rs, report{took, progressGenerated, true}, report{took, progressStored, false})
}

func TestPacing(t *testing.T) {
	s, ms := time.Second, time.Millisecond
	for _, tc := range []struct {
		name    string
		pacing  Pacing
		reports []report // at: since the run's start
		want    []int    // the progress written
	}{
		{"the first report past the quiet period, whatever it is", Pacing{}, []report{
			{0, 10, true}, {100 * ms, 11, false}, {250 * ms, 12, false}, {s, 13, false},
		}, []int{12}},
		{"a slow fetch's milestone", Pacing{}, []report{{3 * s, 10, true}, {3*s + 500*ms, 17, false}}, []int{10}},
		{"a rise of a step waits for half the interval", Pacing{}, []report{
			{s, 10, true}, {2 * s, 40, false}, {5 * s, 45, false}, {6 * s, 46, false}, {7 * s, 60, false},
		}, []int{10, 46}},
		{"a small rise waits for the interval", Pacing{}, []report{
			{s, 10, true}, {6 * s, 15, false}, {10 * s, 16, false}, {11 * s, 17, false}, {12 * s, 18, false},
		}, []int{10, 17}},
		{"the interval counts from the last write", Pacing{}, []report{
			{s, 10, true}, {11 * s, 11, false}, {20 * s, 12, false}, {21 * s, 13, false},
		}, []int{10, 11, 13}},
		{"milestones once the quiet period is over", Pacing{}, []report{
			{s, 10, true}, {s + 100*ms, 90, true}, {s + 300*ms, 91, false}, {s + 400*ms, 92, true},
		}, []int{10, 92}},
		{"nothing that does not rise", Pacing{}, []report{
			{s, 10, true}, {20 * s, 10, false}, {21 * s, 5, true}, {40 * s, 9, false},
		}, []int{10}},
		{"no report below one", Pacing{}, []report{{s, 0, false}, {2 * s, -1, true}}, nil},
		{"a fast generation writes none", Pacing{}, []report{
			{0, progressFetched, true}, {50 * ms, progressGenerated, true}, {60 * ms, progressStored, false},
		}, nil},
		{"a finer pacing", Pacing{Step: 5, Interval: 2 * s}, []report{
			{s, 10, true}, {1500 * ms, 20, false}, {2 * s, 21, false}, {2500 * ms, 22, false},
			{3 * s, 23, false}, {4 * s, 24, false}, {5 * s, 25, false},
		}, []int{10, 21, 24}},
		{"no finer than the quiet period", Pacing{Step: 1, Interval: 100 * ms}, []report{
			{250 * ms, 10, true}, {400 * ms, 20, false}, {500 * ms, 30, false}, {600 * ms, 40, false},
		}, []int{10, 30}},
		{"a 20 s generation paced like Gemini's standard tier", Pacing{}, curve(10*s, 20*s), []int{17, 60, 80, 90}},
		{"a 20 s generation paced like Gemini's pro tier", Pacing{}, curve(25*s, 20*s), []int{12, 36, 56, 90}},
		{"a 60 s generation paced like Gemini's pro tier", Pacing{}, curve(25*s, 60*s), []int{12, 36, 56, 72, 80, 83, 85, 90}},
		{"a 3 s procedural generation", Pacing{}, steps(8, 3*s), []int{18, 90}},
		{"a 20 s procedural generation", Pacing{}, steps(8, 20*s), []int{18, 45, 71, 90}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1_800_000_000, 0)
			p := pacer{Pacing: tc.pacing.withDefaults(), at: start}
			var got []int
			for _, r := range tc.reports {
				if p.due(r.pct, start.Add(r.at), r.milestone) {
					got = append(got, r.pct)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("written %v, want %v", got, tc.want)
			}
		})
	}
}

// Whatever a generator reports, the default pacing writes a 20-second
// generation at most 6 times: the first report, the end of the
// generation, and between them at most a write every 5 s (half the
// interval).
func TestPacingBoundsAGeneration(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p := pacer{Pacing: Pacing{}.withDefaults(), at: start}
	writes := 0
	if p.due(progressFetched, start.Add(progressQuiet), true) {
		writes++
	}
	// A report every 10 ms, rising a point whenever it can.
	pct := progressFetched
	for at := 10 * time.Millisecond; at < 20*time.Second; at += 10 * time.Millisecond {
		if pct < progressGenerated-1 {
			pct++
		}
		if p.due(pct, start.Add(at), false) {
			writes++
		}
	}
	if p.due(progressGenerated, start.Add(20*time.Second), true) {
		writes++
	}
	if writes > 6 {
		t.Fatalf("%d writes; want at most 6", writes)
	}
}
