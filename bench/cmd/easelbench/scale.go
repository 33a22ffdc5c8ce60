package main

// The scale part (--only scale, not in the default set) checks that
// background work costs what is due, not what exists.
// Each sub-part (--scale-parts) empties the private Redis and starts its
// own bin/gateway and bin/worker, as separate processes, with the settings
// it needs. It drives them only over HTTP (the public API, and the admin
// API: the gateway gets EASEL_ADMIN_TOKEN) and reads Redis only through
// INFO commandstats, INFO cpu, INFO memory, DBSIZE and Asynq's Inspector,
// never through pkg/store: so it runs as well against the binaries of an
// older commit (--bin), for before/after comparisons.
//
//   - idle: one gateway and one worker, nothing to do, at each of
//     --scale-accounts accounts (created through the admin API,
//     --scale-concurrency at a time, added level by level): after
//     --scale-warmup, Redis commands per second (the delta of INFO
//     commandstats' calls), Redis, worker and gateway CPU over
//     --scale-measure; and what an idle account costs Redis (used_memory's
//     growth, the clients' buffers left out, over the accounts added).
//   - backlog: one account with N tasks (each of --scale-backlog) over a
//     share of 16 (EASEL_ACCOUNT_MAX_RUNNING=16, gateway and worker),
//     generations of 60 s, worker concurrency 1000, no client load after
//     the creates: the same figures; then one task of another account, and
//     the time until the query says it is processing.
//   - fairness: three accounts of weights 2, 1, 1 (PATCH .../limits
//     {"weight":2}) with backlogs, a worker of 8 slots, a share of 4 (so
//     windows 8/4/4, 16 places for 8 slots), generations of 200 ms: each
//     account's completions over --scale-fair-window after --scale-warmup,
//     counted from the list API's complete_time, against 50/25/25 ±5 %.
//   - requeue: --scale-requeue tasks pending (EASEL_ACCOUNT_MAX_RUNNING=0:
//     every task admitted, its job in Asynq) over --scale-requeue-accounts
//     accounts, the queues paused (Inspector.PauseQueue) so nothing runs;
//     Redis's cost with them all pending over --scale-measure, then the
//     jobs of --scale-requeue-samples tasks deleted from the queue
//     (Inspector.DeleteTask) and the time until each is back
//     (Inspector.GetTaskInfo, every 100 ms).
//   - progress: what a long generation with progress costs Redis in all
//     (scaleprogress.go).
//   - bytes: used_memory's growth per task, all keys, for --scale-bytes
//     tasks pending (queues paused; EASEL_ACCOUNT_MAX_RUNNING
//     --scale-bytes-share, 0 by default: every task admitted, its job
//     queued) and after they all completed (EASEL_SIM_DELAY=0).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/jobs"
)

// The scale sub-parts, in the order they run.
var allScaleParts = []string{"idle", "backlog", "fairness", "requeue", "progress", "bytes"}

// defaultScaleParts is --scale-parts' default: all of them.
const defaultScaleParts = "idle,backlog,fairness,requeue,progress,bytes"

// parseScaleParts reads --scale-parts.
func parseScaleParts(s string) (map[string]bool, error) {
	parts := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(allScaleParts, p) {
			return nil, fmt.Errorf("--scale-parts %q: unknown sub-part %q; want some of %s", s, p, strings.Join(allScaleParts, ", "))
		}
		parts[p] = true
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("--scale-parts %q: name at least one of %s", s, strings.Join(allScaleParts, ", "))
	}
	return parts, nil
}

// intList is a comma-separated list of counts (--scale-accounts,
// --scale-backlog); "100k" and "1m" are accepted.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out intList
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := parseCount(f)
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return fmt.Errorf("%q: want a comma-separated list of counts", v)
	}
	*l = out
	return nil
}

// parseCount reads a count: digits, with an optional k (thousands) or m
// (millions), e.g. 100k, 1m.
func parseCount(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(strings.ToLower(s), "k"):
		mult, s = 1000, s[:len(s)-1]
	case strings.HasSuffix(strings.ToLower(s), "m"):
		mult, s = 1_000_000, s[:len(s)-1]
	}
	n, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a count (e.g. 3000, 100k, 1m)", s)
	}
	return n * mult, nil
}

// countFlag is one count flag that accepts k and m (--scale-requeue).
type countFlag int

func (c *countFlag) String() string { return strconv.Itoa(int(*c)) }

func (c *countFlag) Set(v string) error {
	n, err := parseCount(strings.TrimSpace(v))
	if err != nil {
		return err
	}
	*c = countFlag(n)
	return nil
}

// checkScale validates the scale part's flags.
func (o options) checkScale() error {
	if _, err := parseScaleParts(o.scaleParts); err != nil {
		return err
	}
	switch {
	case len(o.scaleAccounts) == 0 || !slices.IsSorted(o.scaleAccounts) || o.scaleAccounts[0] < 1:
		return fmt.Errorf("--scale-accounts %s: want 1 or more accounts at each level, ascending", o.scaleAccounts.String())
	case len(o.scaleBacklog) == 0 || slices.Min(o.scaleBacklog) < 1:
		return fmt.Errorf("--scale-backlog %s: want 1 or more tasks", o.scaleBacklog.String())
	case o.scaleWarmup < 0 || o.scaleMeasure <= 0 || o.scaleFairWindow <= 0:
		return fmt.Errorf("--scale-warmup %s, --scale-measure %s, --scale-fair-window %s: want 0 or more, and more than 0", o.scaleWarmup, o.scaleMeasure, o.scaleFairWindow)
	case o.scaleRequeueAccounts < 1 || int(o.scaleRequeue) < o.scaleRequeueAccounts:
		return fmt.Errorf("--scale-requeue %d over --scale-requeue-accounts %d: want at least one task per account", o.scaleRequeue, o.scaleRequeueAccounts)
	case int(o.scaleRequeue) > o.scaleRequeueAccounts*1_000_000:
		return fmt.Errorf("--scale-requeue %d over --scale-requeue-accounts %d: at most 1,000,000 an account (its max_inflight)", o.scaleRequeue, o.scaleRequeueAccounts)
	case o.scaleRequeueSamples < 1 || o.scaleRequeueSamples > int(o.scaleRequeue):
		return fmt.Errorf("--scale-requeue-samples %d: want 1 to --scale-requeue", o.scaleRequeueSamples)
	case o.scaleBytes < 1 || o.scaleBytesShare < 0:
		return fmt.Errorf("--scale-bytes %d, --scale-bytes-share %d: want 1 or more tasks, a share of 0 or more", o.scaleBytes, o.scaleBytesShare)
	case o.scaleProgress < 1 || o.scaleProgress > 10000 || o.scaleProgressDelay <= 0:
		return fmt.Errorf("--scale-progress %d, --scale-progress-delay %s: want 1 to 10,000 tasks (one worker's concurrency), a delay above 0", o.scaleProgress, o.scaleProgressDelay)
	case o.scaleConcurrency < 1:
		return fmt.Errorf("--scale-concurrency %d: want 1 or more", o.scaleConcurrency)
	case slices.Max(o.scaleBacklog) > 1_000_000:
		return fmt.Errorf("--scale-backlog %s: at most 1,000,000 (one account's max_inflight)", o.scaleBacklog.String())
	}
	return nil
}

// scaleFlags are the scale part's settings, for the command line in the
// results.
func (o options) scaleFlags() string {
	return fmt.Sprintf("--scale-parts %s --scale-accounts %s --scale-backlog %s --scale-warmup %s --scale-measure %s --scale-fair-window %s --scale-requeue %d --scale-requeue-accounts %d --scale-requeue-samples %d --scale-progress %d --scale-progress-delay %s --scale-bytes %d --scale-bytes-share %d --scale-concurrency %d",
		o.scaleParts, o.scaleAccounts.String(), o.scaleBacklog.String(), o.scaleWarmup, o.scaleMeasure, o.scaleFairWindow,
		o.scaleRequeue, o.scaleRequeueAccounts, o.scaleRequeueSamples, o.scaleProgress, o.scaleProgressDelay, o.scaleBytes, o.scaleBytesShare, o.scaleConcurrency)
}

// The scale part's settings and the targets it checks.
const (
	// scaleAdminToken is the gateway's EASEL_ADMIN_TOKEN (at least 32
	// bytes).
	scaleAdminToken = "easelbench-admin-token-0123456789abcdef"

	backlogShare       = 16
	backlogSimDelay    = 60 * time.Second
	backlogConcurrency = 1000
	// backlogProbeTimeout bounds the wait for the other account's task.
	backlogProbeTimeout = 2 * time.Minute

	fairShare       = 4
	fairConcurrency = 8
	fairSimDelay    = 200 * time.Millisecond
	// fairTolerance: each share within ±5 % of its target (of the target,
	// not percentage points: 47.5–52.5 and 23.75–26.25).
	fairTolerance = 0.05
	// fairMinBacklog is the fewest tasks an account's backlog has.
	fairMinBacklog = 200

	// requeueDeadline is the gateway's EASEL_TASK_DEADLINE in the requeue
	// part: creating a million tasks takes minutes, and none may reach its
	// deadline (10 minutes by default) while the recovery is measured.
	requeueDeadline = "6h"
	requeuePoll     = 100 * time.Millisecond
	requeueTimeout  = 5 * time.Minute

	// Targets.
	idleTargetCmds            = 400 // commands/s, at 10,000 accounts or more
	idleTargetFrom            = 10000
	idleTargetBytes           = 600 // B an idle account, at 100,000 accounts or more
	idleBytesFrom             = 100000
	idleBytesMinAdded         = 1000 // fewer added: the server's own growth dominates
	backlogTargetCmds         = 1500 // commands/s, below 100,000 tasks
	backlogTargetWorkerPct    = 10   // worker CPU %, below 100,000 tasks
	backlogBigFrom            = 100000
	backlogBigTargetPct       = 5 // Redis and worker CPU %, from 100,000 tasks
	backlogTargetProbe        = 2 * time.Second
	requeueTarget             = 60 * time.Second
	bytesTargetPending        = 1500
	bytesTargetCompleted      = 900
	scaleCreatePrompt         = "a lighthouse on a cliff at dusk, oil painting"
	scaleCreateModel          = "lumen-2.5-flash-image"
	scaleProgressEvery        = 10 * time.Second
	scaleMaxCreateAttempts    = 20
	scaleBytesSettle          = 3 * time.Second
	scaleBytesDrainTimeoutPer = 10 * time.Millisecond // per task, at least a minute
)

// scaleBody is the create request's body: one standard 1:1 picture, the
// same one every time (the generator paints it once).
var scaleBody = []byte(`{"model":"` + scaleCreateModel + `","task_type":"image","input":{"prompt":"` + scaleCreatePrompt + `","aspect_ratio":"1:1"}}`)

// scaleResult is the scale part's figures. Sub-parts that did not run are
// absent.
type scaleResult struct {
	Parts     []string `json:"parts"`
	WarmupS   float64  `json:"warmup_s"`
	MeasureS  float64  `json:"measure_s"`
	Bin       string   `json:"bin"`
	LoadStart string   `json:"load_average_start"`
	LoadEnd   string   `json:"load_average_end"`

	Idle     []scaleIdle    `json:"idle,omitempty"`
	Backlog  []scaleBacklog `json:"backlog,omitempty"`
	Fairness *scaleFairness `json:"fairness,omitempty"`
	Requeue  *scaleRequeue  `json:"requeue,omitempty"`
	Progress *scaleProgress `json:"progress,omitempty"`
	Bytes    *scaleBytes    `json:"bytes,omitempty"`
}

// scaleWindow is one measured window.
type scaleWindow struct {
	Seconds float64 `json:"s"`
	// Commands are the calls INFO commandstats counted in the window (the
	// benchmark's own INFO taken out), over every server; TopCommands the
	// commands called most, with their calls in the window.
	Commands     int64            `json:"redis_commands"`
	CommandsPerS float64          `json:"redis_commands_per_s"`
	TopCommands  map[string]int64 `json:"redis_top_commands"`
	// CPU in % of one core over the window: Redis from INFO cpu
	// (used_cpu_user + used_cpu_sys, summed over servers), the services
	// from /proc.
	RedisCPUPct   float64 `json:"redis_cpu_pct"`
	WorkerCPUPct  float64 `json:"worker_cpu_pct"`
	GatewayCPUPct float64 `json:"gateway_cpu_pct"`
	// At the window's end.
	UsedMemory  int64   `json:"redis_used_memory"`
	Keys        int64   `json:"redis_keys"`
	WorkerRSSMB float64 `json:"worker_rss_mb"`
	LoadAvg     string  `json:"load_average"`
}

// scaleIdle is one level of the idle sub-part.
type scaleIdle struct {
	Accounts int `json:"accounts"`
	// Added are the accounts created for this level, in CreateS.
	Added      int     `json:"accounts_added"`
	CreateS    float64 `json:"create_s"`
	CreatePerS float64 `json:"create_per_s"`
	// PerAccount is used_memory's growth per account added (the clients'
	// buffers left out): what an idle account costs Redis, its share of
	// the server's tables included.
	PerAccount float64     `json:"bytes_per_account"`
	Window     scaleWindow `json:"window"`
}

// scaleCreate is how a batch of creates went.
type scaleCreate struct {
	Tasks   int     `json:"tasks"`
	Seconds float64 `json:"s"`
	PerS    float64 `json:"per_s"`
	// Retries are creates answered 429 or 503 (or not answered) and sent
	// again.
	Retries int64 `json:"retries"`
}

// scaleBacklog is one backlog size.
type scaleBacklog struct {
	Tasks             int         `json:"tasks"`
	Share             int         `json:"share"`
	SimDelayS         float64     `json:"sim_delay_s"`
	WorkerConcurrency int         `json:"worker_concurrency"`
	Create            scaleCreate `json:"create"`
	Window            scaleWindow `json:"window"`
	// Asynq's counts over the queues at the window's end.
	AsynqPending   int `json:"asynq_pending"`
	AsynqActive    int `json:"asynq_active"`
	AsynqScheduled int `json:"asynq_scheduled"`
	AsynqRetry     int `json:"asynq_retry"`
	// OtherStartS is the time from the other account's create to the
	// query seeing it processing (absent: not within OtherTimeoutS);
	// OtherStatus the status last seen.
	OtherStartS   *float64 `json:"other_start_s,omitempty"`
	OtherStatus   string   `json:"other_status"`
	OtherTimeoutS float64  `json:"other_timeout_s"`
}

// scaleFairness is the fairness sub-part's figures.
type scaleFairness struct {
	Weights           []int   `json:"weights"`
	Share             int     `json:"share"`
	WorkerConcurrency int     `json:"worker_concurrency"`
	SimDelayS         float64 `json:"sim_delay_s"`
	WarmupS           float64 `json:"warmup_s"`
	WindowS           float64 `json:"window_s"`
	Backlogs          []int   `json:"backlogs"`
	// WeightError is the admin API's answer to the weight, if it refused
	// it (binaries without weights): the run goes on with weight 1.
	WeightError string      `json:"weight_error,omitempty"`
	Create      scaleCreate `json:"create"`
	// Per account, in Weights' order: completions in the window, and in
	// all by the window's end.
	Completed      []int     `json:"completed_window"`
	CompletedTotal []int     `json:"completed_total"`
	SharePct       []float64 `json:"share_pct"`
	TargetPct      []float64 `json:"target_pct"`
	// RanDry: an account had completed its whole backlog by the window's
	// end (its share then means nothing).
	RanDry       []bool  `json:"ran_dry"`
	RatePerS     float64 `json:"completions_per_s"`
	ExpectedPerS float64 `json:"expected_per_s"` // slots ÷ sim delay
	Met          bool    `json:"met"`
}

// scaleRequeue is the requeue sub-part's figures.
type scaleRequeue struct {
	Pending  int         `json:"pending"`
	Accounts int         `json:"accounts"`
	Create   scaleCreate `json:"create"`
	// AccountsS is the time to create the accounts and their keys.
	AccountsS float64 `json:"accounts_create_s"`
	// AsynqPending is the queues' pending count before the deletes.
	AsynqPending int `json:"asynq_pending"`
	// UsedMemory is used_memory with all of them pending; BytesPerTask its
	// growth over the creates, per task.
	UsedMemory   int64   `json:"redis_used_memory"`
	BytesPerTask float64 `json:"redis_bytes_per_task"`
	// Window: Redis's cost with them all pending, the queues paused (the
	// recovery's cost).
	Window   scaleWindow     `json:"window"`
	Samples  []requeueSample `json:"samples"`
	MaxS     *float64        `json:"max_s,omitempty"` // absent: a sample not back in TimeoutS
	TimeoutS float64         `json:"timeout_s"`
}

// notBack counts the samples not back in the queue.
func (r *scaleRequeue) notBack() int {
	n := 0
	for _, s := range r.Samples {
		if s.BackS == nil {
			n++
		}
	}
	return n
}

// requeueSample is one deleted job.
type requeueSample struct {
	TaskID string   `json:"task_id"`
	Queue  string   `json:"queue"`
	BackS  *float64 `json:"back_s,omitempty"`
}

// scaleBytes is the bytes sub-part's figures.
type scaleBytes struct {
	Tasks int `json:"tasks"`
	Share int `json:"share"` // EASEL_ACCOUNT_MAX_RUNNING (0: every task admitted)
	// Redis's memory before the creates, with the tasks pending, and after
	// they completed.
	Before    memPoint `json:"before"`
	Pending   memPoint `json:"pending"`
	Completed memPoint `json:"completed"`
	// used_memory's growth per task; and the same without the clients'
	// buffers (mem_clients_normal), which hold no task.
	PerPending            float64     `json:"bytes_per_pending_task"`
	PerCompleted          float64     `json:"bytes_per_completed_task"`
	PerPendingNoClients   float64     `json:"bytes_per_pending_task_without_client_buffers"`
	PerCompletedNoClients float64     `json:"bytes_per_completed_task_without_client_buffers"`
	Create                scaleCreate `json:"create"`
	DrainS                float64     `json:"drain_s"`
	CompletedTasks        int         `json:"completed_tasks"`
}

// memPoint is INFO memory (summed over the servers) and DBSIZE at one
// moment.
type memPoint struct {
	UsedMemory int64 `json:"used_memory"`
	Overhead   int64 `json:"used_memory_overhead"`
	Dataset    int64 `json:"used_memory_dataset"`
	Clients    int64 `json:"mem_clients_normal"`
	Scripts    int64 `json:"used_memory_scripts"`
	Keys       int64 `json:"keys"`
}

// perTask is the growth from a to b per task, of used_memory and of
// used_memory without the clients' buffers.
func perTask(a, b memPoint, n int) (all, noClients float64) {
	if n <= 0 {
		return math.NaN(), math.NaN()
	}
	return float64(b.UsedMemory-a.UsedMemory) / float64(n), float64((b.UsedMemory-b.Clients)-(a.UsedMemory-a.Clients)) / float64(n)
}

// readMemPoint reads INFO memory and DBSIZE, summed over the servers.
func readMemPoint(ctx context.Context, rdb redis.UniversalClient) (memPoint, error) {
	var p memPoint
	var mu sync.Mutex
	err := eachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("INFO memory on %s: %w", c.Options().Addr, err)
		}
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			return fmt.Errorf("DBSIZE on %s: %w", c.Options().Addr, err)
		}
		m := parseInfoInts(info)
		mu.Lock()
		defer mu.Unlock()
		p.UsedMemory += m["used_memory"]
		p.Overhead += m["used_memory_overhead"]
		p.Dataset += m["used_memory_dataset"]
		p.Clients += m["mem_clients_normal"]
		p.Scripts += m["used_memory_scripts"]
		p.Keys += n
		return nil
	})
	return p, err
}

// parseInfoInts reads the whole-number fields of an INFO section.
func parseInfoInts(info string) map[string]int64 {
	m := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

// scale runs the scale sub-parts.
func (e *env) scale(ctx context.Context, res *results) error {
	o := e.o
	parts, err := parseScaleParts(o.scaleParts)
	if err != nil {
		return err
	}
	sr := &scaleResult{WarmupS: o.scaleWarmup.Seconds(), MeasureS: o.scaleMeasure.Seconds(), Bin: o.binDir, LoadStart: loadAvg()}
	res.Scale = sr
	for _, p := range allScaleParts {
		if !parts[p] {
			continue
		}
		var err error
		switch p {
		case "idle":
			e.logf("scale idle: %v accounts, warm-up %s, measured %s", o.scaleAccounts, o.scaleWarmup, o.scaleMeasure)
			err = e.scaleIdle(ctx, sr)
		case "backlog":
			e.logf("scale backlog: %v tasks of one account over a share of %d, generations of %s", o.scaleBacklog, backlogShare, backlogSimDelay)
			err = e.scaleBacklog(ctx, sr)
		case "fairness":
			e.logf("scale fairness: weights 2/1/1, share %d, %d slots, generations of %s, window %s", fairShare, fairConcurrency, fairSimDelay, o.scaleFairWindow)
			err = e.scaleFairness(ctx, sr)
		case "requeue":
			e.logf("scale requeue: %d tasks pending over %d accounts", o.scaleRequeue, o.scaleRequeueAccounts)
			err = e.scaleRequeue(ctx, sr)
		case "progress":
			e.logf("scale progress: %d pro tasks at once, generations of %s", o.scaleProgress, 2*o.scaleProgressDelay)
			err = e.scaleProgressPart(ctx, sr)
		case "bytes":
			e.logf("scale bytes: %d tasks", o.scaleBytes)
			err = e.scaleBytesPart(ctx, sr)
		}
		if err != nil {
			return fmt.Errorf("scale %s: %w", p, err)
		}
		sr.Parts = append(sr.Parts, p)
	}
	sr.LoadEnd = loadAvg()
	return nil
}

// scaleSvc is a gateway and a worker of the scale part.
type scaleSvc struct {
	gw, wk *proc
	base   string
	admin  *adminAPI
	client *http.Client
}

func (s *scaleSvc) stop() {
	if s.wk != nil {
		s.wk.kill()
	}
	if s.gw != nil {
		s.gw.stop()
	}
	s.client.CloseIdleConnections()
}

// pids are the services' processes, for CPU.
func (s *scaleSvc) pids() map[string]int {
	m := map[string]int{"gateway": s.gw.cmd.Process.Pid}
	if s.wk != nil {
		m["worker"] = s.wk.cmd.Process.Pid
	}
	return m
}

// startScale empties the Redis, pauses the queues if asked, and starts a
// gateway (with the admin API and gwEnv) and a worker (with wkEnv), each
// followed by --gateway-env and --worker-env.
func (e *env) startScale(ctx context.Context, pause bool, gwEnv, wkEnv []string) (*scaleSvc, error) {
	if err := flushAll(ctx, e.rdb); err != nil {
		return nil, err
	}
	if pause {
		if err := e.pauseQueues(true); err != nil {
			return nil, err
		}
	}
	conc := max(e.o.scaleConcurrency, 1)
	s := &scaleSvc{client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 2 * conc, MaxIdleConnsPerHost: 2 * conc, IdleConnTimeout: time.Minute}}}
	addr := freeAddr()
	env := append(e.serviceEnv(append([]string{"EASEL_HTTP_ADDR=" + addr, "EASEL_METRICS_ADDR=off", "EASEL_ADMIN_TOKEN=" + scaleAdminToken}, gwEnv...)...), e.o.gatewayEnv...)
	gw, err := startProc("gateway-scale", filepath.Join(e.o.binDir, "gateway"), nil, env, io.Discard)
	if err != nil {
		return nil, err
	}
	s.gw, s.base = gw, "http://"+addr
	if err := gw.waitReady(ctx, s.base+"/readyz"); err != nil {
		s.stop()
		return nil, fmt.Errorf("gateway not ready (its log: %s): %w", filepath.Join(logDir(), "gateway-scale.log"), err)
	}
	s.admin = &adminAPI{base: s.base, token: scaleAdminToken, client: s.client}
	waddr := freeAddr()
	wenv := append(e.serviceEnv(append([]string{"EASEL_WORKER_HTTP_ADDR=" + waddr}, wkEnv...)...), e.o.workerEnv...)
	wk, err := startProc("worker-scale", filepath.Join(e.o.binDir, "worker"), nil, wenv, io.Discard)
	if err != nil {
		s.stop()
		return nil, err
	}
	s.wk = wk
	if err := wk.waitReady(ctx, "http://"+waddr+"/readyz"); err != nil {
		s.stop()
		return nil, fmt.Errorf("worker not ready (its log: %s): %w", filepath.Join(logDir(), "worker-scale.log"), err)
	}
	return s, nil
}

// pauseQueues pauses (or resumes) Easel's image queues through Asynq's
// Inspector: a paused queue keeps its jobs and hands out none.
func (e *env) pauseQueues(pause bool) error {
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	for _, q := range jobs.Queues() {
		var err error
		if pause {
			err = insp.PauseQueue(q)
		} else {
			err = insp.UnpauseQueue(q)
		}
		if err != nil {
			return fmt.Errorf("pause %v queue %s: %w", pause, q, err)
		}
	}
	return nil
}

// checkAlive fails if a service has exited.
func (s *scaleSvc) checkAlive() error {
	for _, p := range []*proc{s.gw, s.wk} {
		if p == nil {
			continue
		}
		if ok, err := p.exited(); ok {
			return fmt.Errorf("%s exited (its log: %s): %v", p.name, filepath.Join(logDir(), p.name+".log"), err)
		}
	}
	return nil
}

// adminAPI calls the gateway's admin API.
type adminAPI struct {
	base, token string
	client      *http.Client
}

// apiError is an answer that was not a success.
type apiError struct {
	status     int
	retryAfter time.Duration
	body       string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

// retryable: refused for now (429, 503) or not answered.
func retryable(err error) (bool, time.Duration) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status == http.StatusTooManyRequests || ae.status == http.StatusServiceUnavailable, ae.retryAfter
	}
	return err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded), 0
}

// call sends one request and decodes its JSON answer into out (nil:
// ignored).
func call(ctx context.Context, client *http.Client, method, u, auth string, body []byte, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+auth)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		ae := &apiError{status: resp.StatusCode, body: strings.TrimSpace(string(b))}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			ae.retryAfter = time.Duration(s) * time.Second
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: %w: %s", method, u, err, b)
	}
	return nil
}

// callRetry is call, sent again while it is refused for now; it adds the
// retries to *retries (if not nil).
func callRetry(ctx context.Context, client *http.Client, method, u, auth string, body []byte, out any, retries *atomic.Int64) error {
	for attempt := 1; ; attempt++ {
		err := call(ctx, client, method, u, auth, body, out)
		again, after := retryable(err)
		if err == nil || !again || attempt >= scaleMaxCreateAttempts || ctx.Err() != nil {
			return err
		}
		if retries != nil {
			retries.Add(1)
		}
		wait := min(max(after, 100*time.Millisecond), time.Second)
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
}

// envelope is the API's answer envelope: {"code":200,"msg":"success","data":...}.
type envelope[T any] struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
	Data T      `json:"data"`
}

func (a *adminAPI) do(ctx context.Context, method, path string, body any, out any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	return callRetry(ctx, a.client, method, a.base+"/admin/v1"+path, a.token, b, out, nil)
}

// createAccount makes an account nothing limits but maxInflight (0: the
// deployment's default) and its credits.
func (a *adminAPI) createAccount(ctx context.Context, name string, credits int64, maxInflight int) (string, error) {
	body := map[string]any{"name": name, "credits": credits, "rate_limit": 1_000_000, "query_rate_limit": 1_000_000}
	if maxInflight > 0 {
		body["max_inflight"] = maxInflight
	}
	var out envelope[struct {
		ID string `json:"id"`
	}]
	if err := a.do(ctx, http.MethodPost, "/accounts", body, &out); err != nil {
		return "", fmt.Errorf("create account %s: %w", name, err)
	}
	if out.Data.ID == "" {
		return "", fmt.Errorf("create account %s: no id in the answer", name)
	}
	return out.Data.ID, nil
}

// createKey makes an API key of an account.
func (a *adminAPI) createKey(ctx context.Context, id string) (string, error) {
	var out envelope[struct {
		Key string `json:"key"`
	}]
	if err := a.do(ctx, http.MethodPost, "/accounts/"+url.PathEscape(id)+"/keys", nil, &out); err != nil {
		return "", fmt.Errorf("key of %s: %w", id, err)
	}
	if out.Data.Key == "" {
		return "", fmt.Errorf("key of %s: no key in the answer", id)
	}
	return out.Data.Key, nil
}

// setWeight sets an account's weight (PATCH .../limits {"weight":w}).
func (a *adminAPI) setWeight(ctx context.Context, id string, w int) error {
	return a.do(ctx, http.MethodPatch, "/accounts/"+url.PathEscape(id)+"/limits", map[string]any{"weight": w}, nil)
}

// benchAccount is an account made through the admin API, and its keys.
type benchAccount struct {
	id   string
	keys []string
}

// createAccounts makes n accounts with keys keys each, conc requests at
// once, and says how long it took.
func createAccounts(ctx context.Context, a *adminAPI, prefix string, n, keys, conc int, credits int64, maxInflight int) ([]benchAccount, time.Duration, error) {
	out := make([]benchAccount, n)
	t0 := time.Now()
	err := parallel(ctx, n, conc, func(ctx context.Context, i int) error {
		id, err := a.createAccount(ctx, fmt.Sprintf("%s-%d", prefix, i), credits, maxInflight)
		if err != nil {
			return err
		}
		out[i].id = id
		for k := 0; k < keys; k++ {
			key, err := a.createKey(ctx, id)
			if err != nil {
				return err
			}
			out[i].keys = append(out[i].keys, key)
		}
		return nil
	})
	return out, time.Since(t0), err
}

// parallel runs fn for 0..n-1, conc at once, and returns the first error
// (the rest are then cancelled).
func parallel(ctx context.Context, n, conc int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for w := 0; w < min(max(conc, 1), max(n, 1)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		// The parent's cancellation.
		return context.Cause(ctx)
	}
	return first
}

// interleave returns the order of creates for counts[i] tasks of key i:
// round robin over the keys that have some left, so every backlog grows
// together.
func interleave(counts []int) []int32 {
	total := 0
	for _, c := range counts {
		total += c
	}
	out := make([]int32, 0, total)
	left := slices.Clone(counts)
	for len(out) < total {
		for i := range left {
			if left[i] > 0 {
				out = append(out, int32(i))
				left[i]--
			}
		}
	}
	return out
}

// createScaleTasks creates counts[i] tasks with keys[i] through the gateway,
// interleaved, conc at once, logging progress; a create refused for now is
// sent again.
func (e *env) createScaleTasks(ctx context.Context, s *scaleSvc, keys []string, counts []int) (scaleCreate, error) {
	order := interleave(counts)
	var done, retries atomic.Int64
	stopLog := make(chan struct{})
	var logged sync.WaitGroup
	t0 := time.Now()
	if len(order) >= 20000 {
		logged.Add(1)
		go func() {
			defer logged.Done()
			t := time.NewTicker(scaleProgressEvery)
			defer t.Stop()
			for {
				select {
				case <-stopLog:
					return
				case <-t.C:
					n := done.Load()
					e.logf("  created %d of %d (%.0f/s), %d retries", n, len(order), float64(n)/time.Since(t0).Seconds(), retries.Load())
				}
			}
		}()
	}
	err := parallel(ctx, len(order), e.o.scaleConcurrency, func(ctx context.Context, i int) error {
		var out envelope[struct {
			TaskID string `json:"task_id"`
		}]
		if err := callRetry(ctx, s.client, http.MethodPost, s.base+"/v1/task/create", keys[order[i]], scaleBody, &out, &retries); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if out.Data.TaskID == "" {
			return errors.New("create: no task id in the answer")
		}
		done.Add(1)
		return nil
	})
	close(stopLog)
	logged.Wait()
	d := time.Since(t0)
	c := scaleCreate{Tasks: int(done.Load()), Seconds: d.Seconds(), Retries: retries.Load()}
	if d > 0 {
		c.PerS = float64(c.Tasks) / d.Seconds()
	}
	return c, err
}

// createOne creates one task and returns its id.
func createOne(ctx context.Context, s *scaleSvc, key string, body []byte) (string, error) {
	var out envelope[struct {
		TaskID string `json:"task_id"`
	}]
	if err := callRetry(ctx, s.client, http.MethodPost, s.base+"/v1/task/create", key, body, &out, nil); err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	if out.Data.TaskID == "" {
		return "", errors.New("create: no task id in the answer")
	}
	return out.Data.TaskID, nil
}

// taskRecord is what the benchmark reads of a task's public record.
type taskRecord struct {
	TaskID       string `json:"task_id"`
	Status       string `json:"status"`
	CompleteTime int64  `json:"complete_time"`
}

// queryStatus reads a task's status (GET /v1/task/query): the record is
// the answer itself, or its data in the envelope.
func queryStatus(ctx context.Context, s *scaleSvc, key, id string) (string, error) {
	var out struct {
		taskRecord
		Data *taskRecord `json:"data"`
	}
	if err := callRetry(ctx, s.client, http.MethodGet, s.base+"/v1/task/query?task_id="+url.QueryEscape(id), key, nil, &out, nil); err != nil {
		return "", err
	}
	if out.Data != nil && out.Data.Status != "" {
		return out.Data.Status, nil
	}
	return out.Status, nil
}

// listCompleted calls fn with each of an account's completed tasks (GET
// /v1/task/list?status=completed, every page).
func listCompleted(ctx context.Context, s *scaleSvc, key string, fn func(taskRecord)) error {
	cursor := ""
	for {
		q := url.Values{"status": {"completed"}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Tasks      []taskRecord `json:"tasks"`
			NextCursor string       `json:"next_cursor"`
			Data       *struct {
				Tasks      []taskRecord `json:"tasks"`
				NextCursor string       `json:"next_cursor"`
			} `json:"data"`
		}
		if err := callRetry(ctx, s.client, http.MethodGet, s.base+"/v1/task/list?"+q.Encode(), key, nil, &page, nil); err != nil {
			return fmt.Errorf("list: %w", err)
		}
		tasks, next := page.Tasks, page.NextCursor
		if page.Data != nil {
			tasks, next = page.Data.Tasks, page.Data.NextCursor
		}
		for _, t := range tasks {
			fn(t)
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
}

// redisCounters are what INFO commandstats and INFO cpu say, summed over
// the servers.
type redisCounters struct {
	calls   map[string]int64 // by command
	total   int64
	cpu     float64 // seconds, used_cpu_user + used_cpu_sys
	servers int
}

// parseCommandStats reads INFO commandstats: cmdstat_<name>:calls=N,...
func parseCommandStats(info string, into map[string]int64) (total int64) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					into[name] += n
					total += n
				}
			}
		}
	}
	return total
}

// parseCPU reads INFO cpu: used_cpu_user + used_cpu_sys, in seconds (the
// children's, a save's fork, are left out).
func parseCPU(info string) float64 {
	var s float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err == nil {
					s += f
				}
			}
		}
	}
	return s
}

func readRedisCounters(ctx context.Context, rdb redis.UniversalClient) (redisCounters, error) {
	c := redisCounters{calls: map[string]int64{}}
	var mu sync.Mutex
	err := eachServer(ctx, rdb, func(ctx context.Context, cl *redis.Client) error {
		cpu, err := cl.Info(ctx, "cpu").Result()
		if err != nil {
			return fmt.Errorf("INFO cpu on %s: %w", cl.Options().Addr, err)
		}
		stats, err := cl.Info(ctx, "commandstats").Result()
		if err != nil {
			return fmt.Errorf("INFO commandstats on %s: %w", cl.Options().Addr, err)
		}
		mu.Lock()
		defer mu.Unlock()
		c.total += parseCommandStats(stats, c.calls)
		c.cpu += parseCPU(cpu)
		c.servers++
		return nil
	})
	return c, err
}

// dbSize is DBSIZE, summed over the servers.
func dbSize(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	var total atomic.Int64
	err := eachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			return fmt.Errorf("DBSIZE on %s: %w", c.Options().Addr, err)
		}
		total.Add(n)
		return nil
	})
	return total.Load(), err
}

// topCommands are the n commands with the most calls between a and b.
func topCommands(a, b map[string]int64, n int) map[string]int64 {
	type kv struct {
		k string
		v int64
	}
	var all []kv
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			all = append(all, kv{k, d})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	out := map[string]int64{}
	for i := 0; i < len(all) && i < n; i++ {
		out[all[i].k] = all[i].v
	}
	return out
}

// measure reads Redis's counters and the services' CPU over d.
func (e *env) measure(ctx context.Context, s *scaleSvc, d time.Duration) (scaleWindow, error) {
	var w scaleWindow
	pids := s.pids()
	cpu0 := map[string]time.Duration{}
	for name, pid := range pids {
		cpu0[name], _ = cpuTime(pid)
	}
	a, err := readRedisCounters(ctx, e.rdb)
	if err != nil {
		return w, err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return w, err
	}
	b, err := readRedisCounters(ctx, e.rdb)
	if err != nil {
		return w, err
	}
	el := time.Since(t0)
	cpu1 := map[string]time.Duration{}
	for name, pid := range pids {
		cpu1[name], _ = cpuTime(pid)
	}
	w.Seconds = el.Seconds()
	// Between the two reads of commandstats each server counted one of
	// the benchmark's own: the first read's INFO commandstats (a command
	// is counted once it has run), and the second's INFO cpu.
	own := int64(2 * b.servers)
	w.Commands = max(b.total-a.total-own, 0)
	w.CommandsPerS = float64(w.Commands) / w.Seconds
	b.calls["info"] -= own
	w.TopCommands = topCommands(a.calls, b.calls, 8)
	w.RedisCPUPct = (b.cpu - a.cpu) / w.Seconds * 100
	w.WorkerCPUPct = (cpu1["worker"] - cpu0["worker"]).Seconds() / w.Seconds * 100
	w.GatewayCPUPct = (cpu1["gateway"] - cpu0["gateway"]).Seconds() / w.Seconds * 100
	if w.UsedMemory, err = usedMemory(ctx, e.rdb); err != nil {
		return w, err
	}
	if w.Keys, err = dbSize(ctx, e.rdb); err != nil {
		return w, err
	}
	if s.wk != nil {
		rss, _ := memStatus(s.wk.cmd.Process.Pid)
		w.WorkerRSSMB = zeroNaN(rss)
	}
	w.LoadAvg = loadAvg()
	return w, s.checkAlive()
}

func (w scaleWindow) String() string {
	return fmt.Sprintf("%.1f Redis commands/s, Redis %.1f %%, worker %.1f %%, gateway %.1f %% CPU; %d keys, used_memory %.1f MB; top %s",
		w.CommandsPerS, w.RedisCPUPct, w.WorkerCPUPct, w.GatewayCPUPct, w.Keys, float64(w.UsedMemory)/1e6, fmtTop(w.TopCommands, w.Seconds))
}

// fmtTop formats the top commands as calls per second, most first.
func fmtTop(m map[string]int64, secs float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.1f/s", k, float64(m[k])/secs)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// scaleIdle: one gateway and one worker with nothing to do, at each number
// of accounts.
func (e *env) scaleIdle(ctx context.Context, sr *scaleResult) error {
	o := e.o
	s, err := e.startScale(ctx, false, nil, nil)
	if err != nil {
		return err
	}
	defer s.stop()
	have := 0
	for _, n := range o.scaleAccounts {
		lvl := scaleIdle{Accounts: n, Added: n - have}
		if lvl.Added > 0 {
			before, err := readMemPoint(ctx, e.rdb)
			if err != nil {
				return err
			}
			_, d, err := createAccounts(ctx, s.admin, fmt.Sprintf("idle%d", n), lvl.Added, 0, o.scaleConcurrency, 1000, 0)
			if err != nil {
				return err
			}
			after, err := readMemPoint(ctx, e.rdb)
			if err != nil {
				return err
			}
			lvl.CreateS = d.Seconds()
			lvl.CreatePerS = float64(lvl.Added) / d.Seconds()
			_, lvl.PerAccount = perTask(before, after, lvl.Added)
		}
		have = n
		e.logf("  %d accounts (%d created in %.1f s, %.0f/s, %.0f B of Redis each); warm-up %s", n, lvl.Added, lvl.CreateS, lvl.CreatePerS, lvl.PerAccount, o.scaleWarmup)
		if err := sleepCtx(ctx, o.scaleWarmup); err != nil {
			return err
		}
		if lvl.Window, err = e.measure(ctx, s, o.scaleMeasure); err != nil {
			return err
		}
		e.logf("  %d accounts: %s", n, lvl.Window)
		sr.Idle = append(sr.Idle, lvl)
	}
	return nil
}

// scaleBacklog: one account's backlog of N tasks over its share.
func (e *env) scaleBacklog(ctx context.Context, sr *scaleResult) error {
	for _, n := range e.o.scaleBacklog {
		b, err := e.scaleBacklogOne(ctx, n)
		if err != nil {
			return fmt.Errorf("%d tasks: %w", n, err)
		}
		sr.Backlog = append(sr.Backlog, b)
	}
	return nil
}

func (e *env) scaleBacklogOne(ctx context.Context, n int) (scaleBacklog, error) {
	o := e.o
	b := scaleBacklog{Tasks: n, Share: backlogShare, SimDelayS: backlogSimDelay.Seconds(), WorkerConcurrency: backlogConcurrency, OtherTimeoutS: backlogProbeTimeout.Seconds()}
	share := "EASEL_ACCOUNT_MAX_RUNNING=" + strconv.Itoa(backlogShare)
	s, err := e.startScale(ctx, false, []string{share},
		[]string{share, "EASEL_SIM_DELAY=" + backlogSimDelay.String(), "EASEL_WORKER_CONCURRENCY=" + strconv.Itoa(backlogConcurrency)})
	if err != nil {
		return b, err
	}
	defer s.stop()
	accts, _, err := createAccounts(ctx, s.admin, "backlog", 2, 4, 2, 1_000_000_000_000, 1_000_000)
	if err != nil {
		return b, err
	}
	a, other := accts[0], accts[1]
	counts := make([]int, len(a.keys))
	for i := range counts {
		counts[i] = n / len(counts)
		if i < n%len(counts) {
			counts[i]++
		}
	}
	if b.Create, err = e.createScaleTasks(ctx, s, a.keys, counts); err != nil {
		return b, err
	}
	e.logf("  %d tasks created in %.1f s (%.0f/s, %d retries); warm-up %s", b.Create.Tasks, b.Create.Seconds, b.Create.PerS, b.Create.Retries, o.scaleWarmup)
	if err := sleepCtx(ctx, o.scaleWarmup); err != nil {
		return b, err
	}
	if b.Window, err = e.measure(ctx, s, o.scaleMeasure); err != nil {
		return b, err
	}
	e.logf("  backlog %d: %s", n, b.Window)
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	for _, q := range jobs.Queues() {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			continue // a queue never used
		}
		b.AsynqPending += info.Pending
		b.AsynqActive += info.Active
		b.AsynqScheduled += info.Scheduled
		b.AsynqRetry += info.Retry
	}
	e.logf("  Asynq: %d pending, %d active, %d scheduled, %d retry", b.AsynqPending, b.AsynqActive, b.AsynqScheduled, b.AsynqRetry)

	// The other account's task.
	t0 := time.Now()
	id, err := createOne(ctx, s, other.keys[0], scaleBody)
	if err != nil {
		return b, fmt.Errorf("the other account's task: %w", err)
	}
	for {
		st, err := queryStatus(ctx, s, other.keys[0], id)
		if err != nil {
			return b, fmt.Errorf("the other account's task: %w", err)
		}
		b.OtherStatus = st
		if st != "pending" {
			if st == "failed" || st == "canceled" {
				return b, fmt.Errorf("the other account's task %s is %s", id, st)
			}
			b.OtherStartS = ptr(time.Since(t0).Seconds())
			break
		}
		if time.Since(t0) > backlogProbeTimeout {
			break
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return b, err
		}
	}
	if b.OtherStartS != nil {
		e.logf("  the other account's task: %s after %.2f s", b.OtherStatus, *b.OtherStartS)
	} else {
		e.logf("  the other account's task: still %s after %s", b.OtherStatus, backlogProbeTimeout)
	}
	return b, nil
}

// fairBacklogs sizes the fairness backlogs: each account's share of what
// the slots complete in the warm-up and the window, half as much again,
// at least fairMinBacklog.
func fairBacklogs(weights []int, slots int, delay, warm, window time.Duration) []int {
	total := 0
	for _, w := range weights {
		total += w
	}
	rate := float64(slots) / delay.Seconds()
	out := make([]int, len(weights))
	for i, w := range weights {
		out[i] = max(fairMinBacklog, int(math.Ceil(1.5*rate*(warm+window).Seconds()*float64(w)/float64(total))))
	}
	return out
}

// fairShares computes the shares of completions in percent, the targets
// (weights), and whether each share is within fairTolerance of its target.
func fairShares(completed, weights []int) (share, target []float64, ok bool) {
	var n, wsum int
	for i := range completed {
		n += completed[i]
		wsum += weights[i]
	}
	ok = n > 0
	for i := range completed {
		t := 100 * float64(weights[i]) / float64(wsum)
		sh := 0.0
		if n > 0 {
			sh = 100 * float64(completed[i]) / float64(n)
		}
		share, target = append(share, sh), append(target, t)
		if math.Abs(sh-t) > fairTolerance*t+1e-9 {
			ok = false
		}
	}
	return share, target, ok
}

// scaleFairness: three accounts of weights 2, 1, 1 contending for too few
// slots.
func (e *env) scaleFairness(ctx context.Context, sr *scaleResult) error {
	o := e.o
	f := &scaleFairness{Weights: []int{2, 1, 1}, Share: fairShare, WorkerConcurrency: fairConcurrency, SimDelayS: fairSimDelay.Seconds(),
		WarmupS: o.scaleWarmup.Seconds(), WindowS: o.scaleFairWindow.Seconds()}
	f.Backlogs = fairBacklogs(f.Weights, fairConcurrency, fairSimDelay, o.scaleWarmup, o.scaleFairWindow)
	share := "EASEL_ACCOUNT_MAX_RUNNING=" + strconv.Itoa(fairShare)
	s, err := e.startScale(ctx, true, []string{share},
		[]string{share, "EASEL_SIM_DELAY=" + fairSimDelay.String(), "EASEL_WORKER_CONCURRENCY=" + strconv.Itoa(fairConcurrency)})
	if err != nil {
		return err
	}
	defer s.stop()
	accts, _, err := createAccounts(ctx, s.admin, "fair", len(f.Weights), 1, len(f.Weights), 1_000_000_000_000, 1_000_000)
	if err != nil {
		return err
	}
	for i, w := range f.Weights {
		if w == 1 {
			continue
		}
		if err := s.admin.setWeight(ctx, accts[i].id, w); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest {
				return fmt.Errorf("weight: %w", err)
			}
			f.WeightError = err.Error()
			e.logf("  the admin API refused the weight (binaries without weights?): %v; going on with weight 1", err)
		}
	}
	keys := make([]string, len(accts))
	for i, a := range accts {
		keys[i] = a.keys[0]
	}
	if f.Create, err = e.createScaleTasks(ctx, s, keys, f.Backlogs); err != nil {
		return err
	}
	e.logf("  backlogs %v created in %.1f s; the queues resumed, warm-up %s, window %s", f.Backlogs, f.Create.Seconds, o.scaleWarmup, o.scaleFairWindow)
	if err := e.pauseQueues(false); err != nil {
		return err
	}
	t0 := time.Now()
	from := t0.Add(o.scaleWarmup)
	to := from.Add(o.scaleFairWindow)
	if err := sleepCtx(ctx, time.Until(to)+time.Second); err != nil {
		return err
	}
	if err := s.checkAlive(); err != nil {
		return err
	}
	// Nothing more is counted: stop the worker before reading.
	s.wk.kill()
	f.Completed = make([]int, len(accts))
	f.CompletedTotal = make([]int, len(accts))
	for i, a := range accts {
		err := listCompleted(ctx, s, a.keys[0], func(t taskRecord) {
			f.CompletedTotal[i]++
			if ct := t.CompleteTime; ct >= from.UnixMilli() && ct < to.UnixMilli() {
				f.Completed[i]++
			}
		})
		if err != nil {
			return err
		}
	}
	n := 0
	for i := range accts {
		n += f.Completed[i]
		f.RanDry = append(f.RanDry, f.CompletedTotal[i] >= f.Backlogs[i])
	}
	f.RatePerS = float64(n) / o.scaleFairWindow.Seconds()
	f.ExpectedPerS = float64(fairConcurrency) / fairSimDelay.Seconds()
	f.SharePct, f.TargetPct, f.Met = fairShares(f.Completed, f.Weights)
	if slices.Contains(f.RanDry, true) {
		f.Met = false
	}
	e.logf("  completed in the window %v (shares %s %% against %s %%), %.1f/s (slots ÷ sim delay: %.1f/s); in all %v, ran dry %v",
		f.Completed, fmtPcts(f.SharePct), fmtPcts(f.TargetPct), f.RatePerS, f.ExpectedPerS, f.CompletedTotal, f.RanDry)
	sr.Fairness = f
	return nil
}

func fmtPcts(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, " / ")
}

// scaleRequeue: a job deleted from its queue among many pending, the time
// until the recovery queues it again.
func (e *env) scaleRequeue(ctx context.Context, sr *scaleResult) error {
	o := e.o
	r := &scaleRequeue{Pending: int(o.scaleRequeue), Accounts: o.scaleRequeueAccounts, TimeoutS: requeueTimeout.Seconds()}
	all := "EASEL_ACCOUNT_MAX_RUNNING=0"
	s, err := e.startScale(ctx, true, []string{all, "EASEL_TASK_DEADLINE=" + requeueDeadline}, []string{all})
	if err != nil {
		return err
	}
	defer s.stop()
	t0 := time.Now()
	accts, _, err := createAccounts(ctx, s.admin, "requeue", r.Accounts, 1, o.scaleConcurrency, 1_000_000_000_000, 1_000_000)
	if err != nil {
		return err
	}
	r.AccountsS = time.Since(t0).Seconds()
	before, err := usedMemory(ctx, e.rdb)
	if err != nil {
		return err
	}
	keys := make([]string, len(accts))
	counts := make([]int, len(accts))
	for i, a := range accts {
		keys[i] = a.keys[0]
		counts[i] = r.Pending / r.Accounts
		if i < r.Pending%r.Accounts {
			counts[i]++
		}
	}
	e.logf("  %d accounts made in %.1f s; creating %d tasks", len(accts), r.AccountsS, r.Pending)
	if r.Create, err = e.createScaleTasks(ctx, s, keys, counts); err != nil {
		return err
	}
	e.logf("  %d tasks created in %.1f s (%.0f/s, %d retries); warm-up %s", r.Create.Tasks, r.Create.Seconds, r.Create.PerS, r.Create.Retries, o.scaleWarmup)
	if err := sleepCtx(ctx, o.scaleWarmup); err != nil {
		return err
	}
	if r.Window, err = e.measure(ctx, s, o.scaleMeasure); err != nil {
		return err
	}
	r.UsedMemory = r.Window.UsedMemory
	r.BytesPerTask = float64(r.UsedMemory-before) / float64(max(r.Create.Tasks, 1))
	e.logf("  %d pending: %s; %.0f B per task", r.Pending, r.Window, r.BytesPerTask)

	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	queue := jobs.Queues()[0]
	for _, q := range jobs.Queues() {
		if info, err := insp.GetQueueInfo(q); err == nil {
			r.AsynqPending += info.Pending
			if info.Pending > 0 {
				queue = q
			}
		}
	}
	// The samples, spread over the pending list.
	k := max(o.scaleRequeueSamples, 1)
	for i := 0; i < k; i++ {
		pos := (r.AsynqPending * (2*i + 1)) / (2 * k)
		list, err := insp.ListPendingTasks(queue, asynq.PageSize(1), asynq.Page(pos+1))
		if err != nil {
			return fmt.Errorf("pending job %d of %s: %w", pos, queue, err)
		}
		if len(list) == 0 {
			return fmt.Errorf("no pending job at %d of %s (%d pending)", pos, queue, r.AsynqPending)
		}
		r.Samples = append(r.Samples, requeueSample{TaskID: list[0].ID, Queue: queue})
	}
	start := time.Now()
	for _, smp := range r.Samples {
		if err := insp.DeleteTask(smp.Queue, smp.TaskID); err != nil {
			return fmt.Errorf("delete job %s: %w", smp.TaskID, err)
		}
	}
	e.logf("  %d jobs deleted from %s (%d pending); waiting for them to be queued again", len(r.Samples), queue, r.AsynqPending)
	left := len(r.Samples)
	for left > 0 && time.Since(start) < requeueTimeout {
		if err := sleepCtx(ctx, requeuePoll); err != nil {
			return err
		}
		for i := range r.Samples {
			smp := &r.Samples[i]
			if smp.BackS != nil {
				continue
			}
			_, err := insp.GetTaskInfo(smp.Queue, smp.TaskID)
			if err == nil {
				smp.BackS = ptr(time.Since(start).Seconds())
				left--
				e.logf("  %s back after %.1f s", smp.TaskID, *smp.BackS)
				continue
			}
			if !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
				return fmt.Errorf("job %s: %w", smp.TaskID, err)
			}
		}
		if err := s.checkAlive(); err != nil {
			return err
		}
	}
	if left == 0 {
		var m float64
		for _, smp := range r.Samples {
			m = max(m, *smp.BackS)
		}
		r.MaxS = ptr(m)
	}
	if r.MaxS != nil {
		e.logf("  requeued: all %d back, the last after %.1f s", len(r.Samples), *r.MaxS)
	} else {
		e.logf("  requeued: %d of %d back within %s", len(r.Samples)-left, len(r.Samples), requeueTimeout)
	}
	sr.Requeue = r
	return nil
}

// scaleBytesPart: Redis memory per task pending and completed.
func (e *env) scaleBytesPart(ctx context.Context, sr *scaleResult) error {
	o := e.o
	b := &scaleBytes{Tasks: int(o.scaleBytes), Share: o.scaleBytesShare}
	share := "EASEL_ACCOUNT_MAX_RUNNING=" + strconv.Itoa(b.Share)
	s, err := e.startScale(ctx, true, []string{share}, []string{share, "EASEL_SIM_DELAY=0"})
	if err != nil {
		return err
	}
	defer s.stop()
	accts, _, err := createAccounts(ctx, s.admin, "bytes", 1, 4, 1, 1_000_000_000_000, 1_000_000)
	if err != nil {
		return err
	}
	a := accts[0]
	read := func() (memPoint, error) {
		if err := sleepCtx(ctx, scaleBytesSettle); err != nil {
			return memPoint{}, err
		}
		return readMemPoint(ctx, e.rdb)
	}
	if b.Before, err = read(); err != nil {
		return err
	}
	counts := make([]int, len(a.keys))
	for i := range counts {
		counts[i] = b.Tasks / len(counts)
		if i < b.Tasks%len(counts) {
			counts[i]++
		}
	}
	if b.Create, err = e.createScaleTasks(ctx, s, a.keys, counts); err != nil {
		return err
	}
	if b.Pending, err = read(); err != nil {
		return err
	}
	b.PerPending, b.PerPendingNoClients = perTask(b.Before, b.Pending, b.Tasks)
	e.logf("  %d tasks pending: used_memory %d → %d (%.0f B per task; %.0f B without the clients' buffers), keys %d → %d; the queues resumed",
		b.Tasks, b.Before.UsedMemory, b.Pending.UsedMemory, b.PerPending, b.PerPendingNoClients, b.Before.Keys, b.Pending.Keys)
	if err := e.pauseQueues(false); err != nil {
		return err
	}
	t0 := time.Now()
	timeout := max(time.Minute, time.Duration(b.Tasks)*scaleBytesDrainTimeoutPer)
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	for {
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
		if err := s.checkAlive(); err != nil {
			return err
		}
		if time.Since(t0) > timeout {
			return fmt.Errorf("%d of %d tasks completed after %s", b.CompletedTasks, b.Tasks, timeout)
		}
		// The queues empty (nothing pending, running or to retry), then
		// every task completed, as the list says.
		if queuedJobs(insp) > 0 {
			continue
		}
		n := 0
		if err := listCompleted(ctx, s, a.keys[0], func(taskRecord) { n++ }); err != nil {
			return err
		}
		b.CompletedTasks = n
		if n >= b.Tasks {
			break
		}
	}
	b.DrainS = time.Since(t0).Seconds()
	if b.Completed, err = read(); err != nil {
		return err
	}
	b.PerCompleted, b.PerCompletedNoClients = perTask(b.Before, b.Completed, b.Tasks)
	e.logf("  %d tasks completed in %.1f s: used_memory %d (%.0f B per task; %.0f B without the clients' buffers), keys %d",
		b.Tasks, b.DrainS, b.Completed.UsedMemory, b.PerCompleted, b.PerCompletedNoClients, b.Completed.Keys)
	sr.Bytes = b
	return nil
}

// rows adds the scale figures to the results table; one "not run" row if
// the part did not run.
func (r *scaleResult) rows(w io.Writer) {
	if r == nil {
		fmt.Fprintf(w, "scale: background work at scale (--only scale)\t%s\t\t\t\t%s\t\n", notRun, notRun)
		return
	}
	for _, l := range r.Idle {
		target, ok := "", ""
		if l.Accounts >= idleTargetFrom {
			target, ok = fmt.Sprintf("<= %d /s", idleTargetCmds), yes(l.Window.CommandsPerS <= idleTargetCmds)
		}
		fmt.Fprintf(w, "scale idle, %d accounts: Redis commands/s\t%.1f /s\t\t\t%s\t%s\t\n", l.Accounts, l.Window.CommandsPerS, target, ok)
		fmt.Fprintf(w, "scale idle, %d accounts: Redis / worker / gateway CPU\t%.1f / %.1f / %.1f %%\t\t\t\t\t\n", l.Accounts, l.Window.RedisCPUPct, l.Window.WorkerCPUPct, l.Window.GatewayCPUPct)
		if l.Added >= idleBytesMinAdded {
			target, ok = "", ""
			if l.Accounts >= idleBytesFrom {
				target, ok = fmt.Sprintf("<= %d B", idleTargetBytes), yes(l.PerAccount <= idleTargetBytes)
			}
			fmt.Fprintf(w, "scale idle, %d accounts: Redis memory per account (%d added)\t%.0f B\t\t\t%s\t%s\t\n", l.Accounts, l.Added, l.PerAccount, target, ok)
		}
	}
	for _, b := range r.Backlog {
		name := fmt.Sprintf("scale backlog, %d tasks (share %d)", b.Tasks, b.Share)
		if b.Tasks < backlogBigFrom {
			fmt.Fprintf(w, "%s: Redis commands/s\t%.1f /s\t\t\t<= %d /s\t%s\t\n", name, b.Window.CommandsPerS, backlogTargetCmds, yes(b.Window.CommandsPerS <= backlogTargetCmds))
			fmt.Fprintf(w, "%s: worker CPU\t%.1f %%\t\t\t<= %d %%\t%s\t\n", name, b.Window.WorkerCPUPct, backlogTargetWorkerPct, yes(b.Window.WorkerCPUPct <= backlogTargetWorkerPct))
			fmt.Fprintf(w, "%s: Redis CPU\t%.1f %%\t\t\t\t\t\n", name, b.Window.RedisCPUPct)
		} else {
			fmt.Fprintf(w, "%s: Redis commands/s\t%.1f /s\t\t\t\t\t\n", name, b.Window.CommandsPerS)
			fmt.Fprintf(w, "%s: worker CPU\t%.1f %%\t\t\t<= %d %%\t%s\t\n", name, b.Window.WorkerCPUPct, backlogBigTargetPct, yes(b.Window.WorkerCPUPct <= backlogBigTargetPct))
			fmt.Fprintf(w, "%s: Redis CPU\t%.1f %%\t\t\t<= %d %%\t%s\t\n", name, b.Window.RedisCPUPct, backlogBigTargetPct, yes(b.Window.RedisCPUPct <= backlogBigTargetPct))
		}
		probe, probeOK := fmt.Sprintf("not in %.0f s (%s)", b.OtherTimeoutS, b.OtherStatus), "NO"
		if b.OtherStartS != nil {
			probe, probeOK = fmt.Sprintf("%.2f s", *b.OtherStartS), yes(*b.OtherStartS <= backlogTargetProbe.Seconds())
		}
		fmt.Fprintf(w, "%s: another account's task, create → processing\t%s\t\t\t<= %.0f s\t%s\t\n", name, probe, backlogTargetProbe.Seconds(), probeOK)
	}
	if f := r.Fairness; f != nil {
		ws := make([]string, len(f.Weights))
		for i, x := range f.Weights {
			ws[i] = strconv.Itoa(x)
		}
		note := ""
		if f.WeightError != "" {
			note = " (weights refused)"
		}
		fmt.Fprintf(w, "scale fairness, weights %s: shares of completions%s\t%s %%\t\t\t%s %% ±%.0f %%\t%s\t\n",
			strings.Join(ws, "/"), note, fmtPcts(f.SharePct), fmtPcts(f.TargetPct), fairTolerance*100, yes(f.Met))
	}
	if q := r.Requeue; q != nil {
		back, ok := fmt.Sprintf("%d of %d not back in %.0f s", q.notBack(), len(q.Samples), q.TimeoutS), "NO"
		if q.MaxS != nil {
			back, ok = fmt.Sprintf("%.1f s (max of %d)", *q.MaxS, len(q.Samples)), yes(*q.MaxS <= requeueTarget.Seconds())
		}
		fmt.Fprintf(w, "scale requeue, %d pending: deleted job back in its queue\t%s\t\t\t<= %.0f s\t%s\t\n", q.Pending, back, requeueTarget.Seconds(), ok)
		fmt.Fprintf(w, "scale requeue, %d pending: Redis commands/s, Redis / worker CPU\t%.1f /s, %.1f / %.1f %%\t\t\t\t\t\n", q.Pending, q.Window.CommandsPerS, q.Window.RedisCPUPct, q.Window.WorkerCPUPct)
	}
	r.Progress.rows(w)
	if b := r.Bytes; b != nil {
		fmt.Fprintf(w, "scale bytes, %d tasks: Redis memory per pending task\t%.0f B\t\t\t<= %d B\t%s\t\n", b.Tasks, b.PerPending, bytesTargetPending, yes(b.PerPending <= bytesTargetPending))
		fmt.Fprintf(w, "scale bytes, %d tasks: Redis memory per completed task\t%.0f B\t\t\t<= %d B\t%s\t\n", b.Tasks, b.PerCompleted, bytesTargetCompleted, yes(b.PerCompleted <= bytesTargetCompleted))
	}
}

// details is the scale run's lines under the table.
func (r *scaleResult) details(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "scale: sub-parts %s, binaries %s, warm-up %gs, measured %gs; load average %s at the start, %s at the end\n",
		strings.Join(r.Parts, ","), r.Bin, r.WarmupS, r.MeasureS, r.LoadStart, r.LoadEnd)
	for _, l := range r.Idle {
		fmt.Fprintf(w, "scale idle, %d accounts (%d created in %.1f s, %.0f/s): %s\n", l.Accounts, l.Added, l.CreateS, l.CreatePerS, l.Window)
	}
	for _, b := range r.Backlog {
		fmt.Fprintf(w, "scale backlog, %d tasks (share %d, generations of %gs, worker concurrency %d; created in %.1f s, %.0f/s, %d retries): %s; worker RSS %.1f MB; Asynq %d pending, %d active, %d scheduled, %d retry\n",
			b.Tasks, b.Share, b.SimDelayS, b.WorkerConcurrency, b.Create.Seconds, b.Create.PerS, b.Create.Retries, b.Window, b.Window.WorkerRSSMB,
			b.AsynqPending, b.AsynqActive, b.AsynqScheduled, b.AsynqRetry)
	}
	if f := r.Fairness; f != nil {
		fmt.Fprintf(w, "scale fairness: share %d, %d slots, generations of %gs, backlogs %v, warm-up %gs, window %gs: completed %v in the window (%.1f/s; slots ÷ sim delay %.1f/s), %v in all, ran dry %v",
			f.Share, f.WorkerConcurrency, f.SimDelayS, f.Backlogs, f.WarmupS, f.WindowS, f.Completed, f.RatePerS, f.ExpectedPerS, f.CompletedTotal, f.RanDry)
		if f.WeightError != "" {
			fmt.Fprintf(w, "; weight refused: %s", f.WeightError)
		}
		fmt.Fprintln(w)
	}
	if q := r.Requeue; q != nil {
		var backs []string
		for _, s := range q.Samples {
			b := fmt.Sprintf("not in %.0f s", q.TimeoutS)
			if s.BackS != nil {
				b = fmt.Sprintf("%.1f s", *s.BackS)
			}
			backs = append(backs, b)
		}
		fmt.Fprintf(w, "scale requeue: %d tasks over %d accounts (accounts in %.1f s; tasks created in %.1f s, %.0f/s, %d retries), Asynq %d pending; used_memory %.1f MB (%.0f B per task); with them pending, queues paused: %s; jobs back after %s\n",
			q.Pending, q.Accounts, q.AccountsS, q.Create.Seconds, q.Create.PerS, q.Create.Retries, q.AsynqPending, float64(q.UsedMemory)/1e6, q.BytesPerTask, q.Window, strings.Join(backs, ", "))
	}
	if p := r.Progress; p != nil {
		fmt.Fprintf(w, "scale progress: %d pro tasks at once (created in %.1f s, %d retries), generations of %.0f s, %.1f s from the first create to the last completion; %d Redis commands (a floor of %.1f/s taken out: %.1f a task); a task, floor in: %s; %.2f progress writes a task; rises the streams of %d showed %v, one's curve %v\n",
			p.Tasks, p.Create.Seconds, p.Create.Retries, p.GenerationS, p.LifeS, p.Commands, p.FloorPerS, p.CommandsPerTask, countLine(p.ByCommand), p.WritesPerTask, len(p.Writes), p.Writes, p.Curve)
	}
	if b := r.Bytes; b != nil {
		fmt.Fprintf(w, "scale bytes: %d tasks, EASEL_ACCOUNT_MAX_RUNNING=%d (created in %.1f s, drained in %.1f s); before / pending / completed: used_memory %d / %d / %d, "+
			"of which clients' buffers %d / %d / %d, scripts %d / %d / %d; keys %d / %d / %d; per task without the clients' buffers: %.0f B pending, %.0f B completed\n",
			b.Tasks, b.Share, b.Create.Seconds, b.DrainS, b.Before.UsedMemory, b.Pending.UsedMemory, b.Completed.UsedMemory,
			b.Before.Clients, b.Pending.Clients, b.Completed.Clients, b.Before.Scripts, b.Pending.Scripts, b.Completed.Scripts,
			b.Before.Keys, b.Pending.Keys, b.Completed.Keys, b.PerPendingNoClients, b.PerCompletedNoClients)
	}
}

// queuedJobs is the jobs Easel's image queues hold: pending, running, to
// retry or archived (Asynq's QueueInfo.Size), a queue never used counting
// as empty.
func queuedJobs(insp *asynq.Inspector) int {
	n := 0
	for _, q := range jobs.Queues() {
		if info, err := insp.GetQueueInfo(q); err == nil {
			n += info.Size
		}
	}
	return n
}
