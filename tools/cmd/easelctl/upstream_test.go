package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// TestUpstreamList: a pool as a worker publishes it, one upstream's breaker
// opened by failures, the other's credential refused after a 429, read
// back as a table and as JSON.
func TestUpstreamList(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()

	// The file, read as a worker reads it.
	file := filepath.Join(t.TempDir(), "upstreams.json")
	if err := os.WriteFile(file, []byte(`{"upstreams": [
		{"name": "main", "provider": "gemini", "api_key": "k1", "weight": 3, "models": ["standard", "pro"], "rpm": 60},
		{"name": "spare", "provider": "gemini", "api_key": "k2", "base_url": "https://proxy.example.com/gemini"}],
	 "breaker": {"failures": 3, "cooldown": "60s"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := upstream.Load(file, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	first, spare := pool.Upstreams[0], pool.Upstreams[1]

	if err := upstream.Publish(ctx, rdb, pool); err != nil {
		t.Fatal(err)
	}
	b := upstream.NewBreakers(rdb, pool.Breaker)
	for i := range 3 {
		if _, _, err := b.Report(ctx, first, upstream.Failure, fmt.Sprintf("HTTP 503: the model is overloaded (%d)", i)); err != nil {
			t.Fatal(err)
		}
	}
	long := "HTTP 401: API key not valid.\tPlease pass a valid API key.\n" + strings.Repeat("details ", 20)
	for _, r := range []struct {
		o   upstream.Outcome
		msg string
	}{{upstream.Success, ""}, {upstream.Throttled, "HTTP 429: quota exceeded"}, {upstream.Refused, long}} {
		if _, _, err := b.Report(ctx, spare, r.o, r.msg); err != nil {
			t.Fatal(err)
		}
	}
	// The reports count in the last 60 s (rolling) and in all.

	// As JSON: the statuses, without the keys.
	r := ctl(t, srv.URL, "upstream", "list", "--json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("upstream list --json: %+v", r)
	}
	if strings.Contains(r.stdout, `"k1"`) || strings.Contains(r.stdout, `"k2"`) || strings.Contains(r.stdout, "api_key") {
		t.Errorf("upstream list --json shows a credential: %s", r.stdout)
	}
	var all []upstream.Status
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all) != 2 {
		t.Fatalf("upstream list --json: %v\n%s", err, r.stdout)
	}
	m, s := all[0], all[1]
	if m.Name != "main" || m.Provider != upstream.Gemini || m.Weight != 3 || m.RPM != 60 || m.Breaker != upstream.Open || m.OpenUntil == nil ||
		m.OpenUntil.Before(time.Now().Add(50*time.Second)) || m.Disabled || m.FailuresInARow != 3 || m.CallsLastMinute != 3 ||
		m.ErrorsLastMinute["failure"] != 3 || m.CallsTotal != 3 || m.ErrorsTotal["failure"] != 3 || len(m.RecentErrors) != 3 || m.RecentErrors[0].Message != "HTTP 503: the model is overloaded (2)" ||
		m.Credential != first.Fingerprint() {
		t.Errorf("main: %+v", m)
	}
	if s.Name != "spare" || s.Host != "proxy.example.com" || s.Weight != 1 || s.Breaker != upstream.Closed || s.OpenUntil != nil || !s.Disabled ||
		s.CoolingUntil == nil || s.CallsLastMinute != 3 || s.ErrorsLastMinute["throttled"] != 1 || s.ErrorsLastMinute["refused"] != 1 ||
		s.CallsTotal != 3 || s.ErrorsTotal["refused"] != 1 ||
		len(s.RecentErrors) != 2 || s.RecentErrors[0].Outcome != upstream.Refused {
		t.Errorf("spare: %+v", s)
	}

	// As a table: one line an upstream, under the header.
	r = ctl(t, srv.URL, "upstream", "list")
	t.Logf("upstream list:\n%s", r.stdout)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || r.stderr != "" || len(lines) != 3 {
		t.Fatalf("upstream list: %+v", r)
	}
	if !strings.Contains(lines[1]+lines[2], "60 rpm") {
		t.Errorf("the table does not show main's quota (60 rpm):\n%s", r.stdout)
	}
	for _, col := range []string{"NAME", "PROVIDER", "WEIGHT", "MODELS", "BREAKER", "COOLING", "DISABLED", "QUOTA", "CALLS 60S/ALL", "ERRORS 60S", "ERRORS ALL", "RECENT ERROR"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("the header lacks %s: %q", col, lines[0])
		}
	}
	for _, want := range []string{"main ", "gemini", " 3 ", "standard,pro", "open, probe due at " + m.OpenUntil.UTC().Format("15:04:05") + "Z", " no ",
		" 3/3 ", "failure=3", "failure: HTTP 503: the model is overloaded (2)"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("main's line lacks %q: %q", want, lines[1])
		}
	}
	clipped := "refused: HTTP 401: API key not valid. Please pass a valid API key. details"
	clipped = clipped[:recentErrorWidth-3] + "..."
	for _, want := range []string{"spare ", " all ", "closed", "until " + s.CoolingUntil.UTC().Format("15:04:05") + "Z", " yes ",
		"refused=1 throttled=1", clipped} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("spare's line lacks %q: %q", want, lines[2])
		}
	}
	if strings.Contains(lines[2], "details details") || strings.Contains(lines[2], "\t") {
		t.Errorf("spare's newest error is not clipped to one line: %q", lines[2])
	}

	// The file's state, as the workers record it: loaded, then a change
	// refused: shown above the table, the pool below the one loaded.
	loaded := time.Date(2026, 11, 27, 9, 30, 0, 0, time.UTC)
	if err := upstream.RecordLoaded(ctx, rdb, file, loaded); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, srv.URL, "upstream", "list")
	if want := "file " + file + ": loaded at 2026-11-27T09:30:00Z\n"; r.code != 0 || !strings.HasPrefix(r.stdout, want) || strings.Contains(r.stdout, "REFUSED") {
		t.Errorf("upstream list after a load: %+v; want it to begin %q", r, want)
	}
	if err := upstream.RecordRefused(ctx, rdb, file, loaded.Add(time.Hour), errors.New("upstream \"broken\": provider is required")); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, srv.URL, "upstream", "list")
	lines = strings.Split(r.stdout, "\n")
	if r.code != 0 || len(lines) < 3 || lines[1] != `REFUSED at 2026-11-27T10:30:00Z, the pool below is the one loaded before: upstream "broken": provider is required` ||
		!strings.HasPrefix(lines[2], "NAME") {
		t.Errorf("upstream list after a refused change:\n%s", r.stdout)
	}
}

// TestUpstreamListWithoutAPool: no worker has published a pool.
func TestUpstreamListWithoutAPool(t *testing.T) {
	t.Parallel()
	url := redistest.Start(t).URL
	if r := ctl(t, url, "upstream", "list"); r.code != 0 || strings.TrimSpace(r.stdout) != noPool || r.stderr != "" {
		t.Errorf("upstream list: %+v", r)
	}
	if r := ctl(t, url, "upstream", "list", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("upstream list --json: %+v", r)
	}
	if !strings.Contains(noPool, "EASEL_UPSTREAMS_FILE is not set on the workers") {
		t.Errorf("the message: %q", noPool)
	}
	if r := ctl(t, "redis://127.0.0.1:1/0", "upstream", "list"); r.code != 1 || !strings.Contains(r.stderr, "redis") || r.stdout != "" {
		t.Errorf("upstream list without Redis: %+v", r)
	}
	if r := ctl(t, url, "upstream", "list", "extra"); r.code != 2 {
		t.Errorf("upstream list extra: %+v", r)
	}
}
