package upstream

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/quota"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

func TestStatuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	b := NewBreakers(rdb, Breaker{Failures: 2, Cooldown: Duration(time.Minute), Throttle: Duration(time.Minute), MaxThrottle: Duration(time.Hour)})

	if s, err := Statuses(ctx, rdb); err != nil || len(s) != 0 {
		t.Fatalf("no pool published: %v, %v; want none", s, err)
	}

	healthy := Upstream{Name: "healthy", Provider: Gemini, APIKey: "SECRET-1", BaseURL: "https://h.example.com", Weight: 3, Models: []string{"standard"}, RPM: 60}
	down := Upstream{Name: "down", Provider: Gemini, APIKey: "SECRET-2", Weight: 1}
	busy := Upstream{Name: "busy", Provider: Gemini, APIKey: "SECRET-3", Weight: 1}
	revoked := Upstream{Name: "revoked", Provider: Gemini, APIKey: "SECRET-4", Weight: 1}
	gone := Upstream{Name: "gone", Provider: Gemini, APIKey: "SECRET-5", Weight: 1}
	if err := Publish(ctx, rdb, &Pool{Upstreams: []Upstream{healthy, down, busy, revoked, gone}}); err != nil {
		t.Fatal(err)
	}
	// The next version of the file drops "gone".
	if err := Publish(ctx, rdb, &Pool{Upstreams: []Upstream{healthy, down, busy, revoked}}); err != nil {
		t.Fatal(err)
	}

	report := func(u Upstream, o Outcome, msg string) {
		t.Helper()
		if _, _, err := b.Report(ctx, u, o, msg); err != nil {
			t.Fatal(err)
		}
	}
	report(healthy, Success, "")
	report(healthy, Success, "")
	report(healthy, Final, "content blocked")
	report(down, Failure, "500 first")
	report(down, Failure, "500 second")
	report(busy, Throttled, "429 RESOURCE_EXHAUSTED")
	report(revoked, Refused, "401 UNAUTHENTICATED")
	start := time.Now()

	// This minute's counts, as the script keeps them.
	minute, err := rdb.HGetAll(ctx, minuteKey("down", time.Now())).Result()
	if err != nil || minute["calls"] != "2" || minute["failure"] != "2" {
		t.Errorf("down's minute %v, %v; want 2 calls, 2 failures", minute, err)
	}

	st, err := Statuses(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Status{}
	var names []string
	for _, s := range st {
		byName[s.Name] = s
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "busy,down,healthy,revoked" {
		t.Fatalf("upstreams %v; want busy, down, healthy, revoked in order (gone removed)", names)
	}
	j, _ := json.Marshal(st)
	if strings.Contains(string(j), "SECRET") {
		t.Errorf("statuses show a key: %s", j)
	}

	h := byName["healthy"]
	if h.Breaker != Closed || h.Disabled || h.OpenUntil != nil || h.CoolingUntil != nil || h.FailuresInARow != 0 ||
		h.Weight != 3 || h.Host != "h.example.com" || h.RPM != 60 || h.Credential != healthy.Fingerprint() {
		t.Errorf("healthy: %+v", h)
	}
	if len(h.RecentErrors) != 1 || h.RecentErrors[0].Outcome != Final || h.RecentErrors[0].Message != "content blocked" {
		t.Errorf("healthy's recent errors %+v; want the final one", h.RecentErrors)
	}

	d := byName["down"]
	if d.Breaker != Open || d.FailuresInARow != 2 || d.OpenUntil == nil || d.Disabled {
		t.Errorf("down: %+v", d)
	} else if until := d.OpenUntil.Sub(start); until < 50*time.Second || until > 61*time.Second {
		t.Errorf("down open until %v from now; want about a minute", until)
	}
	if len(d.RecentErrors) != 2 || d.RecentErrors[0].Message != "500 second" || d.RecentErrors[1].Message != "500 first" ||
		d.RecentErrors[0].Outcome != Failure || time.Since(d.RecentErrors[0].Time) > time.Minute {
		t.Errorf("down's recent errors %+v; want both, newest first", d.RecentErrors)
	}

	c := byName["busy"]
	if c.Breaker != Closed || c.CoolingUntil == nil || c.Disabled || len(c.RecentErrors) != 1 || c.RecentErrors[0].Outcome != Throttled {
		t.Errorf("busy: %+v", c)
	}

	r := byName["revoked"]
	if !r.Disabled || r.Breaker != Closed || len(r.RecentErrors) != 1 || r.RecentErrors[0].Outcome != Refused {
		t.Errorf("revoked: %+v", r)
	}
	if r.ErrorsLastMinute == nil || r.RecentErrors == nil {
		t.Errorf("revoked: nil maps or lists (JSON null) %+v", r)
	}

	// The counts of the last 60 s show at once, and the totals.
	if h.CallsLastMinute != 3 || h.ErrorsLastMinute["final"] != 1 || len(h.ErrorsLastMinute) != 1 ||
		h.CallsTotal != 3 || h.ErrorsTotal["final"] != 1 || len(h.ErrorsTotal) != 1 {
		t.Errorf("healthy: %d calls in 60 s, errors %v, %d in all, errors %v; want 3 calls, 1 final", h.CallsLastMinute, h.ErrorsLastMinute, h.CallsTotal, h.ErrorsTotal)
	}
	if d.CallsLastMinute != 2 || d.ErrorsLastMinute["failure"] != 2 || d.CallsTotal != 2 || d.ErrorsTotal["failure"] != 2 {
		t.Errorf("down: %d calls in 60 s, errors %v, %d in all, errors %v; want 2 calls, 2 failures", d.CallsLastMinute, d.ErrorsLastMinute, d.CallsTotal, d.ErrorsTotal)
	}

	// The last 60 s roll: a minute's counts fade as the next goes by, and
	// the totals stay. Eight calls in the minute before: 15 s into this
	// one, 6 of them count (three quarters of that minute is within 60 s);
	// 45 s in, 2.
	minute0 := time.Unix(start.Unix()/60*60, 0).Add(time.Hour)
	rdb.HSet(ctx, minuteKey("healthy", minute0.Add(-time.Minute)), "calls", 8, "failure", 4)
	for _, tt := range []struct {
		at          time.Duration
		calls, errs int64
	}{{15 * time.Second, 6, 3}, {45 * time.Second, 2, 1}, {61 * time.Second, 0, 0}} {
		st, err := statuses(ctx, rdb, minute0.Add(tt.at))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Name == "healthy" && (s.CallsLastMinute != tt.calls || s.ErrorsLastMinute["failure"] != tt.errs || s.CallsTotal != 3) {
				t.Errorf("healthy %s into a minute: %d calls in 60 s, errors %v, %d in all; want %d calls, %d failures, 3 in all",
					tt.at, s.CallsLastMinute, s.ErrorsLastMinute, s.CallsTotal, tt.calls, tt.errs)
			}
		}
	}

	// An open breaker tells when its probe is due, and once that is past
	// on an idle system (no call came to probe), that the next call
	// probes: the same words in every view.
	at := d.OpenUntil.UTC().Format("15:04:05Z")
	if d.BreakerText != "open, probe due at "+at {
		t.Errorf("down's breaker %q; want open, probe due at %s", d.BreakerText, at)
	}
	st, _ = statuses(ctx, rdb, d.OpenUntil.Add(5*time.Minute))
	for _, s := range st {
		if s.Name == "down" && (s.Breaker != Open || s.OpenUntil == nil || s.BreakerText != "open, probe due now (since "+at+"): the next call probes") {
			t.Errorf("down, idle past its probe time: %s %v %q", s.Breaker, s.OpenUntil, s.BreakerText)
		}
	}
	if h.BreakerText != "closed" {
		t.Errorf("healthy's breaker %q", h.BreakerText)
	}

	// The file gives "revoked" a new key: no longer disabled.
	revoked.APIKey = "SECRET-NEW"
	if err := Publish(ctx, rdb, &Pool{Upstreams: []Upstream{healthy, down, busy, revoked}}); err != nil {
		t.Fatal(err)
	}
	st, _ = Statuses(ctx, rdb)
	for _, s := range st {
		if s.Name == "revoked" && (s.Disabled || s.Credential != revoked.Fingerprint()) {
			t.Errorf("revoked with a new key: %+v; want enabled", s)
		}
	}

	// At most 20 recent errors are kept, newest first.
	for i := 0; i < 25; i++ {
		report(busy, Throttled, "429 number "+string(rune('a'+i)))
	}
	st, _ = Statuses(ctx, rdb)
	for _, s := range st {
		if s.Name == "busy" && (len(s.RecentErrors) != 20 || s.RecentErrors[0].Message != "429 number y") {
			t.Errorf("busy: %d recent errors, newest %+v; want 20, the last first", len(s.RecentErrors), s.RecentErrors[0])
		}
	}
}

// An upstream with a concurrency limit shows how much of it is in use.
func TestStatusesQuotaInUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	limited := Upstream{Name: "limited", Provider: Gemini, APIKey: "k", Weight: 1, Concurrency: 4, RPM: 600}
	free := Upstream{Name: "free", Provider: Gemini, APIKey: "k2", Weight: 1}
	if err := Publish(ctx, rdb, &Pool{Upstreams: []Upstream{limited, free}}); err != nil {
		t.Fatal(err)
	}
	q := quota.New(rdb, quota.Limits{QuotaKey("limited"): {Concurrent: 4}}, quota.Options{})
	var slots []*quota.Slot
	for range 3 {
		s, err := q.Acquire(ctx, QuotaKey("limited"))
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	inUse := func() map[string]*int64 {
		t.Helper()
		all, err := Statuses(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*int64{}
		for _, s := range all {
			out[s.Name] = s.InFlight
		}
		return out
	}
	if got := inUse(); got["limited"] == nil || *got["limited"] != 3 || got["free"] != nil {
		t.Fatalf("in flight %v; want 3 of limited, none shown for free", got)
	}
	slots[0].Release()
	if got := inUse(); *got["limited"] != 2 {
		t.Errorf("after a release: %d; want 2", *got["limited"])
	}
	for _, s := range slots[1:] {
		s.Release()
	}
}
