package loadgen

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// FormatStages writes stages as ParseStages reads them.
func FormatStages(st []Stage) string {
	parts := make([]string, len(st))
	for i, s := range st {
		parts[i] = s.Duration.String() + ":" + strconv.FormatFloat(s.Rate, 'f', -1, 64)
	}
	return strings.Join(parts, ",")
}

var opOrder = []string{OpSetup, OpCreate, OpQuery, OpList, OpCancel, OpCompletion, OpQueueWait, OpGeneration, OpTaskTime, OpDownload}

// WriteText prints the report as a table.
func (rep *Report) WriteText(w io.Writer) {
	if rep.Arrivals > 0 && time.Duration(rep.Elapsed-rep.Arrivals) >= 50*time.Millisecond {
		fmt.Fprintf(w, "%s against %s, %s, %.1fs of arrivals, %.1fs in all (waiting for the units in flight, grace %s)\n", rep.Mode, rep.URL, rep.Load,
			time.Duration(rep.Arrivals).Seconds(), time.Duration(rep.Elapsed).Seconds(), time.Duration(rep.Grace))
	} else {
		fmt.Fprintf(w, "%s against %s, %s, %.1fs\n", rep.Mode, rep.URL, rep.Load, time.Duration(rep.Elapsed).Seconds())
	}
	fmt.Fprintf(w, "units: offered %d = completed %d + failed %d + dropped %d + unfinished %d (sent %d)\n",
		rep.Offered, rep.Completed, rep.Failed, rep.Dropped, rep.Unfinished, rep.Sent)
	rt := rep.Rates
	target := ""
	if rt.Target > 0 {
		target = fmt.Sprintf("target %.1f/s, ", rt.Target)
	}
	fmt.Fprintf(w, "rates: %soffered %.1f/s, sent %.1f/s, achieved %.1f/s (completed over %.1fs); generator lag p99 %.2fms max %.2fms\n",
		target, rt.Offered, rt.Sent, rt.Achieved, time.Duration(rep.Elapsed).Seconds(), rep.GeneratorLag.P99, rep.GeneratorLag.Max)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "units\tcount\tp50 ms\tp90 ms\tp99 ms\tmax ms\t")
	for _, row := range []struct {
		name string
		n    int64
		p    Percentiles
	}{{"completed", rep.Completed, rep.Latency}, {"failed", rep.Failed, rep.FailedLatency}, {"dropped", rep.Dropped, rep.DroppedLatency}, {"unfinished", rep.Unfinished, rep.UnfinishedLatency}} {
		if row.n == 0 && row.name != "completed" {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", row.name, row.n, row.p.P50, row.p.P90, row.p.P99, row.p.Max)
	}
	_ = tw.Flush()
	if len(rep.Failures) > 0 {
		fmt.Fprintf(w, "failures: %s\n", counts(rep.Failures))
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tcount\tok\terrors\tok/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\t")
	for _, name := range opOrder {
		o, ok := rep.Ops[name]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", name, o.Count, o.OK, o.Errors, o.Throughput, o.Latency.P50, o.Latency.P90, o.Latency.P99, o.Latency.Max)
	}
	_ = tw.Flush()
	for _, name := range opOrder {
		o, ok := rep.Ops[name]
		if !ok || name == OpQueueWait || name == OpGeneration || name == OpTaskTime {
			continue
		}
		fmt.Fprintf(w, "%s status: %s\n", name, counts(o.Status))
		if len(o.ErrorTypes) > 0 {
			fmt.Fprintf(w, "%s errors: %s\n", name, counts(o.ErrorTypes))
		}
	}
	if len(rep.TaskOutcome) > 0 {
		fmt.Fprintf(w, "task outcomes: %s\n", counts(rep.TaskOutcome))
	}
	for _, dim := range sortedKeys(rep.Breakdown) {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\tcompleted\tfailed\tunfinished\tp50 ms\tp99 ms\t\n", dim)
		for _, v := range sortedKeys(rep.Breakdown[dim]) {
			g := rep.Breakdown[dim][v]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%.2f\t\n", v, g.Completed, g.Failed, g.Unfinished, g.Latency.P50, g.Latency.P99)
		}
		_ = tw.Flush()
	}
	for _, t := range rep.Thresholds {
		fmt.Fprintf(w, "threshold %s\n", t)
	}
}

func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// WriteCSV writes the per-second series, one row a second.
func (rep *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"t", "target_rate", "offered", "sent", "completed", "failed", "dropped", "unfinished", "in_flight", "p50_ms", "p90_ms", "p99_ms", "max_ms"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, p := range rep.Series {
		_ = cw.Write([]string{i(p.T), f(p.TargetRate), i(p.Offered), i(p.Sent), i(p.Completed), i(p.Failed), i(p.Dropped), i(p.Unfinished), i(p.InFlight),
			f(p.Latency.P50), f(p.Latency.P90), f(p.Latency.P99), f(p.Latency.Max)})
	}
	cw.Flush()
	return cw.Error()
}

// Merge combines the reports of runs made at the same time (from several
// machines) into one: counts add up, histograms merge, and the per-second
// series line up on the wall clock.
func Merge(reps []*Report) (*Report, error) {
	if len(reps) == 0 {
		return nil, errors.New("nothing to merge")
	}
	out := &Report{Mode: reps[0].Mode, Ops: map[string]*OpReport{}, Failures: map[string]int64{}, Histograms: map[string]string{}}
	var urls, loads []string
	var end time.Time
	hists := map[string]*hdrhistogram.Histogram{}
	mergeInto := func(m map[string]*hdrhistogram.Histogram, name, enc string, mk func() *hdrhistogram.Histogram) error {
		h, err := decode(enc)
		if err != nil {
			return fmt.Errorf("histogram %s: %w", name, err)
		}
		if h == nil {
			return nil
		}
		if m[name] == nil {
			m[name] = mk()
		}
		m[name].Merge(h)
		return nil
	}
	for i, r := range reps {
		if r.Mode != out.Mode {
			return nil, fmt.Errorf("report %d is of mode %s, the first of %s", i+1, r.Mode, out.Mode)
		}
		if out.StartedAt.IsZero() || r.StartedAt.Before(out.StartedAt) {
			out.StartedAt = r.StartedAt
		}
		if e := r.StartedAt.Add(time.Duration(r.Elapsed)); e.After(end) {
			end = e
		}
		out.Arrivals = max(out.Arrivals, r.Arrivals)
		out.Grace = max(out.Grace, r.Grace)
		urls = append(urls, r.URL)
		loads = append(loads, r.Load)
		out.Offered += r.Offered
		out.Sent += r.Sent
		out.Completed += r.Completed
		out.Failed += r.Failed
		out.Dropped += r.Dropped
		out.Unfinished += r.Unfinished
		for k, v := range r.Failures {
			out.Failures[k] += v
		}
		for k, v := range r.TaskOutcome {
			if out.TaskOutcome == nil {
				out.TaskOutcome = map[string]int64{}
			}
			out.TaskOutcome[k] += v
		}
		for name, enc := range r.Histograms {
			if err := mergeInto(hists, name, enc, newHist); err != nil {
				return nil, err
			}
		}
	}
	out.Elapsed = Duration(end.Sub(out.StartedAt))
	out.URL = strings.Join(dedupe(urls), ",")
	out.Load = fmt.Sprintf("%d runs merged: %s", len(reps), strings.Join(dedupe(loads), "; "))
	out.Latency = percentiles(hists[unitCompleted])
	out.FailedLatency = percentiles(hists[unitFailed])
	out.DroppedLatency = percentiles(hists["dropped"])
	out.UnfinishedLatency = percentiles(hists[unitUnfinished])
	out.GeneratorLag = percentiles(hists["lag"])
	for name, h := range hists {
		out.Histograms[name] = encode(h)
	}
	out.Rates = rates(out, nil)
	for _, r := range reps {
		out.Rates.Target += r.Rates.Target
	}
	if err := mergeOps(out, reps); err != nil {
		return nil, err
	}
	if err := mergeSeries(out, reps); err != nil {
		return nil, err
	}
	if err := mergeBreakdown(out, reps); err != nil {
		return nil, err
	}
	return out, nil
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func mergeOps(out *Report, reps []*Report) error {
	type acc struct {
		ok, fail *hdrhistogram.Histogram
		rep      *OpReport
	}
	accs := map[string]*acc{}
	for _, r := range reps {
		for name, o := range r.Ops {
			a := accs[name]
			if a == nil {
				a = &acc{ok: newHist(), fail: newHist(), rep: &OpReport{Status: map[string]int64{}, ErrorTypes: map[string]int64{}}}
				accs[name] = a
			}
			a.rep.Count += o.Count
			a.rep.OK += o.OK
			a.rep.Errors += o.Errors
			a.rep.Throughput += o.Throughput
			for k, v := range o.Status {
				a.rep.Status[k] += v
			}
			for k, v := range o.ErrorTypes {
				a.rep.ErrorTypes[k] += v
			}
			for _, p := range []struct {
				enc string
				h   *hdrhistogram.Histogram
			}{{o.Hist, a.ok}, {o.FailedHist, a.fail}} {
				h, err := decode(p.enc)
				if err != nil {
					return fmt.Errorf("op %s: %w", name, err)
				}
				if h != nil {
					p.h.Merge(h)
				}
			}
		}
	}
	for name, a := range accs {
		a.rep.Latency, a.rep.Failed = latencyOf(a.ok), percentiles(a.fail)
		a.rep.Hist, a.rep.FailedHist = encode(a.ok), encode(a.fail)
		out.Ops[name] = a.rep
	}
	return nil
}

func mergeSeries(out *Report, reps []*Report) error {
	base := out.StartedAt.Truncate(time.Second)
	var points []Point
	hists := map[int64]*hdrhistogram.Histogram{}
	for _, r := range reps {
		shift := int64(r.StartedAt.Sub(base) / time.Second)
		for _, p := range r.Series {
			t := p.T + shift
			for int64(len(points)) <= t {
				points = append(points, Point{T: int64(len(points))})
			}
			q := &points[t]
			q.Offered += p.Offered
			q.Sent += p.Sent
			q.Completed += p.Completed
			q.Failed += p.Failed
			q.Dropped += p.Dropped
			q.Unfinished += p.Unfinished
			q.InFlight += p.InFlight
			q.TargetRate += p.TargetRate
			h, err := decode(p.Hist)
			if err != nil {
				return fmt.Errorf("series second %d: %w", p.T, err)
			}
			if h != nil {
				if hists[t] == nil {
					hists[t] = newSecondHist()
				}
				hists[t].Merge(h)
			}
		}
	}
	for t, h := range hists {
		points[t].Latency, points[t].Hist = percentiles(h), encode(h)
	}
	out.Series = points
	return nil
}

func mergeBreakdown(out *Report, reps []*Report) error {
	hists := map[string]map[string]*hdrhistogram.Histogram{}
	for _, r := range reps {
		for dim, vals := range r.Breakdown {
			if out.Breakdown == nil {
				out.Breakdown = map[string]map[string]*Group{}
			}
			if out.Breakdown[dim] == nil {
				out.Breakdown[dim] = map[string]*Group{}
				hists[dim] = map[string]*hdrhistogram.Histogram{}
			}
			for v, g := range vals {
				o := out.Breakdown[dim][v]
				if o == nil {
					o = &Group{}
					out.Breakdown[dim][v] = o
				}
				o.Completed += g.Completed
				o.Failed += g.Failed
				o.Unfinished += g.Unfinished
				h, err := decode(g.Hist)
				if err != nil {
					return fmt.Errorf("breakdown %s %s: %w", dim, v, err)
				}
				if h != nil {
					if hists[dim][v] == nil {
						hists[dim][v] = newHist()
					}
					hists[dim][v].Merge(h)
				}
			}
		}
	}
	for dim, vals := range hists {
		for v, h := range vals {
			out.Breakdown[dim][v].Latency, out.Breakdown[dim][v].Hist = percentiles(h), encode(h)
		}
	}
	return nil
}
