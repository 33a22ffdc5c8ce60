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
//
// The drain part also reports a task's whole life in Redis, create →
// complete, against raw Asynq enqueueing and processing as many: Redis
// commands and client round trips per task, counted in a round of their
// own with MONITOR on, and Redis CPU per task from the timed runs (life.go).
//
// --only inflight (not in the default set) measures slow generations
// instead: one worker with a slow, zero-cost generator (EASEL_SIM_DELAY,
// --sim-delay) kept fed with --inflight outstanding tasks; it reports how
// many it holds in flight, its memory and Redis connections, and its
// completion rate against in-flight ÷ sim delay:
//
//	easelbench --only inflight [--inflight 2000] [--sim-delay 30s] [--duration 90s] [--worker-env KEY=VALUE ...]
//
// Three attacks on the worker's limits, also not in the default set: --only quota
// (three workers sharing EASEL_UPSTREAM_RPM against a fake Gemini upstream
// that answers 429 to one call in ten: the call rate per 60 s window and
// the tasks failed), --only drip (another account's latency while one
// account's tasks fetch a source at 1 byte/s) and --only memory (one task
// with ten 16-bit 7071×7071 PNGs: the worker's peak RSS, the task's
// outcome, its retries):
//
//	easelbench --only quota [--duration 5m] [--quota-rate 2] [--quota-latency 2s] [--quota-429-every 10]
//	easelbench --only drip [--drip-tasks 16] [--drip-samples 5]
//	easelbench --only memory [--memory-images 10] [--memory-side 7071]
//
// --only waiters (not in the default set) measures GET /v1/task/query's
// wait=N: one gateway holding --waiters waiting requests (its RSS, open
// files, goroutines) and the time from a task's change, made with pkg/store,
// to the answer of the request waiting on it, with all of them held and,
// beside it, with only the sampled ones:
//
//	easelbench --only waiters [--waiters 10000] [--waiters-rate 1000] [--waiters-changes 500] [--waiters-spacing 15ms] [--waiters-profile DIR] [--gateway-env KEY=VALUE ...]
//
// --only scale (not in the default set) measures what background work
// costs at scale, measured on the services over HTTP and Redis's INFO only
// (so it runs against an older commit's binaries too): Redis commands/s and
// CPU with the services idle at many accounts, with one account's big
// backlog, the shares of accounts of weights 2/1/1, the time until a job
// deleted from its queue among many pending is queued again, what a long
// generation with progress costs Redis, and Redis memory per idle account
// and per task pending and completed (scale.go):
//
//	easelbench --only scale [--scale-parts idle,backlog,fairness,requeue,progress,bytes] [--scale-accounts 1,10000,100000] [--scale-backlog 3000,100000]
//	    [--scale-warmup 15s] [--scale-measure 30s] [--scale-fair-window 60s] [--scale-requeue 1m] [--scale-requeue-accounts 1000]
//	    [--scale-requeue-samples 3] [--scale-progress 1000] [--scale-progress-delay 10s] [--scale-bytes 20000] [--scale-bytes-share 0] [--scale-concurrency 64]
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
	"slices"
	"strconv"
	"strings"
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
		case "baseline-files":
			if len(args) != 2 {
				return errors.New("usage: easelbench baseline-files ADDR (the store from EASEL_BLOB_URL, EASEL_S3_*)")
			}
			return runBaselineFiles(ctx, args[1])
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
	fs.DurationVar(&o.duration, "duration", 0, "measured time of each run (default: 8s for http, 90s for inflight, 5m for quota)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each run")
	fs.IntVar(&o.concurrency, "concurrency", 64, "closed-loop connections for the HTTP comparisons")
	fs.IntVar(&o.drain, "drain", 10000, "jobs per worker throughput run")
	fs.IntVar(&o.workerConcurrency, "worker-concurrency", 16, "worker concurrency (both the baseline and the real worker; the inflight worker runs with its own default unless this is given)")
	fs.Float64Var(&o.pickupRate, "pickup-rate", 50, "tasks per second while measuring pick-up latency")
	fs.DurationVar(&o.pickupFor, "pickup-duration", 10*time.Second, "how long to measure pick-up latency")
	fs.StringVar(&o.binDir, "bin", "bin", "directory of the gateway and worker binaries")
	fs.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.only, "only", defaultOnly, "which parts to run: http (create and query), drain, pickup, downloads (results streamed by the gateway against a bare http.ServeContent); and, not in the default set, inflight (slow generations), quota, drip, memory (attacks on the worker's limits), waiters (query's wait=N) and scale (background work)")
	fs.IntVar(&o.inflight, "inflight", 2000, "inflight: tasks kept outstanding (queued or processing) for the worker")
	fs.IntVar(&o.accounts, "inflight-accounts", 0, fmt.Sprintf("inflight: accounts the tasks are spread over (0: enough for at most %d each, under the workers' default fair share of 64 running)", perAccountOutstanding))
	fs.DurationVar(&o.simDelay, "sim-delay", 30*time.Second, "inflight: the worker's EASEL_SIM_DELAY, the simulated generation time")
	fs.Var(&o.workerEnv, "worker-env", "KEY=VALUE added to every bin/worker's environment, after the benchmark's own (repeatable; e.g. EASEL_WORKER_CONCURRENCY=2000)")
	fs.IntVar(&o.quotaWorkers, "quota-workers", 3, "quota: bin/worker processes sharing the upstream quota")
	fs.IntVar(&o.quotaRPM, "quota-rpm", 60, "quota: the workers' EASEL_UPSTREAM_RPM, for every model (*=N)")
	fs.Float64Var(&o.quotaRate, "quota-rate", 2, "quota: tasks created per second")
	fs.DurationVar(&o.quotaLatency, "quota-latency", 2*time.Second, "quota: the fake upstream's time to answer with an image")
	fs.IntVar(&o.quota429Every, "quota-429-every", 10, "quota: the fake upstream answers 429 to every N-th call (0: never)")
	fs.IntVar(&o.dripTasks, "drip-tasks", 16, "drip: account A's editing tasks on a 1 byte/s source")
	fs.IntVar(&o.dripSamples, "drip-samples", 5, "drip: account B's tasks timed unloaded, and as many under attack")
	fs.IntVar(&o.memoryImages, "memory-images", 10, "memory: source images of the one editing task")
	fs.IntVar(&o.memorySide, "memory-side", 7071, "memory: their width and height, 16-bit RGB of one colour")
	fs.IntVar(&o.waiters, "waiters", 10000, "waiters: wait=60 requests one gateway holds at once")
	fs.IntVar(&o.waitersChanges, "waiters-changes", 500, "waiters: task changes timed per phase and round (half started, half given progress)")
	fs.Float64Var(&o.waitersRate, "waiters-rate", 1000, "waiters: requests sent per second while they are being held (0: as fast as 32 at once go)")
	fs.DurationVar(&o.waitersSpacing, "waiters-spacing", 15*time.Millisecond, "waiters: time between two changes")
	fs.Var(&o.gatewayEnv, "gateway-env", "KEY=VALUE added to every bin/gateway's environment, after the benchmark's own (repeatable; e.g. GOMEMLIMIT=200MiB)")
	fs.StringVar(&o.waitersProfile, "waiters-profile", "", "waiters: save the gateway's heap and goroutine profiles, all requests held, in this directory")
	fs.StringVar(&o.scaleParts, "scale-parts", defaultScaleParts, "scale: which sub-parts to run, some of "+strings.Join(allScaleParts, ", "))
	o.scaleAccounts = intList{1, 10000, 100000}
	fs.Var(&o.scaleAccounts, "scale-accounts", "scale idle: the numbers of accounts the idle services are measured at, ascending (accounts are added level by level)")
	o.scaleBacklog = intList{3000, 100000}
	fs.Var(&o.scaleBacklog, "scale-backlog", "scale backlog: the backlog sizes of the one account, each measured on its own")
	fs.DurationVar(&o.scaleWarmup, "scale-warmup", 15*time.Second, "scale: unmeasured time before each measured window (idle, backlog, requeue) and before fairness's window")
	fs.DurationVar(&o.scaleMeasure, "scale-measure", 30*time.Second, "scale: each measured window of Redis commands and CPU")
	fs.DurationVar(&o.scaleFairWindow, "scale-fair-window", 60*time.Second, "scale fairness: the window completions are counted in")
	o.scaleRequeue = 1_000_000
	fs.Var(&o.scaleRequeue, "scale-requeue", "scale requeue: tasks pending (every one admitted, its job queued) while a deleted job is waited for (e.g. 100k, 1m)")
	fs.IntVar(&o.scaleRequeueAccounts, "scale-requeue-accounts", 1000, "scale requeue: accounts the pending tasks are spread over")
	fs.IntVar(&o.scaleRequeueSamples, "scale-requeue-samples", 3, "scale requeue: jobs deleted at once, spread over the queue")
	o.scaleBytes = 20000
	fs.Var(&o.scaleBytes, "scale-bytes", "scale bytes: tasks measured pending, then completed")
	o.scaleProgress = 1000
	fs.Var(&o.scaleProgress, "scale-progress", "scale progress: pro tasks generated at once")
	fs.DurationVar(&o.scaleProgressDelay, "scale-progress-delay", 10*time.Second, "scale progress: EASEL_SIM_DELAY (a pro generation takes twice that)")
	fs.IntVar(&o.scaleBytesShare, "scale-bytes-share", 0, "scale bytes: EASEL_ACCOUNT_MAX_RUNNING (0: every task admitted, its job queued; else the rest are parked)")
	fs.IntVar(&o.scaleConcurrency, "scale-concurrency", 64, "scale: admin and create requests sent at once")
	fs.StringVar(&o.redis, "redis", redisSingle, "the private Redis to run on: "+redisSingle+" (one redis-server) or "+redisCluster+" (a 3-master Redis Cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { o.workerConcurrencySet = o.workerConcurrencySet || f.Name == "worker-concurrency" })
	if o.redis != redisSingle && o.redis != redisCluster {
		return fmt.Errorf("--redis %q: want %s or %s", o.redis, redisSingle, redisCluster)
	}
	if err := o.check(); err != nil {
		return err
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
	// workerConcurrencySet: --worker-concurrency was given, and binds the
	// inflight worker too.
	workerConcurrencySet bool
	pickupRate           float64
	pickupFor            time.Duration
	binDir, self         string
	jsonOut              string
	only                 string
	redis                string        // redisSingle or redisCluster
	inflight             int           // --inflight: tasks kept outstanding
	accounts             int           // --inflight-accounts: over how many accounts (0: auto)
	simDelay             time.Duration // --sim-delay: the inflight worker's EASEL_SIM_DELAY
	workerEnv            envList       // --worker-env
	gatewayEnv           envList       // --gateway-env
	// The quota, drip and memory parts' settings (--quota-*, --drip-*,
	// --memory-*).
	quotaWorkers, quotaRPM, quota429Every int
	quotaRate                             float64
	quotaLatency                          time.Duration
	dripTasks, dripSamples                int
	memoryImages, memorySide              int
	// The waiters part's settings (--waiters*).
	waiters, waitersChanges int
	waitersSpacing          time.Duration
	waitersRate             float64
	waitersProfile          string
	// The scale part's settings (--scale-*).
	scaleParts                                 string
	scaleAccounts, scaleBacklog                intList
	scaleWarmup, scaleMeasure, scaleFairWindow time.Duration
	scaleRequeue, scaleBytes, scaleProgress    countFlag
	scaleProgressDelay                         time.Duration
	scaleRequeueAccounts, scaleRequeueSamples  int
	scaleBytesShare, scaleConcurrency          int
	log                                        io.Writer
}

// defaultOnly is --only's default: the request path (http, downloads) and
// the worker's (drain, pickup); not the long runs (inflight, quota, drip,
// memory, waiters, scale).
const defaultOnly = "http,drain,pickup,downloads"

// allParts are the parts --only may name, in the order they run.
var allParts = []string{"http", "drain", "pickup", "inflight", "quota", "drip", "memory", "waiters", "downloads", "scale"}

// parseParts reads --only.
func parseParts(only string) (map[string]bool, error) {
	parts := map[string]bool{}
	for _, p := range strings.Split(only, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(allParts, p) {
			return nil, fmt.Errorf("--only %q: unknown part %q; want some of %s", only, p, strings.Join(allParts, ", "))
		}
		parts[p] = true
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("--only %q: name at least one of %s", only, strings.Join(allParts, ", "))
	}
	return parts, nil
}

// maxWaitersChanging bounds the waiters part's changes: they are made
// while the requests' 60 s waits run.
const maxWaitersChanging = 30 * time.Second

// maxWaitersRun bounds the waiters part's ramp (--waiters at
// --waiters-rate) and changes together, leaving time for the gateway to
// settle within the 60 s the first request waits.
const maxWaitersRun = 40 * time.Second

// Default measured times (--duration 0).
const (
	defaultHTTPDuration     = 8 * time.Second
	defaultInflightDuration = 90 * time.Second
	defaultQuotaDuration    = 5 * time.Minute
)

// quotaDuration is the quota run's length.
func (o options) quotaDuration() time.Duration {
	if o.duration > 0 {
		return o.duration
	}
	return defaultQuotaDuration
}

// httpDuration is each measured create and query run's length.
func (o options) httpDuration() time.Duration {
	if o.duration > 0 {
		return o.duration
	}
	return defaultHTTPDuration
}

// inflightDuration is the inflight run's length.
func (o options) inflightDuration() time.Duration {
	if o.duration > 0 {
		return o.duration
	}
	return defaultInflightDuration
}

// perAccountOutstanding is the most outstanding tasks an account gets in the
// inflight part by default: fewer than the workers' default fair share of
// running generations per account (EASEL_ACCOUNT_MAX_RUNNING, 64).
const perAccountOutstanding = 50

// inflightAccounts is how many accounts the inflight part spreads its
// tasks over.
func (o options) inflightAccounts() int {
	if o.accounts > 0 {
		return min(o.accounts, o.inflight)
	}
	return max(1, (o.inflight+perAccountOutstanding-1)/perAccountOutstanding)
}

// check validates the options that do not need the binaries.
func (o options) check() error {
	parts, err := parseParts(o.only)
	if err != nil {
		return err
	}
	if o.duration < 0 {
		return fmt.Errorf("--duration %s: want a positive duration", o.duration)
	}
	for _, kv := range o.gatewayEnv {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "" || strings.ContainsAny(k, " \t"):
			return fmt.Errorf("--gateway-env %q: want KEY=VALUE", kv)
		case k == "EASEL_REDIS_URL" || k == "EASEL_HTTP_ADDR":
			return fmt.Errorf("--gateway-env %q: the benchmark sets %s", kv, k)
		}
	}
	for _, kv := range o.workerEnv {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "" || strings.ContainsAny(k, " \t"):
			return fmt.Errorf("--worker-env %q: want KEY=VALUE", kv)
		case k == "EASEL_SIM_DELAY":
			return fmt.Errorf("--worker-env %q: use --sim-delay", kv)
		case k == "EASEL_REDIS_URL" || k == "EASEL_WORKER_HTTP_ADDR":
			return fmt.Errorf("--worker-env %q: the benchmark sets %s", kv, k)
		}
	}
	if parts["quota"] {
		switch {
		case o.quotaWorkers < 1:
			return fmt.Errorf("--quota-workers %d: want at least 1", o.quotaWorkers)
		case o.quotaRPM < 1:
			return fmt.Errorf("--quota-rpm %d: want at least 1", o.quotaRPM)
		case o.quotaRate <= 0:
			return fmt.Errorf("--quota-rate %g: want a positive rate", o.quotaRate)
		case o.quotaLatency < 0 || o.quota429Every < 0:
			return fmt.Errorf("--quota-latency %s, --quota-429-every %d: want 0 or more", o.quotaLatency, o.quota429Every)
		}
	}
	if parts["drip"] && (o.dripTasks < 1 || o.dripSamples < 1) {
		return fmt.Errorf("--drip-tasks %d, --drip-samples %d: want at least 1", o.dripTasks, o.dripSamples)
	}
	if parts["memory"] && (o.memoryImages < 1 || o.memorySide < 1) {
		return fmt.Errorf("--memory-images %d, --memory-side %d: want at least 1", o.memoryImages, o.memorySide)
	}
	if parts["waiters"] {
		switch {
		case o.waiters < 1 || o.waitersChanges < 1:
			return fmt.Errorf("--waiters %d, --waiters-changes %d: want at least 1", o.waiters, o.waitersChanges)
		case o.waitersChanges > o.waiters:
			return fmt.Errorf("--waiters-changes %d: want at most --waiters %d (a change per waiting request)", o.waitersChanges, o.waiters)
		case o.waitersSpacing < 0 || o.waitersRate < 0:
			return fmt.Errorf("--waiters-spacing %s, --waiters-rate %g: want 0 or more", o.waitersSpacing, o.waitersRate)
		case o.waitersRate > 0 && time.Duration(float64(o.waiters)/o.waitersRate*float64(time.Second))+time.Duration(o.waitersChanges)*o.waitersSpacing > maxWaitersRun:
			return fmt.Errorf("--waiters %d at --waiters-rate %g, then --waiters-changes %d × --waiters-spacing %s: want at most %s in all, inside the requests' 60 s wait", o.waiters, o.waitersRate, o.waitersChanges, o.waitersSpacing, maxWaitersRun)
		case time.Duration(o.waitersChanges)*o.waitersSpacing > maxWaitersChanging:
			return fmt.Errorf("--waiters-changes %d × --waiters-spacing %s: want at most %s, well inside the requests' 60 s wait", o.waitersChanges, o.waitersSpacing, maxWaitersChanging)
		}
	}
	if parts["scale"] {
		if err := o.checkScale(); err != nil {
			return err
		}
	}
	if parts["inflight"] {
		if o.inflight < 1 {
			return fmt.Errorf("--inflight %d: want at least 1", o.inflight)
		}
		if o.accounts < 0 {
			return fmt.Errorf("--inflight-accounts %d: want 1 or more, or 0 for the default", o.accounts)
		}
		if o.simDelay <= 0 {
			return fmt.Errorf("--sim-delay %s: want a positive duration (the expected rate is in-flight ÷ sim delay)", o.simDelay)
		}
		if d := o.inflightDuration(); d <= o.simDelay {
			return fmt.Errorf("--duration %s: want more than --sim-delay %s (the steady state starts one sim delay in; two or more are better)", d, o.simDelay)
		}
	}
	return nil
}

// envList is a repeatable KEY=VALUE flag.
type envList []string

func (l *envList) String() string { return strings.Join(*l, " ") }

func (l *envList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
