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
	s := time.Second
	for _, tc := range []struct {
		name    string
		pacing  Pacing
		reports []report
		want    []int // the progress written
	}{
		{"the first report, whatever it is", Pacing{}, []report{{0, 3, false}, {s, 4, false}}, []int{3}},
		{"a rise of a step waits for half the interval", Pacing{}, []report{
			{0, 10, true}, {s, 40, false}, {4 * s, 45, false}, {5 * s, 46, false}, {6 * s, 60, false},
		}, []int{10, 46}},
		{"a small rise waits for the interval", Pacing{}, []report{
			{0, 10, true}, {5 * s, 15, false}, {9 * s, 16, false}, {10 * s, 17, false}, {11 * s, 18, false},
		}, []int{10, 17}},
		{"the interval counts from the last write", Pacing{}, []report{
			{0, 10, true}, {10 * s, 11, false}, {19 * s, 12, false}, {20 * s, 13, false},
		}, []int{10, 11, 13}},
		{"milestones are written at once", Pacing{}, []report{
			{0, 10, true}, {100 * time.Millisecond, 90, true}, {200 * time.Millisecond, 95, false},
		}, []int{10, 90}},
		{"nothing that does not rise", Pacing{}, []report{
			{0, 10, true}, {20 * s, 10, false}, {21 * s, 5, true}, {40 * s, 9, false},
		}, []int{10}},
		{"no report below one", Pacing{}, []report{{0, 0, false}, {s, -1, true}}, nil},
		{"a finer pacing", Pacing{Step: 5, Interval: 2 * s}, []report{
			{0, 10, true}, {500 * time.Millisecond, 20, false}, {s, 21, false}, {1500 * time.Millisecond, 22, false},
			{2 * s, 23, false}, {3 * s, 24, false}, {4 * s, 25, false},
		}, []int{10, 21, 24}},
		{"a 20 s generation paced like Gemini's standard tier", Pacing{}, curve(10*s, 20*s), []int{10, 58, 78, 90}},
		{"a 20 s generation paced like Gemini's pro tier", Pacing{}, curve(25*s, 20*s), []int{10, 34, 54, 90}},
		{"a 60 s generation paced like Gemini's pro tier", Pacing{}, curve(25*s, 60*s), []int{10, 34, 54, 71, 79, 83, 85, 90}},
		{"a 3 s procedural generation", Pacing{}, steps(8, 3*s), []int{10, 90}},
		{"a 20 s procedural generation", Pacing{}, steps(8, 20*s), []int{10, 36, 62, 90}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1_800_000_000, 0)
			p := pacer{Pacing: tc.pacing.withDefaults()}
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
	p := pacer{Pacing: Pacing{}.withDefaults()}
	writes := 0
	if p.due(progressFetched, start, true) {
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
