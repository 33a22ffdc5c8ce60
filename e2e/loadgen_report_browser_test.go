package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/easelhq/easel/tools/loadgen"
)

// TestLoadgenReportInBrowser runs loadgen against the real stack with
// stages and thresholds, writes its HTML report, and opens it in headless
// chromium from a file: the page says whether the SLO was met (and which
// threshold failed), draws its charts, fetches nothing and logs no error.
func TestLoadgenReportInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser test is not part of make test-short")
	}
	t.Parallel()
	b := startBrowser(t)
	s := startStack(t, stackOptions{}) // no simulated delay: the account's in-flight limit never binds
	dir := artifactDir(t)
	stages, err := loadgen.ParseStages("0s:5,1s:5,1s:10")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := loadgen.Run(context.Background(), loadgen.Config{BaseURL: s.base, Keys: []string{s.key}, Mode: loadgen.ModeCreate, Stages: stages,
		Mix: []loadgen.MixEntry{{Model: "lumen-2.5-flash-image", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Offered == 0 || rep.Completed != rep.Offered {
		t.Fatalf("offered %d, completed %d, failures %v", rep.Offered, rep.Completed, rep.Failures)
	}
	for _, tc := range []struct {
		name       string
		thresholds []string
		verdict    string
		failed     string
	}{
		{"met", []string{"p99<30s", "errors<1%", "achieved>99%"}, "met", ""},
		{"not met", []string{"errors<1%", "p50<1us"}, "not met", "p50<1us"},
	} {
		var ts []loadgen.Threshold
		for _, e := range tc.thresholds {
			th, err := loadgen.ParseThreshold(e)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, th)
		}
		rep.Check(ts)
		page := filepath.Join(t.TempDir(), "report.html")
		f, err := os.Create(page)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteHTML(f); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		b.do(t, 20*time.Second, chromedp.Navigate("file://"+page), chromedp.WaitVisible(chromedp.ID("verdict")))
		if got := eval[string](t, b, `document.querySelector('#verdict span').textContent`); got != tc.verdict {
			t.Errorf("%s: the verdict reads %q, want %q", tc.name, got, tc.verdict)
		}
		failed := eval[string](t, b, `[...document.querySelectorAll('#thresholds td.bad')].map(td => td.parentElement.cells[0].textContent).join(',')`)
		if failed != tc.failed {
			t.Errorf("%s: the failed thresholds listed are %q, want %q", tc.name, failed, tc.failed)
		}
		// Four charts with something drawn in them, at their size.
		if n := eval[int](t, b, `[...document.querySelectorAll('svg')].filter(s => s.getBoundingClientRect().width >= 700 && s.querySelector('polyline, rect[height]')).length`); n != 4 {
			t.Errorf("%s: %d charts drawn, want 4", tc.name, n)
		}
		if n := eval[int](t, b, `performance.getEntriesByType('resource').length`); n != 0 {
			t.Errorf("%s: the page fetched %d resources; it must be self-contained", tc.name, n)
		}
		b.screenshot(t, dir, "loadgen-report-"+strings.ReplaceAll(tc.name, " ", "-")+".png")
	}
	if p := b.problems(); len(p) > 0 {
		t.Errorf("the browser console:\n%s", strings.Join(p, "\n"))
	}
}
