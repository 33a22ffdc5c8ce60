package loadgen

import (
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
	"time"
)

// series is one line of a chart.
type series struct {
	name, color string
	ys          []float64
}

// lineChart draws series over the run's seconds as an inline SVG.
func lineChart(title, unit string, ss []series) template.HTML {
	const w, h, left, bottom, top = 720.0, 236.0, 60.0, 30.0, 40.0
	n := 0
	ymax := 0.0
	for _, s := range ss {
		n = max(n, len(s.ys))
		for _, y := range s.ys {
			ymax = max(ymax, y)
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax = niceCeil(ymax)
	xw := w - left - 10
	yh := h - bottom - top
	x := func(i int) float64 {
		if n <= 1 {
			return left
		}
		return left + xw*float64(i)/float64(n-1)
	}
	y := func(v float64) float64 { return top + yh*(1-v/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`, w, h, w, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="16" class="t">%s</text>`, left, html.EscapeString(title))
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" class="g"/><text x="%.0f" y="%.1f" class="a" text-anchor="end">%s</text>`,
			left, w-10, y(v), y(v), left-4, y(v)+4, html.EscapeString(short(v)+unit))
	}
	for _, frac := range []float64{0, 0.25, 0.5, 0.75, 1} {
		i := int(math.Round(frac * float64(max(n-1, 0))))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" class="a" text-anchor="middle">%ds</text>`, x(i), h-10, i)
	}
	for k, s := range ss {
		if len(s.ys) == 0 {
			continue
		}
		pts := make([]string, len(s.ys))
		for i, v := range s.ys {
			pts[i] = fmt.Sprintf("%.1f,%.1f", x(i), y(v))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s</title></polyline>`, s.color, strings.Join(pts, " "), html.EscapeString(s.name))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="3" fill="%s"/><text x="%.0f" y="%.0f" class="a">%s</text>`,
			left+float64(k)*110, 26.0, s.color, left+14+float64(k)*110, 30.0, html.EscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// histChart draws the completed units' latencies in log-spaced bins.
func histChart(enc string) template.HTML {
	h, err := decode(enc)
	if err != nil || h == nil || h.TotalCount() == 0 {
		return template.HTML(`<p>No completed unit.</p>`)
	}
	lo, hi := math.Log10(float64(max(h.Min(), 1))), math.Log10(float64(max(h.Max(), 2)))
	if hi-lo < 0.5 {
		lo, hi = lo-0.25, hi+0.25
	}
	const bins = 40
	counts := make([]float64, bins)
	for _, bar := range h.Distribution() {
		if bar.Count == 0 {
			continue
		}
		i := int(float64(bins) * (math.Log10(float64(max(bar.From, 1))) - lo) / (hi - lo))
		counts[min(max(i, 0), bins-1)] += float64(bar.Count)
	}
	const w, ht, left, bottom, top = 720.0, 220.0, 60.0, 30.0, 24.0
	cmax := 0.0
	for _, c := range counts {
		cmax = max(cmax, c)
	}
	cmax = niceCeil(cmax)
	bw := (w - left - 10) / bins
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="latency histogram">`, w, ht, w, ht)
	fmt.Fprintf(&b, `<text x="%.0f" y="16" class="t">Latency of completed units (log scale)</text>`, left)
	for i := 0; i <= 4; i++ {
		v := cmax * float64(i) / 4
		yy := top + (ht-bottom-top)*(1-v/cmax)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" class="g"/><text x="%.0f" y="%.1f" class="a" text-anchor="end">%s</text>`, left, w-10, yy, yy, left-4, yy+4, short(v))
	}
	for i, c := range counts {
		bh := (ht - bottom - top) * c / cmax
		from := math.Pow(10, lo+(hi-lo)*float64(i)/bins) / 1000
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a78b5"><title>%s ms: %.0f</title></rect>`,
			left+float64(i)*bw, ht-bottom-bh, bw-1, bh, short(from), c)
	}
	for i := 0; i <= 4; i++ {
		v := math.Pow(10, lo+(hi-lo)*float64(i)/4) / 1000
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" class="a" text-anchor="middle">%sms</text>`, left+(w-left-10)*float64(i)/4, ht-10, short(v))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

var htmlPage = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>loadgen: {{.R.Mode}} against {{.R.URL}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:900px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}.ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}
svg{display:block;margin:12px 0}svg .t{font-size:13px;font-weight:600}svg .a{font-size:11px;fill:#555}svg .g{stroke:#e5e5e5}
</style></head><body>
<h1>Load test: {{.R.Mode}}</h1>
<p>{{.R.URL}} · {{.R.Load}} · started {{.Started}} · {{.Arrivals}} of arrivals, {{.Elapsed}} in all</p>
{{if .R.Thresholds}}<h2 id="verdict">SLO: <span class="{{if .Met}}ok{{else}}bad{{end}}">{{if .Met}}met{{else}}not met{{end}}</span></h2>
<table id="thresholds"><tr><th>threshold</th><th>measured</th><th>result</th></tr>
{{range .R.Thresholds}}<tr><td>{{.Expr}}</td><td>{{printf "%.2f" .Measured}}{{.Unit}}</td><td class="{{if .OK}}ok{{else}}bad{{end}}">{{if .OK}}met{{else}}failed{{end}}</td></tr>{{end}}
</table>{{end}}
<h2>Units</h2>
<table id="units"><tr><th>units</th><th>count</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>
<tr><td>offered</td><td>{{.R.Offered}}</td><td></td><td></td><td></td><td></td></tr>
<tr><td>sent</td><td>{{.R.Sent}}</td><td></td><td></td><td></td><td></td></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td>{{.N}}</td><td>{{printf "%.2f" .P.P50}}</td><td>{{printf "%.2f" .P.P90}}</td><td>{{printf "%.2f" .P.P99}}</td><td>{{printf "%.2f" .P.Max}}</td></tr>{{end}}
</table>
<p>Rates: {{if .R.Rates.Target}}target {{printf "%.1f" .R.Rates.Target}}/s, {{end}}offered {{printf "%.1f" .R.Rates.Offered}}/s, sent {{printf "%.1f" .R.Rates.Sent}}/s, achieved {{printf "%.1f" .R.Rates.Achieved}}/s. Generator lag p99 {{printf "%.2f" .R.GeneratorLag.P99}} ms.</p>
{{if .R.Failures}}<h2>Failures</h2><table><tr><th>status and message</th><th>units</th></tr>{{range $k, $v := .R.Failures}}<tr><td>{{$k}}</td><td>{{$v}}</td></tr>{{end}}</table>{{end}}
<h2>Over time</h2>
{{.Latency}}
{{.Throughput}}
{{.InFlight}}
<h2>Latency histogram</h2>
{{.Hist}}
{{range $dim, $vals := .R.Breakdown}}<h2>By {{$dim}}</h2><table><tr><th>{{$dim}}</th><th>completed</th><th>failed</th><th>unfinished</th><th>p50 ms</th><th>p99 ms</th></tr>
{{range $v, $g := $vals}}<tr><td>{{$v}}</td><td>{{$g.Completed}}</td><td>{{$g.Failed}}</td><td>{{$g.Unfinished}}</td><td>{{printf "%.2f" $g.Latency.P50}}</td><td>{{printf "%.2f" $g.Latency.P99}}</td></tr>{{end}}</table>{{end}}
{{if .R.Ops}}<h2>Operations</h2><table><tr><th>op</th><th>count</th><th>ok</th><th>errors</th><th>p50 ms</th><th>p99 ms</th></tr>
{{range .Ops}}<tr><td>{{.Name}}</td><td>{{.O.Count}}</td><td>{{.O.OK}}</td><td>{{.O.Errors}}</td><td>{{printf "%.2f" .O.Latency.P50}}</td><td>{{printf "%.2f" .O.Latency.P99}}</td></tr>{{end}}</table>{{end}}
</body></html>
`))

// WriteHTML writes the report as one self-contained page (inline SVG, no
// script, nothing fetched): the verdict of the thresholds, the units, the
// latency percentiles, throughput, errors and units in flight over time,
// and a latency histogram.
func (rep *Report) WriteHTML(w io.Writer) error {
	var p50, p90, p99, target, completed, failed, dropped, inflight []float64
	for _, p := range rep.Series {
		p50, p90, p99 = append(p50, p.Latency.P50), append(p90, p.Latency.P90), append(p99, p.Latency.P99)
		target = append(target, p.TargetRate)
		completed, failed, dropped = append(completed, float64(p.Completed)), append(failed, float64(p.Failed)), append(dropped, float64(p.Dropped))
		inflight = append(inflight, float64(p.InFlight))
	}
	tp := []series{{"completed/s", "#1a7f37", completed}, {"failed/s", "#c62828", failed}, {"dropped/s", "#ef6c00", dropped}}
	if rep.Rates.Target > 0 {
		tp = append(tp, series{"target/s", "#888", target})
	}
	type row struct {
		Name string
		N    int64
		P    Percentiles
	}
	type opRow struct {
		Name string
		O    *OpReport
	}
	var ops []opRow
	for _, name := range opOrder {
		if o := rep.Ops[name]; o != nil {
			ops = append(ops, opRow{name, o})
		}
	}
	met := true
	for _, t := range rep.Thresholds {
		met = met && t.OK
	}
	return htmlPage.Execute(w, map[string]any{
		"R": rep, "Met": met, "Ops": ops,
		"Started":  rep.StartedAt.UTC().Format(time.RFC3339),
		"Arrivals": time.Duration(rep.Arrivals).Round(time.Millisecond).String(),
		"Elapsed":  time.Duration(rep.Elapsed).Round(time.Millisecond).String(),
		"Rows": []row{{"completed", rep.Completed, rep.Latency}, {"failed", rep.Failed, rep.FailedLatency},
			{"dropped", rep.Dropped, rep.DroppedLatency}, {"unfinished", rep.Unfinished, rep.UnfinishedLatency}},
		"Latency":    lineChart("Latency of the units completed each second", "ms", []series{{"p50", "#4a78b5", p50}, {"p90", "#ef6c00", p90}, {"p99", "#c62828", p99}}),
		"Throughput": lineChart("Units a second", "", tp),
		"InFlight":   lineChart("Units in flight", "", []series{{"in flight", "#6a1b9a", inflight}}),
		"Hist":       histChart(rep.Histograms[unitCompleted]),
	})
}
