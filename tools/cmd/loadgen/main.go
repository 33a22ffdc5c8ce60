// Command loadgen drives load against any Easel deployment and accounts for
// every unit of work it offered: completed, failed, dropped or unfinished,
// with latency percentiles, rates, a per-second series and SLO thresholds.
//
//	loadgen --url http://127.0.0.1:8080 --key esk_... --mode create --concurrency 32 --duration 30s
//	loadgen --key K1 --key K2 --mode lifecycle --stages 30s:5,1m:20,30s:0 --threshold 'p99<60s' --json run.json
//	loadgen merge a.json b.json > all.json
//
// Exit status: 0 when the run is done and every threshold is met, 1 on a
// usage or run error, 2 when a threshold failed, 3 when units were offered
// and none completed. See `loadgen -h` for every flag.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/easelhq/easel/tools/loadgen"
)

// Exit statuses.
const (
	exitError     = 1
	exitThreshold = 2
	exitNoneOK    = 3
)

// exitErr is an error that ends the program with its own status.
type exitErr struct {
	code int
	msg  string
}

func (e *exitErr) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		var ee *exitErr
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(exitError)
	}
}

// list is a repeatable flag; each value may also be comma-separated when
// split is set.
type list struct {
	vals  []string
	split bool
}

func (l *list) String() string { return strings.Join(l.vals, ",") }
func (l *list) Set(v string) error {
	if !l.split {
		l.vals = append(l.vals, v)
		return nil
	}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			l.vals = append(l.vals, p)
		}
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "merge" {
		return merge(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ks := &list{}
	urls := &list{split: true}
	thresholds := &list{}
	var keysFile, mix, stages, scenario, jsonOut, csvOut, htmlOut string
	var quiet bool
	cfg := loadgen.Config{}
	fs.Var(urls, "url", "gateway base URL; repeat or comma-separate several to spread the units over them in turn (default http://127.0.0.1:8080)")
	fs.Var(ks, "key", "API key (repeat for several; units spread over them at random)")
	fs.StringVar(&keysFile, "keys-file", "", "file with one API key per line")
	fs.StringVar(&cfg.Mode, "mode", loadgen.ModeCreate, "create, query (tasks it creates first), lifecycle (create, follow, download) or scenario")
	fs.StringVar(&scenario, "scenario", "", "scenario mode: ACTION=WEIGHT,... of create, query, list, cancel (e.g. create=2,query=10,list=1,cancel=1), or a file of them; implies --mode scenario")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: units of work per second (latency counted from the scheduled moment)")
	fs.StringVar(&stages, "stages", "", "open loop with a changing rate: DURATION:RATE,... each ramping from the previous rate, e.g. 30s:100,60s:500,30s:0 (replaces --rate and --duration)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "closed loop: workers (ignored with --rate or --stages)")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to start new work (0: until --requests)")
	fs.Int64Var(&cfg.Requests, "requests", 0, "stop starting work after this many units (0: until --duration)")
	fs.DurationVar(&cfg.Grace, "grace", 0, "how long the units in flight when the arrivals end may take before they count as unfinished (0: --timeout, lifecycle --task-timeout; negative: none)")
	fs.StringVar(&mix, "mix", "lumen-2.5-flash-image", "task mix: MODEL[/SIZE][/RATIO][=WEIGHT],... e.g. lumen-2.5-flash-image/-/16:9=3,lumen-3-pro-image-preview/2K=1")
	fs.StringVar(&cfg.Prompt, "prompt", "", "prompt (default: a fixed one)")
	fs.BoolVar(&cfg.UniquePrompts, "unique-prompts", false, "make every prompt different")
	fs.IntVar(&cfg.QueryTasks, "query-tasks", 100, "query mode: tasks to create first")
	fs.DurationVar(&cfg.PollWait, "poll-wait", 20*time.Second, "lifecycle: long-poll each task with query?wait= (whole seconds, at most 60s; 0: poll every --poll-interval)")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", 200*time.Millisecond, "lifecycle: time between queries without --poll-wait, and the pause when a long-poll is answered at once")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "per HTTP request (a long-poll gets its wait on top)")
	fs.DurationVar(&cfg.LifecycleTimeout, "task-timeout", 10*time.Minute, "lifecycle: a task not ended this long after its create fails")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", 10000, "open loop: drop units beyond this many in flight (counted as dropped)")
	fs.Var(thresholds, "threshold", "SLO checked at the end (repeat): p50|p90|p99|max<DURATION, errors|dropped|unfinished<N%, achieved>N%; exit status 2 if one fails")
	fs.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file (- for stdout)")
	fs.StringVar(&csvOut, "csv", "", "write the per-second series as CSV to this file (- for stdout)")
	fs.StringVar(&htmlOut, "html", "", "write a self-contained HTML report to this file")
	fs.BoolVar(&quiet, "quiet", false, "no live progress line")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: loadgen [flags]\n       loadgen merge [--threshold EXPR] [--json FILE] [--csv FILE] [--html FILE] REPORT.json...\n\nExit status: 0 done, 1 error, %d a threshold failed, %d no unit completed.\n\n", exitThreshold, exitNoneOK)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	ts, err := parseThresholds(thresholds.vals)
	if err != nil {
		return err
	}
	if keysFile != "" {
		b, err := os.ReadFile(keysFile)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				ks.vals = append(ks.vals, line)
			}
		}
	}
	if len(ks.vals) == 0 {
		if k := os.Getenv("EASEL_API_KEY"); k != "" {
			ks.vals = append(ks.vals, k)
		}
	}
	cfg.Keys = ks.vals
	cfg.BaseURLs = urls.vals
	if len(cfg.BaseURLs) == 0 {
		cfg.BaseURLs = []string{"http://127.0.0.1:8080"}
	}
	m, err := loadgen.ParseMix(mix)
	if err != nil {
		return err
	}
	cfg.Mix = m
	if scenario != "" {
		spec := scenario
		if b, err := os.ReadFile(scenario); err == nil {
			spec = string(b)
		}
		if cfg.Scenario, err = loadgen.ParseScenario(spec); err != nil {
			return err
		}
		cfg.Mode = loadgen.ModeScenario
	}
	if stages != "" {
		if cfg.Stages, err = loadgen.ParseStages(stages); err != nil {
			return err
		}
	}
	if cfg.Rate > 0 || len(cfg.Stages) > 0 {
		cfg.Concurrency = 0
	}
	if !quiet {
		cfg.Progress = stderr
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return finish(rep, ts, outputs{jsonOut, csvOut, htmlOut}, stdout, stdout)
}

// outputs are the files asked for ("" none, "-" the data writer).
type outputs struct{ json, csv, html string }

func parseThresholds(exprs []string) ([]loadgen.Threshold, error) {
	var ts []loadgen.Threshold
	for _, e := range exprs {
		for _, part := range strings.Split(e, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			t, err := loadgen.ParseThreshold(part)
			if err != nil {
				return nil, err
			}
			ts = append(ts, t)
		}
	}
	return ts, nil
}

// finish checks the thresholds, writes the report where asked and returns
// the error the exit status follows.
func finish(rep *loadgen.Report, ts []loadgen.Threshold, out outputs, text, data io.Writer) error {
	failed := rep.Check(ts)
	rep.WriteText(text)
	if err := writeTo(out.json, data, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}); err != nil {
		return err
	}
	if err := writeTo(out.csv, data, rep.WriteCSV); err != nil {
		return err
	}
	if err := writeTo(out.html, data, rep.WriteHTML); err != nil {
		return err
	}
	if rep.Offered > 0 && rep.Completed == 0 {
		return &exitErr{exitNoneOK, fmt.Sprintf("none of the %d units offered completed", rep.Offered)}
	}
	if len(failed) > 0 {
		names := make([]string, len(failed))
		for i, f := range failed {
			names[i] = f.String()
		}
		return &exitErr{exitThreshold, "threshold failed: " + strings.Join(names, "; ")}
	}
	return nil
}

func writeTo(name string, stdout io.Writer, write func(io.Writer) error) error {
	if name == "" {
		return nil
	}
	if name == "-" {
		return write(stdout)
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// merge combines the JSON reports of runs made at the same time.
func merge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	thresholds := &list{}
	var jsonOut, csvOut, htmlOut string
	fs.Var(thresholds, "threshold", "SLO checked on the merged report (repeat), as for a run")
	fs.StringVar(&jsonOut, "json", "-", "write the merged report as JSON to this file (- for stdout)")
	fs.StringVar(&csvOut, "csv", "", "write the merged per-second series as CSV to this file")
	fs.StringVar(&htmlOut, "html", "", "write a self-contained HTML report to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("merge: give the JSON reports to merge")
	}
	ts, err := parseThresholds(thresholds.vals)
	if err != nil {
		return err
	}
	var reps []*loadgen.Report
	for _, name := range fs.Args() {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var r loadgen.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		reps = append(reps, &r)
	}
	rep, err := loadgen.Merge(reps)
	if err != nil {
		return err
	}
	text := stdout
	if jsonOut == "-" || csvOut == "-" || htmlOut == "-" {
		text = stderr // the data has stdout
	}
	return finish(rep, ts, outputs{jsonOut, csvOut, htmlOut}, text, stdout)
}
