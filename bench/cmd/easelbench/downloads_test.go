package main

import (
	"slices"
	"testing"
	"time"

	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// The downloads part downloads every case from both sides and reports
// rates; the http part's command counts read MONITOR and commandstats.
func TestDownloadsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs MinIO")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	res := runPart(t, 5*time.Minute, "--only", "downloads", "--rounds", "1", "--concurrency", "4", "--duration", "500ms")
	r := res.Downloads
	if r == nil || !slices.Equal(res.Parts, []string{"downloads"}) {
		t.Fatalf("no downloads figures, or parts %v", res.Parts)
	}
	if len(r.Cases) != 4 || r.Connections != 4 {
		t.Fatalf("%d cases over %d connections; want 4 over 4", len(r.Cases), r.Connections)
	}
	for _, c := range r.Cases {
		if len(c.RealMBps) != 1 || len(c.BaselineMBps) != 1 || c.RealMBps[0] <= 0 || c.BaselineMBps[0] <= 0 {
			t.Errorf("%s %d MB: real %v, baseline %v", c.Store, c.SizeMB, c.RealMBps, c.BaselineMBps)
		}
	}
}

func TestMonitorLine(t *testing.T) {
	for _, tt := range []struct {
		line, cmd, arg string
		lua, ok        bool
	}{
		{`1764111111.123456 [0 127.0.0.1:5555] "evalsha" "abc" "1" "k"`, "evalsha", "abc", false, true},
		{`1764111111.123456 [0 lua] "HSET" "k" "f" "v"`, "hset", "k", true, true},
		{`1764111111.123456 [0 127.0.0.1:5555] "ECHO" "easelbench-count-start"`, "echo", markStart, false, true},
		{`1764111111.123456 [0 unix:/tmp/r.sock] "ping"`, "ping", "", false, true},
		{`OK`, "", "", false, false},
	} {
		cmd, arg, lua, ok := monitorLine(tt.line)
		if cmd != tt.cmd || arg != tt.arg || lua != tt.lua || ok != tt.ok {
			t.Errorf("monitorLine(%q) = %q %q %v %v; want %q %q %v %v", tt.line, cmd, arg, lua, ok, tt.cmd, tt.arg, tt.lua, tt.ok)
		}
	}
	got := redisproc.ParseCommandstats("# Commandstats\r\ncmdstat_evalsha:calls=2010,usec=5,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\ncmdstat_config|resetstat:calls=1,usec=1\r\n")
	if got["evalsha"] != (redisproc.CommandStat{Calls: 2010, Usec: 5}) || got["config|resetstat"].Calls != 1 || len(got) != 2 {
		t.Errorf("ParseCommandstats = %v", got)
	}
}

// The http part, briefly: both sides measured, and the commands a create
// and a query send Redis counted. A create is two round trips (the
// charge-and-record script and Asynq's enqueue script) and a query one
// (HGETALL), whatever the scripts run inside; the baseline's are one each.
func TestHTTPRunCountsCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	res := runPart(t, 3*time.Minute, "--only", "http", "--rounds", "1", "--duration", "1s", "--warmup", "200ms", "--concurrency", "8")
	if len(res.CreateReal) != 1 || len(res.QueryCPUReal) != 1 || len(res.CreateP99Baseline) != 1 {
		t.Fatalf("figures missing: %+v", res)
	}
	for _, c := range []struct {
		name      string
		counts    *commandCounts
		sent      float64
		evalshaIn float64 // at least this many EVALSHA per request
	}{
		{"real create", res.CreateCommandsReal, 2, 2},
		{"baseline create", res.CreateCommandsBaseline, 1, 1},
		{"real query", res.QueryCommandsReal, 1, 0}, // HGETALL
		{"baseline query", res.QueryCommandsBaseline, 1, 0},
	} {
		if c.counts == nil {
			t.Errorf("%s: no command counts", c.name)
			continue
		}
		// What a gateway sends by the clock rather than by the request
		// adds a little, more the slower the run (under -race): a key
		// looked up again when its 2 s in the auth cache end (HMGET, and
		// HGETALL of its account), the rate limiter's leases of tokens
		// (EVALSHA), the readiness probe (GET, SET), PING. A command
		// more per request would add 1.
		if s := sum(c.counts.Sent); s < c.sent || s > c.sent+0.25 {
			t.Errorf("%s: %.3f commands sent per request (%v); want %.0f", c.name, s, c.counts.Sent, c.sent)
		}
		for name := range c.counts.Sent {
			if !slices.Contains([]string{"evalsha", "hgetall", "hmget", "get", "set", "ping"}, name) {
				t.Errorf("%s: sends %s (%v)", c.name, name, c.counts.Sent)
			}
		}
		if c.counts.Sent["evalsha"] < c.evalshaIn {
			t.Errorf("%s: %.3f EVALSHA per request; want %.0f", c.name, c.counts.Sent["evalsha"], c.evalshaIn)
		}
		if sum(c.counts.Stats) < sum(c.counts.Sent) {
			t.Errorf("%s: commandstats %v count fewer than were sent %v", c.name, c.counts.Stats, c.counts.Sent)
		}
	}
	if q := res.QueryCommandsReal; q != nil && (q.Sent["hgetall"] < 1 || q.Sent["hgetall"] > 1.05) {
		t.Errorf("real query: %.3f HGETALL per request; want 1", q.Sent["hgetall"])
	}
	if res.CreateCommandsReal != nil && res.CreateCommandsReal.Stats["xadd"] < 1 {
		t.Errorf("a create's ledger entry is not in commandstats: %v", res.CreateCommandsReal.Stats)
	}
}
