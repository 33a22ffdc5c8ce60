// Command easelbench is `make bench`: on one machine, in one run, against a
// private redis-server (or, with --redis cluster, a private 3-master Redis
// Cluster), it measures the real gateway and worker next to
// baselines doing only the floor work with the same libraries, and prints
// every figure with its ratio to its baseline. Rounds alternate baseline and
// real so drift on a shared machine hits both; figures are medians.
//
//	easelbench [--rounds 3] [--duration 8s] [--concurrency 64] [--redis single|cluster] [--json out.json]
//
// It runs bin/gateway and bin/worker (make build) as separate processes, and
// itself as the baseline processes.
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
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "easelbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "baseline-gateway":
			if len(args) != 3 {
				return errors.New("usage: easelbench baseline-gateway ADDR REDIS_URL")
			}
			return runBaselineGateway(ctx, args[1], args[2])
		case "baseline-worker":
			if len(args) != 5 {
				return errors.New("usage: easelbench baseline-worker REDIS_URL N CONCURRENCY INTERVAL")
			}
			n, _ := strconv.ParseInt(args[2], 10, 64)
			c, _ := strconv.Atoi(args[3])
			iv, err := time.ParseDuration(args[4])
			if err != nil {
				return err
			}
			return runBaselineWorker(ctx, args[1], n, c, iv)
		}
	}
	fs := flag.NewFlagSet("easelbench", flag.ContinueOnError)
	o := options{}
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of each comparison (medians are reported)")
	fs.DurationVar(&o.duration, "duration", 8*time.Second, "measured load per run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each run")
	fs.IntVar(&o.concurrency, "concurrency", 64, "closed-loop connections for the HTTP comparisons")
	fs.IntVar(&o.drain, "drain", 10000, "jobs per worker throughput run")
	fs.IntVar(&o.workerConcurrency, "worker-concurrency", 16, "worker concurrency (both the baseline and the real worker)")
	fs.Float64Var(&o.pickupRate, "pickup-rate", 50, "tasks per second while measuring pick-up latency")
	fs.DurationVar(&o.pickupFor, "pickup-duration", 10*time.Second, "how long to measure pick-up latency")
	fs.StringVar(&o.binDir, "bin", "bin", "directory of the gateway and worker binaries")
	fs.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.only, "only", defaultOnly, "which parts to run: http (create and query), drain, pickup")
	fs.StringVar(&o.redis, "redis", redisSingle, "the private Redis to run on: "+redisSingle+" (one redis-server) or "+redisCluster+" (a 3-master Redis Cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.redis != redisSingle && o.redis != redisCluster {
		return fmt.Errorf("--redis %q: want %s or %s", o.redis, redisSingle, redisCluster)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o.self = self
	for _, b := range []string{"gateway", "worker"} {
		if _, err := os.Stat(filepath.Join(o.binDir, b)); err != nil {
			return fmt.Errorf("%s: %w (run make build)", filepath.Join(o.binDir, b), err)
		}
	}
	o.log = os.Stderr
	res, err := benchmark(ctx, o)
	if err != nil {
		return err
	}
	res.print(os.Stdout)
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return fmt.Errorf("results: %w", err)
		}
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
	}
	return nil
}

type options struct {
	rounds            int
	duration, warmup  time.Duration
	concurrency       int
	drain             int
	workerConcurrency int
	pickupRate        float64
	pickupFor         time.Duration
	binDir, self      string
	jsonOut           string
	only              string
	redis             string // redisSingle or redisCluster
	log               io.Writer
}

// defaultOnly is --only's default: every part.
const defaultOnly = "http,drain,pickup"
