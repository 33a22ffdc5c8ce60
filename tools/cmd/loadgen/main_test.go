package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/easelhq/easel/tools/loadgen"
)

// gateway answers creates with status (200: a task id).
func gateway(t *testing.T, status *atomic.Int32) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st := status.Load(); st != 200 {
			w.WriteHeader(int(st))
			_, _ = w.Write([]byte(`{"code":500,"msg":"boom","data":null}`))
			return
		}
		_, _ = w.Write([]byte(`{"code":200,"msg":"success","data":{"task_id":"task_x"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitError
}

// TestExitStatusFollowsTheThresholds: 0 when every threshold is met, 2
// naming the one that failed, 3 when nothing completed, 1 for a bad flag.
func TestExitStatusFollowsTheThresholds(t *testing.T) {
	var st atomic.Int32
	url := gateway(t, &st)
	for _, tc := range []struct {
		name   string
		status int32
		args   []string
		code   int
		says   string
	}{
		{"met", 200, []string{"--threshold", "p99<10s", "--threshold", "errors<1%,achieved>99%"}, 0, ""},
		{"a latency objective missed", 200, []string{"--threshold", "errors<1%", "--threshold", "p50<1us"}, exitThreshold, "p50<1us FAILED"},
		{"every unit failed", 500, nil, exitNoneOK, "none of the 20 units offered completed"},
		{"errors over the objective", 500, []string{"--threshold", "errors<50%"}, exitNoneOK, "none of the 20"},
		{"a bad threshold", 200, []string{"--threshold", "p99<fast"}, exitError, "p99<fast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st.Store(tc.status)
			var out, errOut bytes.Buffer
			args := append([]string{"--url", url, "--key", "k", "--concurrency", "2", "--requests", "20", "--quiet"}, tc.args...)
			err := run(context.Background(), args, &out, &errOut)
			if got := exitCode(err); got != tc.code || (tc.says != "" && !strings.Contains(err.Error(), tc.says)) {
				t.Errorf("exit %d (%v), want %d saying %q\n%s", got, err, tc.code, tc.says, out.String())
			}
			if tc.code != exitError && !strings.Contains(out.String(), "units: offered 20 = ") {
				t.Errorf("report:\n%s", out.String())
			}
		})
	}
}

// TestJSONSummaryAndMerge: the JSON names the unit counts and latency_ms
// as documented, and 'loadgen merge' adds two runs up.
func TestJSONSummaryAndMerge(t *testing.T) {
	var st atomic.Int32
	st.Store(200)
	url := gateway(t, &st)
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"a.json", "b.json"} {
		f := filepath.Join(dir, name)
		files = append(files, f)
		var out bytes.Buffer
		if err := run(context.Background(), []string{"--url", url, "--key", "k", "--rate", "50", "--requests", "25", "--quiet", "--json", f, "--csv", f + ".csv"}, &out, &out); err != nil {
			t.Fatal(err, out.String())
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"offered", "sent", "completed", "failed", "dropped", "unfinished"} {
			if _, ok := m[k].(float64); !ok {
				t.Errorf("%s: %v", k, m[k])
			}
		}
		lat, _ := m["latency_ms"].(map[string]any)
		if len(lat) != 4 || lat["p50"] == nil || lat["p90"] == nil || lat["p99"] == nil || lat["max"] == nil {
			t.Errorf("latency_ms %v", m["latency_ms"])
		}
		if m["offered"] != 25.0 || m["completed"] != 25.0 {
			t.Errorf("offered %v completed %v", m["offered"], m["completed"])
		}
		if c, err := os.ReadFile(f + ".csv"); err != nil || !strings.HasPrefix(string(c), "t,target_rate,offered,") {
			t.Errorf("csv %q %v", c, err)
		}
	}
	var out, errOut bytes.Buffer
	html := filepath.Join(dir, "report.html")
	if err := run(context.Background(), append([]string{"merge", "--threshold", "achieved>99%", "--html", html}, files...), &out, &errOut); err != nil {
		t.Fatal(err, errOut.String())
	}
	var merged loadgen.Report
	if err := json.Unmarshal(out.Bytes(), &merged); err != nil {
		t.Fatalf("merge output: %v\n%s", err, out.String())
	}
	if merged.Offered != 50 || merged.Completed != 50 || len(merged.Thresholds) != 1 || !merged.Thresholds[0].OK {
		t.Errorf("merged %d/%d, thresholds %+v", merged.Offered, merged.Completed, merged.Thresholds)
	}
	if !strings.Contains(errOut.String(), "units: offered 50 = completed 50") {
		t.Errorf("merge text report:\n%s", errOut.String())
	}
	if page, err := os.ReadFile(html); err != nil || !strings.Contains(string(page), "<svg") {
		t.Errorf("html: %v", err)
	}
}
