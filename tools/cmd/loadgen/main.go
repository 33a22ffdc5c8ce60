// Command loadgen drives load against any Easel deployment and reports
// throughput, latency percentiles, status codes and errors.
//
//	loadgen --url http://127.0.0.1:8080 --key esk_... --mode create --concurrency 32 --duration 30s
//	loadgen --key K1 --key K2 --mode lifecycle --rate 20 --duration 1m --json report.json
//
// See `loadgen -h` for every flag.
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type keys []string

func (k *keys) String() string     { return strings.Join(*k, ",") }
func (k *keys) Set(v string) error { *k = append(*k, v); return nil }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ks keys
	var keysFile, mix, jsonOut string
	var quiet bool
	cfg := loadgen.Config{}
	fs.StringVar(&cfg.BaseURL, "url", "http://127.0.0.1:8080", "base URL of the gateway")
	fs.Var(&ks, "key", "API key (repeat for several; requests spread over them)")
	fs.StringVar(&keysFile, "keys-file", "", "file with one API key per line")
	fs.StringVar(&cfg.Mode, "mode", loadgen.ModeCreate, "create, query (tasks it creates first) or lifecycle (create, poll, download)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: units of work per second (latency counted from the scheduled time)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "closed loop: workers (ignored with --rate)")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to start new work (0: until --requests); lifecycle then waits for the tasks it created")
	fs.Int64Var(&cfg.Requests, "requests", 0, "stop after this many units of work (0: until --duration)")
	fs.StringVar(&mix, "mix", "lumen-2.5-flash-image", "task mix: MODEL[/SIZE][/RATIO][=WEIGHT],... e.g. lumen-2.5-flash-image/-/16:9=3,lumen-3-pro-image-preview/2K=1")
	fs.StringVar(&cfg.Prompt, "prompt", "", "prompt (default: a fixed one)")
	fs.BoolVar(&cfg.UniquePrompts, "unique-prompts", false, "make every prompt different")
	fs.IntVar(&cfg.QueryTasks, "query-tasks", 100, "query mode: tasks to create first")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", 200*time.Millisecond, "lifecycle: time between queries of a task")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "per HTTP request")
	fs.DurationVar(&cfg.LifecycleTimeout, "task-timeout", 10*time.Minute, "lifecycle: give up on a task after this long")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", 10000, "open loop: drop work beyond this many units in flight")
	fs.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file (- for stdout)")
	fs.BoolVar(&quiet, "quiet", false, "no live progress line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if keysFile != "" {
		b, err := os.ReadFile(keysFile)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				ks = append(ks, line)
			}
		}
	}
	if len(ks) == 0 {
		if k := os.Getenv("EASEL_API_KEY"); k != "" {
			ks = append(ks, k)
		}
	}
	cfg.Keys = ks
	m, err := loadgen.ParseMix(mix)
	if err != nil {
		return err
	}
	cfg.Mix = m
	if cfg.Rate > 0 {
		cfg.Concurrency = 0
	}
	if !quiet {
		cfg.Progress = stderr
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.WriteText(stdout)
	if jsonOut != "" {
		w := stdout
		if jsonOut != "-" {
			f, err := os.Create(jsonOut)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return nil
}
