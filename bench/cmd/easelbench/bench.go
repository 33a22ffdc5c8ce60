package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/loadgen"
	"github.com/easelhq/easel/tools/testkit/localnet"
)

// proc is a child process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

// logDir collects the child processes' logs.
func logDir() string { return filepath.Join(os.TempDir(), "easelbench-logs") }

func startProc(name, path string, args []string, env []string, stdout io.Writer) (*proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = stdout
	_ = os.MkdirAll(logDir(), 0o755)
	logFile, err := os.OpenFile(filepath.Join(logDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); logFile.Close() }()
	return p, nil
}

// peakRSSMB reads the process's peak resident set size (VmHWM).
func (p *proc) peakRSSMB() float64 {
	_, hwm := memStatus(p.cmd.Process.Pid)
	return hwm
}

// memStatus reads a process's resident set size now (VmRSS) and its peak
// (VmHWM), in MB; NaN for a figure it cannot read.
func memStatus(pid int) (rss, hwm float64) {
	rss, hwm = math.NaN(), math.NaN()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return rss, hwm
	}
	mb := func(v string) float64 {
		kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
		if err != nil {
			return math.NaN()
		}
		return kb / 1024
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss = mb(v)
		} else if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			hwm = mb(v)
		}
	}
	return rss, hwm
}

// exited reports whether the process has ended, without waiting.
func (p *proc) exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err // for stop and kill
		return true, err
	default:
		return false, nil
	}
}

// kill ends the process at once: for a worker whose running tasks do not
// matter any more, whose graceful shutdown would wait for them.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	err := <-p.done
	p.done <- err // a second stop or kill returns at once
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // a second stop or kill returns at once
	case <-time.After(20 * time.Second):
		p.kill()
	}
}

// freeAddr returns an address for a service about to be started
// (localnet.PickAddr's: the reasons are there).
func freeAddr() string {
	addr, err := localnet.PickAddr()
	if err != nil {
		panic(err)
	}
	return addr
}

// waitReady waits for the process's url to answer, and fails as soon as
// the process has exited: a service that could not start (its port taken,
// say) must not pass for ready because something else answers at its
// address.
func (p *proc) waitReady(ctx context.Context, url string) error {
	return waitHTTP(ctx, url, func() error {
		if ok, err := p.exited(); ok {
			return fmt.Errorf("%s exited before it was ready (%v; its log: %s)", p.name, err, filepath.Join(logDir(), p.name+".log"))
		}
		return nil
	})
}

// waitHTTP asks url every 50 ms, for at most 20 s, until it answers below
// 500; it gives up with alive's error (if alive is not nil), checked before
// each attempt and after the answer.
func waitHTTP(ctx context.Context, url string, alive func() error) error {
	if alive == nil {
		alive = func() error { return nil }
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := alive(); err != nil {
			return err
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return alive()
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not up: %v", url, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

type env struct {
	o     options
	redis *benchRedis
	rdb   redis.UniversalClient // a *redis.ClusterClient on a cluster
	keys  []string
	acct  string // the account fresh made
}

// commandLine is the command a run of o was, for the results.
func commandLine(o options) string {
	s := fmt.Sprintf("make bench (easelbench --rounds %d --duration %s --concurrency %d --drain %d", o.rounds, o.httpDuration(), o.concurrency, o.drain)
	if o.only != defaultOnly {
		s += " --only " + o.only
	}
	if o.redis != redisSingle {
		s += " --redis " + o.redis
	}
	if parts, _ := parseParts(o.only); parts["inflight"] {
		s += fmt.Sprintf(" --inflight %d --sim-delay %s", o.inflight, o.simDelay)
		if o.accounts > 0 {
			s += fmt.Sprintf(" --inflight-accounts %d", o.accounts)
		}
		if o.duration <= 0 {
			s += fmt.Sprintf(", inflight run %s", o.inflightDuration())
		}
	}
	if parts, _ := parseParts(o.only); parts["quota"] {
		s += fmt.Sprintf(" --quota-workers %d --quota-rpm %d --quota-rate %g --quota-latency %s --quota-429-every %d",
			o.quotaWorkers, o.quotaRPM, o.quotaRate, o.quotaLatency, o.quota429Every)
		if o.duration <= 0 {
			s += fmt.Sprintf(", quota run %s", o.quotaDuration())
		}
	}
	if parts, _ := parseParts(o.only); parts["drip"] {
		s += fmt.Sprintf(" --drip-tasks %d --drip-samples %d", o.dripTasks, o.dripSamples)
	}
	if parts, _ := parseParts(o.only); parts["memory"] {
		s += fmt.Sprintf(" --memory-images %d --memory-side %d", o.memoryImages, o.memorySide)
	}
	if parts, _ := parseParts(o.only); parts["waiters"] {
		s += fmt.Sprintf(" --waiters %d --waiters-rate %g --waiters-changes %d --waiters-spacing %s", o.waiters, o.waitersRate, o.waitersChanges, o.waitersSpacing)
	}
	if parts, _ := parseParts(o.only); parts["scale"] {
		s += " " + o.scaleFlags()
	}
	if o.workerConcurrencySet {
		s += fmt.Sprintf(" --worker-concurrency %d", o.workerConcurrency)
	}
	for _, kv := range o.workerEnv {
		s += " --worker-env " + kv
	}
	for _, kv := range o.gatewayEnv {
		s += " --gateway-env " + kv
	}
	return s + ")"
}

func benchmark(ctx context.Context, o options) (*results, error) {
	dir, err := os.MkdirTemp("", "easelbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rp, err := startRedis(dir, o.redis)
	if err != nil {
		return nil, err
	}
	defer rp.stop()
	rdb, err := rp.client(ctx)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	e := &env{o: o, redis: rp, rdb: rdb}
	res := &results{Date: time.Now().UTC().Format("2006-01-02"), Machine: machine(), Rounds: o.rounds,
		Command: commandLine(o), Redis: rp.kind, RedisNodes: len(rp.pids)}
	e.logf("redis %s: %s", rp.kind, rp.url)

	parts, err := parseParts(o.only)
	if err != nil {
		return nil, err
	}
	for round := 1; round <= o.rounds; round++ {
		if parts["http"] {
			e.logf("round %d/%d: create and query", round, o.rounds)
			if err := e.httpRound(ctx, round, res); err != nil {
				return nil, err
			}
		}
		if parts["drain"] {
			e.logf("round %d/%d: worker throughput", round, o.rounds)
			if err := e.drainRound(ctx, round, res); err != nil {
				return nil, err
			}
		}
	}
	if parts["pickup"] {
		e.logf("pick-up latency")
		if err := e.pickup(ctx, res); err != nil {
			return nil, err
		}
	}
	if parts["inflight"] {
		e.logf("slow generations in flight: %d tasks outstanding, sim delay %s, %s", o.inflight, o.simDelay, o.inflightDuration())
		if err := e.inflight(ctx, res); err != nil {
			return nil, err
		}
	}
	if parts["quota"] {
		e.logf("shared upstream quota: %d workers, %d/min, %.1f creates/s for %s", o.quotaWorkers, o.quotaRPM, o.quotaRate, o.quotaDuration())
		if err := e.quota(ctx, res); err != nil {
			return nil, err
		}
	}
	if parts["drip"] {
		e.logf("drip attack: %d tasks on a 1 byte/s source, %d timed tasks of another account each way", o.dripTasks, o.dripSamples)
		if err := e.drip(ctx, res); err != nil {
			return nil, err
		}
	}
	if parts["memory"] {
		e.logf("memory attack: one task with %d 16-bit PNGs of %d×%d", o.memoryImages, o.memorySide, o.memorySide)
		if err := e.memoryAttack(ctx, res); err != nil {
			return nil, err
		}
	}
	if parts["waiters"] {
		e.logf("waiting requests: %d held, %d changes a phase, %s apart, %d round(s)", o.waiters, o.waitersChanges, o.waitersSpacing, o.rounds)
		if err := e.waiters(ctx, res); err != nil {
			return nil, err
		}
	}
	if parts["downloads"] {
		e.logf("downloads: file store and S3, %v MB, %d connections, %d round(s)", downloadSizesMB, o.concurrency, o.rounds)
		if err := e.downloads(ctx, res); err != nil {
			return nil, err
		}
	}
	if parts["scale"] {
		e.logf("background work at scale: %s", o.scaleFlags())
		if err := e.scale(ctx, res); err != nil {
			return nil, err
		}
	}
	for _, p := range allParts {
		if parts[p] {
			res.Parts = append(res.Parts, p)
		}
	}
	return res, nil
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.o.log, "easelbench: "+format+"\n", args...)
}

// fresh empties the private Redis (every master of a cluster) and makes an
// account with keys that nothing limits.
func (e *env) fresh(ctx context.Context) error {
	if err := flushAll(ctx, e.rdb); err != nil { // our own servers, started by startRedis
		return err
	}
	st := e.accounts()
	a, err := st.Create(ctx, account.Spec{Name: "bench", Credits: 1e12, RateLimit: 1_000_000, QueryRateLimit: 1_000_000, MaxInflight: 1_000_000})
	if err != nil {
		return fmt.Errorf("bench account: %w", err)
	}
	e.keys, e.acct = nil, a.ID
	for i := 0; i < 4; i++ {
		k, _, err := st.CreateKey(ctx, a.ID)
		if err != nil {
			return fmt.Errorf("bench key: %w", err)
		}
		e.keys = append(e.keys, k)
	}
	return nil
}

// benchSigningSecret signs the real gateway's result URLs.
const benchSigningSecret = "bench-signing-secret-0123456789abcdef"

func (e *env) serviceEnv(extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"EASEL_REDIS_URL=" + e.redis.url,
		"EASEL_SIGNING_SECRET=" + benchSigningSecret,
		"EASEL_BLOB_URL=file://" + filepath.Join(os.TempDir(), "easelbench-blobs"),
		"EASEL_LOG_LEVEL=info",
		"EASEL_SIM_DELAY=0",
	}
	return append(env, extra...)
}

// workerEnv is the environment of a worker compared with the baseline
// worker (drain) or measured with it (pickup): the services' with the
// baseline's concurrency and extra, then --worker-env, whose values win
// (exec keeps the last of a duplicate key).
func (e *env) workerEnv(extra ...string) []string {
	env := e.serviceEnv(append([]string{"EASEL_WORKER_CONCURRENCY=" + strconv.Itoa(e.o.workerConcurrency)}, extra...)...)
	return append(env, e.o.workerEnv...)
}

func (e *env) startGateway(ctx context.Context) (*proc, string, error) {
	return e.startGatewayEnv(ctx)
}

// startGatewayEnv starts bin/gateway with extra added to its environment,
// then --gateway-env, whose values win.
func (e *env) startGatewayEnv(ctx context.Context, extra ...string) (*proc, string, error) {
	addr := freeAddr()
	// No operations listener: its default port (:9090) may be taken.
	env := append(e.serviceEnv(append([]string{"EASEL_HTTP_ADDR=" + addr, "EASEL_METRICS_ADDR=off"}, extra...)...), e.o.gatewayEnv...)
	p, err := startProc("gateway", filepath.Join(e.o.binDir, "gateway"), nil, env, io.Discard)
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	if err := p.waitReady(ctx, base+"/readyz"); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, base, nil
}

func (e *env) startBaselineGateway(ctx context.Context) (*proc, string, error) {
	addr := freeAddr()
	p, err := startProc("baseline-gateway", e.o.self, []string{"baseline-gateway", addr, e.redis.url}, os.Environ(), io.Discard)
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	if err := p.waitReady(ctx, base+"/v1/task/query?task_id=x"); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, base, nil
}

// load runs loadgen after a warm-up and returns the measured report.
func (e *env) load(ctx context.Context, base, mode string, requests int64) (*loadgen.Report, error) {
	rep, _, err := e.loadMetered(ctx, base, mode, requests, nil)
	return rep, err
}

// loadMetered is load that also returns the CPU microseconds per request
// each of pids (and "self", the load generator) used in the measured part.
func (e *env) loadMetered(ctx context.Context, base, mode string, requests int64, pids map[string][]int) (*loadgen.Report, map[string]float64, error) {
	cfg := loadgen.Config{BaseURL: base, Keys: e.keys, Mode: mode, Concurrency: e.o.concurrency, Mix: benchMix(), QueryTasks: 1000, Timeout: 10 * time.Second}
	if requests > 0 {
		cfg.Requests, cfg.Concurrency = requests, 32
		rep, err := loadgen.Run(ctx, cfg)
		return rep, nil, err
	}
	warm := cfg
	warm.Duration, warm.QueryTasks = e.o.warmup, 100
	if _, err := loadgen.Run(ctx, warm); err != nil {
		return nil, nil, err
	}
	cfg.Duration = e.o.httpDuration()
	var m *cpuMeter
	if pids != nil {
		m = newCPUMeter(pids)
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil || m == nil {
		return rep, nil, err
	}
	var n int64
	for _, o := range rep.Ops {
		n += o.Count
	}
	return rep, m.perOp(n), nil
}

// benchMix is the requests' mix: 3 standard 1:1 to 1 pro 2K 16:9.
func benchMix() []loadgen.MixEntry {
	return []loadgen.MixEntry{{Model: "lumen-2.5-flash-image", AspectRatio: "1:1", Weight: 3}, {Model: "lumen-3-pro-image-preview", ImageSize: "2K", AspectRatio: "16:9", Weight: 1}}
}

func okRate(rep *loadgen.Report, op string) (float64, error) {
	o := rep.Ops[op]
	if o == nil || o.OK == 0 {
		return 0, fmt.Errorf("no successful %s in the run: %+v", op, o)
	}
	if o.Errors > 0 {
		return 0, fmt.Errorf("%d failed %s requests in a benchmark run: %v", o.Errors, op, o.ErrorTypes)
	}
	return o.Throughput, nil
}

// httpRound compares create and query throughput, baseline and real,
// alternating which goes first.
func (e *env) httpRound(ctx context.Context, round int, res *results) error {
	type side struct {
		name  string
		start func(context.Context) (*proc, string, error)
	}
	// Every task is admitted and its job queued, as the baseline queues
	// one per create (with a share, the bench account's tasks past it
	// would wait parked, which costs one Redis call less).
	real := func(ctx context.Context) (*proc, string, error) {
		return e.startGatewayEnv(ctx, "EASEL_ACCOUNT_MAX_RUNNING=0")
	}
	sides := []side{{"baseline", e.startBaselineGateway}, {"real", real}}
	if round%2 == 0 {
		sides[0], sides[1] = sides[1], sides[0]
	}
	for _, s := range sides {
		if err := e.fresh(ctx); err != nil {
			return err
		}
		p, base, err := s.start(ctx)
		if err != nil {
			return err
		}
		before, err := usedMemory(ctx, e.rdb)
		if err != nil {
			p.stop()
			return err
		}
		pids := e.redis.cpuPids()
		pids["gateway"], pids["self"] = []int{p.cmd.Process.Pid}, nil
		create, cpu, err := e.loadMetered(ctx, base, loadgen.ModeCreate, 0, pids)
		if err != nil {
			p.stop()
			return err
		}
		createRate, err := okRate(create, loadgen.OpCreate)
		if err != nil {
			p.stop()
			return fmt.Errorf("%s create: %w", s.name, err)
		}
		if s.name == "real" && round == 1 {
			if err := e.memory(ctx, before, res); err != nil {
				p.stop()
				return err
			}
		}
		pids["self"] = nil
		query, qcpu, err := e.loadMetered(ctx, base, loadgen.ModeQuery, 0, pids)
		if err != nil {
			p.stop()
			return err
		}
		queryRate, err := okRate(query, loadgen.OpQuery)
		if err != nil {
			p.stop()
			return fmt.Errorf("%s query: %w", s.name, err)
		}
		cl, ql := create.Ops[loadgen.OpCreate].Latency, query.Ops[loadgen.OpQuery].Latency
		var counts [2]*commandCounts
		if round == 1 {
			// What a fixed number of requests cost Redis in commands.
			for i, mode := range []string{loadgen.ModeCreate, loadgen.ModeQuery} {
				if counts[i], err = e.countCommands(ctx, base, mode, countRequests); err != nil {
					p.stop()
					return fmt.Errorf("%s %s commands: %w", s.name, mode, err)
				}
			}
		}
		if s.name == "real" {
			res.CreateReal = append(res.CreateReal, createRate)
			res.CreateCPUReal = append(res.CreateCPUReal, cpu)
			res.QueryReal = append(res.QueryReal, queryRate)
			res.QueryCPUReal = append(res.QueryCPUReal, qcpu)
			res.CreateP50 = append(res.CreateP50, cl.P50)
			res.QueryP50 = append(res.QueryP50, ql.P50)
			res.CreateP99 = append(res.CreateP99, cl.P99)
			res.QueryP99 = append(res.QueryP99, ql.P99)
			if round == 1 {
				res.CreateCommandsReal, res.QueryCommandsReal = counts[0], counts[1]
			}
			setMax(&res.GatewayRSSMB, p.peakRSSMB())
		} else {
			res.CreateBaseline = append(res.CreateBaseline, createRate)
			res.CreateCPUBaseline = append(res.CreateCPUBaseline, cpu)
			res.QueryBaseline = append(res.QueryBaseline, queryRate)
			res.QueryCPUBaseline = append(res.QueryCPUBaseline, qcpu)
			res.CreateP99Baseline = append(res.CreateP99Baseline, cl.P99)
			res.QueryP99Baseline = append(res.QueryP99Baseline, ql.P99)
			if round == 1 {
				res.CreateCommandsBaseline, res.QueryCommandsBaseline = counts[0], counts[1]
			}
		}
		e.logf("  %s: create %.0f/s, query %.0f/s", s.name, createRate, queryRate)
		p.stop()
	}
	return nil
}

// memory measures Redis memory per task after a create run: the keys
// named after a task (its record: MEMORY USAGE, every field counted, of a
// sample), and everything a task adds (record, job, ledger entry, in-flight
// entry) from used_memory, summed over the masters of a cluster.
func (e *env) memory(ctx context.Context, before int64, res *results) error {
	after, err := usedMemory(ctx, e.rdb)
	if err != nil {
		return err
	}
	var n int64
	sample := map[string]bool{}
	_ = eachTask(ctx, e.tasks(), e.acct, func(t *task.Task) error {
		n++
		if len(sample) < 200 {
			sample[t.ID] = true
		}
		return nil
	})
	total, sampled, err := keysOfTasksBytes(ctx, e.rdb, sample)
	if err != nil {
		return err
	}
	if sampled > 0 {
		res.TaskRecordBytes = ptr(float64(total) / float64(sampled))
	}
	if n > 0 {
		res.PerTaskBytes = ptr(float64(after-before) / float64(n))
	}
	return nil
}

// drainRound compares how fast a worker gets through a backlog: raw Asynq
// running no-op jobs, and the real worker running image tasks with a
// zero-delay generator, alternating which goes first.
func (e *env) drainRound(ctx context.Context, round int, res *results) error {
	var base, real float64
	var err error
	sides := []func() error{
		func() (err error) { base, err = e.drainBaseline(ctx, res); return err },
		func() (err error) { real, err = e.drainReal(ctx, res); return err },
	}
	if round%2 == 0 {
		sides[0], sides[1] = sides[1], sides[0]
	}
	for _, side := range sides {
		if err := side(); err != nil {
			return err
		}
	}
	res.DrainBaseline = append(res.DrainBaseline, base)
	res.DrainReal = append(res.DrainReal, real)
	e.logf("  worker: real %.0f/s, baseline %.0f/s", real, base)
	if round == 1 {
		// A task's whole life in Redis, counted apart from the timed
		// runs: MONITOR costs Redis CPU.
		n := e.o.lifeTasks()
		if res.LifeCommandsBaseline, err = e.lifeBaseline(ctx, n); err != nil {
			return fmt.Errorf("baseline whole-life commands: %w", err)
		}
		if res.LifeCommandsReal, err = e.lifeReal(ctx, n); err != nil {
			return fmt.Errorf("real whole-life commands: %w", err)
		}
		e.logf("  whole life over %d tasks: real %.1f commands, %.2f round trips a task; baseline %.1f, %.2f",
			n, sum(res.LifeCommandsReal.Stats), sum(res.LifeCommandsReal.Sent), sum(res.LifeCommandsBaseline.Stats), sum(res.LifeCommandsBaseline.Sent))
	}
	return nil
}

func (e *env) drainBaseline(ctx context.Context, res *results) (float64, error) {
	if err := flushAll(ctx, e.rdb); err != nil {
		return 0, err
	}
	// Redis's CPU over the tasks' whole life, enqueue to done.
	life := newCPUMeter(e.redis.cpuPids())
	if err := e.enqueueBaseline(ctx, e.o.drain); err != nil {
		return 0, err
	}
	out := &strings.Builder{}
	redisCPU := newCPUMeter(e.redis.cpuPids())
	p, err := startProc("baseline-worker", e.o.self, []string{"baseline-worker", e.redis.url, strconv.Itoa(e.o.drain), strconv.Itoa(e.o.workerConcurrency), "50ms"}, os.Environ(), out)
	if err != nil {
		return 0, err
	}
	select {
	case err := <-p.done:
		if err != nil {
			return 0, fmt.Errorf("baseline worker: %w", err)
		}
	case <-time.After(5 * time.Minute):
		p.stop()
		return 0, fmt.Errorf("baseline worker did not finish")
	}
	var r drainResult
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil || r.Processed != int64(e.o.drain) {
		return 0, fmt.Errorf("baseline worker result %q: %v", out.String(), err)
	}
	res.LifeCPUBaseline = append(res.LifeCPUBaseline, life.perOp(r.Processed))
	cpu := redisCPU.perOp(r.Processed)
	ps := p.cmd.ProcessState
	cpu["worker"] = float64(ps.UserTime()+ps.SystemTime()) / float64(time.Microsecond) / float64(r.Processed)
	res.DrainCPUBaseline = append(res.DrainCPUBaseline, cpu)
	return float64(r.Processed) / (float64(r.LastMs-r.FirstMs) / 1000), nil
}

// drainReal measures the real worker getting through a backlog of tasks
// created through the gateway. The worker runs a few tasks of the mix first,
// with the queues then paused while the backlog is created: the generator's
// first pictures (a render each; later ones come from its cache) and the
// worker's start-up are not what a zero-delay generator measures.
func (e *env) drainReal(ctx context.Context, res *results) (float64, error) {
	if err := e.fresh(ctx); err != nil {
		return 0, err
	}
	gw, base, err := e.startGateway(ctx)
	if err != nil {
		return 0, err
	}
	defer gw.stop()
	wk, err := startProc("worker", filepath.Join(e.o.binDir, "worker"), nil, e.workerEnv("EASEL_WORKER_HTTP_ADDR="+freeAddr()), io.Discard)
	if err != nil {
		return 0, err
	}
	defer wk.stop()
	const warm = 32
	if err := e.createTasks(ctx, base, warm); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := e.waitTasks(ctx, warm, 2*time.Minute); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	queues := jobs.Queues()
	for _, q := range queues {
		if err := insp.PauseQueue(q); err != nil {
			return 0, err
		}
	}
	// Redis's CPU over the tasks' whole life, create to complete (the
	// warm-up's left out).
	life := newCPUMeter(e.redis.cpuPids())
	if err := e.createTasks(ctx, base, e.o.drain); err != nil {
		return 0, fmt.Errorf("backlog: %w", err)
	}
	pids := e.redis.cpuPids()
	pids["worker"] = []int{wk.cmd.Process.Pid}
	cpu := newCPUMeter(pids)
	resumed := time.Now().UnixMilli()
	for _, q := range queues {
		if err := insp.UnpauseQueue(q); err != nil {
			return 0, err
		}
	}
	recs, err := e.waitTasks(ctx, warm+e.o.drain, 5*time.Minute)
	if err != nil {
		return 0, err
	}
	setMax(&res.WorkerRSSMB, wk.peakRSSMB())
	var first, last int64 = math.MaxInt64, 0
	n := 0
	for _, r := range recs {
		if r.start < resumed {
			continue // a warm-up task
		}
		n++
		first = min(first, r.start)
		last = max(last, r.end)
	}
	if n != e.o.drain {
		return 0, fmt.Errorf("%d backlog tasks started after the queues were resumed; want %d", n, e.o.drain)
	}
	res.DrainCPUReal = append(res.DrainCPUReal, cpu.perOp(int64(n)))
	res.LifeCPUReal = append(res.LifeCPUReal, life.perOp(int64(n)))
	return float64(n) / (float64(last-first) / 1000), nil
}

// createTasks creates n tasks of the mix through the gateway.
func (e *env) createTasks(ctx context.Context, base string, n int) error {
	rep, err := e.load(ctx, base, loadgen.ModeCreate, int64(n))
	if err != nil {
		return err
	}
	if o := rep.Ops[loadgen.OpCreate]; o == nil || o.OK != int64(n) {
		return fmt.Errorf("created %+v of %d", o, n)
	}
	return nil
}

type taskTimes struct{ create, start, end int64 }

// waitTasks waits until want task records are completed and returns their
// times.
func (e *env) waitTasks(ctx context.Context, want int, timeout time.Duration) ([]taskTimes, error) {
	deadline := time.Now().Add(timeout)
	// Wait cheaply, so that the benchmark's own reads take little Redis
	// time from the worker: a task leaves its account's in-flight set when
	// it completes or fails.
	for e.acct != "" && time.Now().Before(deadline) {
		n, err := e.tasks().Inflight(ctx, e.acct)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	st := e.tasks()
	for {
		var out []taskTimes
		failed := 0
		_ = eachTask(ctx, st, e.acct, func(t *task.Task) error {
			switch t.Status {
			case task.Completed:
				out = append(out, taskTimes{t.CreateTime.UnixMilli(), t.StartTime.UnixMilli(), t.CompleteTime.UnixMilli()})
			case task.Failed:
				failed++
			}
			return nil
		})
		if failed > 0 {
			return nil, fmt.Errorf("%d tasks failed during the benchmark", failed)
		}
		if len(out) >= want {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d tasks completed in %v", len(out), want, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pickup measures created → processing under a steady arrival rate, with a
// worker waiting for work.
func (e *env) pickup(ctx context.Context, res *results) error {
	if err := e.fresh(ctx); err != nil {
		return err
	}
	gw, base, err := e.startGateway(ctx)
	if err != nil {
		return err
	}
	defer gw.stop()
	wk, err := startProc("worker", filepath.Join(e.o.binDir, "worker"), nil, e.workerEnv("EASEL_WORKER_HTTP_ADDR="+freeAddr()), io.Discard)
	if err != nil {
		return err
	}
	defer wk.stop()
	time.Sleep(time.Second) // let the worker start polling
	rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Keys: e.keys, Mode: loadgen.ModeCreate, Rate: e.o.pickupRate, Duration: e.o.pickupFor,
		Mix: []loadgen.MixEntry{{Model: "lumen-2.5-flash-image", AspectRatio: "1:1", Weight: 1}}})
	if err != nil {
		return err
	}
	n := int(rep.Ops[loadgen.OpCreate].OK)
	recs, err := e.waitTasks(ctx, n, 2*time.Minute)
	if err != nil {
		return err
	}
	h := hdrhistogram.New(1, 600_000, 3)
	for _, r := range recs {
		_ = h.RecordValue(max(r.start-r.create, 1))
	}
	res.PickupP50, res.PickupP90, res.PickupP99 = ptr(float64(h.ValueAtQuantile(50))), ptr(float64(h.ValueAtQuantile(90))), ptr(float64(h.ValueAtQuantile(99)))
	res.PickupMax, res.PickupN = ptr(float64(h.Max())), ptr(len(recs))
	e.logf("  pick-up over %d tasks: p50 %.0f ms, p99 %.0f ms", len(recs), *res.PickupP50, *res.PickupP99)
	return nil
}

// keysOfTasksBytes is the memory of Easel's keys whose name ends in one
// of the tasks' ids (their records; Asynq's own are left out), found by one SCAN of every master, each
// measured whole (MEMORY USAGE ... SAMPLES 0), and how many tasks had one:
// the benchmark reads sizes, it never names a key.
func keysOfTasksBytes(ctx context.Context, rdb redis.UniversalClient, ids map[string]bool) (total, found int64, err error) {
	seen := map[string]bool{}
	each := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			id := k[strings.LastIndexByte(k, ':')+1:]
			if !ids[id] || strings.HasPrefix(k, "asynq:") { // the job's own hash is Asynq's
				continue
			}
			n, err := c.MemoryUsage(ctx, k, 0).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			total += n
			seen[id] = true
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return each(ctx, c)
		})
	} else if c, ok := rdb.(*redis.Client); ok {
		err = each(ctx, c)
	} else {
		err = fmt.Errorf("keysOfTasksBytes: a %T", rdb)
	}
	return total, int64(len(seen)), err
}
