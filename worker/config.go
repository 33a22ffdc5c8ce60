package worker

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/pkg/quota"
	"github.com/easelhq/easel/pkg/service"
	"github.com/easelhq/easel/pkg/upstream"
)

// Config is a worker's configuration: the common settings and its own.
type Config struct {
	config.Common
	// HTTPAddr serves the worker's /healthz and /readyz.
	HTTPAddr string `env:"EASEL_WORKER_HTTP_ADDR" envDefault:":8081"`
	// Queues lists the queues (model tiers) this worker serves, optionally
	// weighted: "standard,pro" or "standard:1,pro:3".
	Queues string `env:"EASEL_QUEUES" envDefault:"standard,pro"`
	// Concurrency is how many tasks one worker holds in flight at once. A
	// generation mostly waits on its upstream, so this is high: CPU work
	// (decoding, rendering, encoding) has bounds of its own (NumCPU render
	// slots, EASEL_DECODE_BUDGET_MB), and the Redis pool does not grow with
	// it. `easelbench --only inflight` holds a worker with that many in
	// flight to 512 MB of RSS and 64 Redis connections (BENCHMARKS.md runs
	// it at 5,000); the default leaves room.
	Concurrency int `env:"EASEL_WORKER_CONCURRENCY" envDefault:"1000"`
	// UpstreamRPM and UpstreamConcurrency are the upstream quota all
	// workers share, per model: "model=N,...", "*=N" for every model not
	// named (package quota). Empty: no limit.
	UpstreamRPM         string `env:"EASEL_UPSTREAM_RPM"`
	UpstreamConcurrency string `env:"EASEL_UPSTREAM_CONCURRENCY"`
	// Generator picks the image generator: procedural or gemini.
	Generator string `env:"EASEL_GENERATOR" envDefault:"procedural"`
	// Gemini settings (EASEL_GENERATOR=gemini).
	GeminiAPIKey  string        `env:"EASEL_GEMINI_API_KEY"`
	GeminiBaseURL string        `env:"EASEL_GEMINI_BASE_URL"`
	GeminiModels  string        `env:"EASEL_GEMINI_MODELS" envDefault:"standard=gemini-2.5-flash-image,pro=gemini-3-pro-image-preview"`
	GeminiTimeout time.Duration `env:"EASEL_GEMINI_TIMEOUT" envDefault:"3m"`
	// UpstreamsFile, with EASEL_GENERATOR=gemini, is a pool of upstream
	// credentials (package upstream) used instead of EASEL_GEMINI_API_KEY;
	// re-read every UpstreamsReload and on SIGHUP.
	UpstreamsFile   string        `env:"EASEL_UPSTREAMS_FILE"`
	UpstreamsReload time.Duration `env:"EASEL_UPSTREAMS_RELOAD" envDefault:"5s"`
	// Getenv reads the environment the configuration came from (the
	// upstreams file's api_key_env); nil: none.
	Getenv func(string) string `env:"-"`
	// The retry policy (see retryPolicy).
	RetryMaxAttempts int           `env:"EASEL_RETRY_MAX_ATTEMPTS" envDefault:"4"`
	RetryMaxElapsed  time.Duration `env:"EASEL_RETRY_MAX_ELAPSED" envDefault:"2m"`
	RetryInitial     time.Duration `env:"EASEL_RETRY_INITIAL_INTERVAL" envDefault:"1s"`
	// Source image fetching.
	FetchMaxImageMB int `env:"EASEL_FETCH_MAX_IMAGE_MB" envDefault:"20"`
	FetchMaxTotalMB int `env:"EASEL_FETCH_MAX_TOTAL_MB" envDefault:"100"`
	FetchMaxMegapix int `env:"EASEL_FETCH_MAX_MEGAPIXELS" envDefault:"50"`
	FetchMaxDecoded int `env:"EASEL_FETCH_MAX_DECODED_MB" envDefault:"400"`
	// DecodeBudgetMB bounds the decoded source images the whole process
	// holds at once; a task waits for its share, taken from the images'
	// headers before decoding. At least EASEL_FETCH_MAX_DECODED_MB, so that
	// every task the fetcher lets through can run.
	DecodeBudgetMB   int           `env:"EASEL_DECODE_BUDGET_MB" envDefault:"1024"`
	FetchTimeout     time.Duration `env:"EASEL_FETCH_TIMEOUT" envDefault:"30s"`
	FetchConnTimeout time.Duration `env:"EASEL_FETCH_CONNECT_TIMEOUT" envDefault:"5s"`
	// SimDelay is the procedural generator's simulated duration for the
	// standard model; pro takes twice as long.
	SimDelay time.Duration `env:"EASEL_SIM_DELAY" envDefault:"3s"`
	// ProgressStep and ProgressInterval pace the progress a worker writes
	// to its tasks (processor.Pacing), whatever the generator reports: a
	// rise of ProgressStep points is written once half of ProgressInterval
	// has passed since the last write, any rise once ProgressInterval has,
	// the first report and the end of a generation as soon as they can be
	// (none within 200 ms of the last write or the start).
	ProgressStep     int           `env:"EASEL_PROGRESS_STEP" envDefault:"20"`
	ProgressInterval time.Duration `env:"EASEL_PROGRESS_INTERVAL" envDefault:"10s"`
	// TaskCheckInterval is how often an idle worker polls its queues.
	TaskCheckInterval time.Duration `env:"EASEL_TASK_CHECK_INTERVAL" envDefault:"50ms"`
	// BlobRetention is how long result images are kept; a little over the 24
	// hours their URLs are valid.
	BlobRetention time.Duration `env:"EASEL_BLOB_RETENTION" envDefault:"24h10m"`
	// WebhookConcurrency is how many webhook deliveries one worker makes at
	// once, on a server of their own (queue "webhooks"), apart from the
	// generations; 0 turns delivery off on this worker (others must serve
	// the queue).
	WebhookConcurrency int `env:"EASEL_WEBHOOK_CONCURRENCY" envDefault:"50"`
	// WebhookTimeout bounds one delivery attempt.
	WebhookTimeout time.Duration `env:"EASEL_WEBHOOK_TIMEOUT" envDefault:"10s"`
	// WebhookRetryInitial is the wait before a failed delivery's first
	// retry; it doubles up to 4 h, with jitter, for at least 24 h.
	WebhookRetryInitial time.Duration `env:"EASEL_WEBHOOK_RETRY_INITIAL" envDefault:"5s"`
	// PublicURL and SigningSecret make the result URLs of webhook bodies:
	// the gateways' own settings.
	PublicURL     string `env:"EASEL_PUBLIC_URL"`
	SigningSecret string `env:"EASEL_SIGNING_SECRET"`
}

// MemoryAllowanceMB is what a worker's fallback Go memory limit allows
// beyond EASEL_DECODE_BUDGET_MB for the rest of the process: the process at
// rest and its tasks in flight (BENCHMARKS.md has the worker's peak RSS
// after a drain and with 5,000 generations in flight), the render canvases
// and the pictures on their way to the store. The limit is soft: a heap
// over it costs the garbage collector more CPU, never a failure. The
// allowance is small enough for the limit to bind: a worker without a
// limit peaks above its decode budget by up to nearly twice this
// (docs/operations.md).
const MemoryAllowanceMB = 256

// FallbackMemoryLimit is the Go memory limit a worker sets at start when
// neither GOMEMLIMIT nor its container's memory limit gives one
// (service.Start): EASEL_DECODE_BUDGET_MB + MemoryAllowanceMB MiB, so the
// garbage collector keeps the heap near what the decode budget lets the
// worker hold instead of letting it grow to twice that.
func (c Config) FallbackMemoryLimit() service.MemoryLimit {
	return service.MemoryLimit{
		Bytes:  int64(c.DecodeBudgetMB+MemoryAllowanceMB) << 20,
		Source: fmt.Sprintf("EASEL_DECODE_BUDGET_MB %d + %d MiB", c.DecodeBudgetMB, MemoryAllowanceMB),
	}
}

// DefaultPublicURL is the base of result URLs in webhook bodies when
// EASEL_PUBLIC_URL is unset: a gateway's own default on its default
// address.
const DefaultPublicURL = "http://localhost:8080"

// MinSecretLen is the shortest accepted EASEL_SIGNING_SECRET (the
// gateway's rule).
const MinSecretLen = 32

// LoadConfig reads a worker's configuration from environ (nil means the
// process environment) and validates it.
func LoadConfig(environ map[string]string) (Config, error) {
	c, err := config.Parse[Config](environ)
	if err != nil {
		return c, err
	}
	// The upstreams file names variables of its own (its keys'): read from
	// the same environment.
	c.Getenv = func(k string) string { return environ[k] }
	return c, c.Validate()
}

// lookup reads a variable of the configuration's environment.
func (c *Config) lookup(k string) string {
	if c.Getenv == nil {
		return ""
	}
	return c.Getenv(k)
}

// Validate checks a worker's settings.
func (c *Config) Validate() error {
	errs := []error{c.Common.Validate()}
	if err := config.ValidAddr("EASEL_WORKER_HTTP_ADDR", c.HTTPAddr); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseQueues(c.Queues); err != nil {
		errs = append(errs, err)
	}
	if c.Concurrency < 1 || c.Concurrency > 10000 {
		errs = append(errs, fmt.Errorf("EASEL_WORKER_CONCURRENCY %d: want 1 to 10000", c.Concurrency))
	}
	if _, err := quota.ParseLimits(c.UpstreamRPM, c.UpstreamConcurrency); err != nil {
		errs = append(errs, err)
	}
	if c.DecodeBudgetMB < c.FetchMaxDecoded {
		errs = append(errs, fmt.Errorf("EASEL_DECODE_BUDGET_MB %d: want at least EASEL_FETCH_MAX_DECODED_MB (%d), or a task the fetcher accepts could never run", c.DecodeBudgetMB, c.FetchMaxDecoded))
	}
	switch c.Generator {
	case "procedural":
	case "gemini":
		if c.GeminiAPIKey == "" && c.UpstreamsFile == "" {
			errs = append(errs, errors.New("EASEL_GEMINI_API_KEY or EASEL_UPSTREAMS_FILE is required with EASEL_GENERATOR=gemini"))
		}
		if c.UpstreamsFile != "" {
			if _, err := upstream.Load(c.UpstreamsFile, c.lookup); err != nil {
				errs = append(errs, fmt.Errorf("EASEL_UPSTREAMS_FILE: %w", err))
			}
			if c.UpstreamsReload < 100*time.Millisecond {
				errs = append(errs, fmt.Errorf("EASEL_UPSTREAMS_RELOAD %s: want at least 100ms", c.UpstreamsReload))
			}
		}
		if _, err := ParseModelMap(c.GeminiModels); err != nil {
			errs = append(errs, fmt.Errorf("EASEL_GEMINI_MODELS: %w", err))
		}
		if c.GeminiBaseURL != "" {
			if u, err := url.Parse(c.GeminiBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("EASEL_GEMINI_BASE_URL %q: want an http(s) URL", c.GeminiBaseURL))
			}
		}
		if c.GeminiTimeout < time.Second {
			errs = append(errs, fmt.Errorf("EASEL_GEMINI_TIMEOUT %s: want at least 1s", c.GeminiTimeout))
		}
	default:
		errs = append(errs, fmt.Errorf("EASEL_GENERATOR %q: want procedural or gemini", c.Generator))
	}
	if c.UpstreamsFile != "" && c.Generator != "gemini" {
		errs = append(errs, errors.New("EASEL_UPSTREAMS_FILE needs EASEL_GENERATOR=gemini"))
	}
	if c.RetryMaxAttempts < 1 || c.RetryMaxAttempts > 20 {
		errs = append(errs, fmt.Errorf("EASEL_RETRY_MAX_ATTEMPTS %d: want 1 to 20", c.RetryMaxAttempts))
	}
	if c.RetryMaxElapsed <= 0 || c.RetryInitial <= 0 || c.RetryInitial > c.RetryMaxElapsed {
		errs = append(errs, fmt.Errorf("EASEL_RETRY_INITIAL_INTERVAL %s and EASEL_RETRY_MAX_ELAPSED %s: want positive durations, the first no longer than the second", c.RetryInitial, c.RetryMaxElapsed))
	}
	for _, f := range []struct {
		name   string
		v, max int
	}{{"EASEL_FETCH_MAX_IMAGE_MB", c.FetchMaxImageMB, 1024}, {"EASEL_FETCH_MAX_TOTAL_MB", c.FetchMaxTotalMB, 10240}, {"EASEL_FETCH_MAX_MEGAPIXELS", c.FetchMaxMegapix, 1000}, {"EASEL_FETCH_MAX_DECODED_MB", c.FetchMaxDecoded, 65536}} {
		if f.v < 1 || f.v > f.max {
			errs = append(errs, fmt.Errorf("%s %d: want 1 to %d", f.name, f.v, f.max))
		}
	}
	if c.FetchTimeout <= 0 || c.FetchConnTimeout <= 0 {
		errs = append(errs, errors.New("EASEL_FETCH_TIMEOUT and EASEL_FETCH_CONNECT_TIMEOUT: want positive durations"))
	}
	if c.SimDelay < 0 {
		errs = append(errs, fmt.Errorf("EASEL_SIM_DELAY %s: want 0 or more", c.SimDelay))
	}
	if c.ProgressStep < 1 || c.ProgressStep > 99 {
		errs = append(errs, fmt.Errorf("EASEL_PROGRESS_STEP %d: want 1 to 99", c.ProgressStep))
	}
	if c.ProgressInterval < 100*time.Millisecond || c.ProgressInterval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("EASEL_PROGRESS_INTERVAL %s: want 100ms to 10m", c.ProgressInterval))
	}
	if c.TaskCheckInterval < time.Millisecond || c.TaskCheckInterval > 10*time.Second {
		errs = append(errs, fmt.Errorf("EASEL_TASK_CHECK_INTERVAL %s: want 1ms to 10s", c.TaskCheckInterval))
	}
	if c.BlobRetention < time.Hour {
		errs = append(errs, fmt.Errorf("EASEL_BLOB_RETENTION %s: want at least 1h (result URLs are valid for 24h)", c.BlobRetention))
	}
	if c.WebhookConcurrency < 0 || c.WebhookConcurrency > 10000 {
		errs = append(errs, fmt.Errorf("EASEL_WEBHOOK_CONCURRENCY %d: want 0 (no deliveries on this worker) to 10000", c.WebhookConcurrency))
	}
	if c.WebhookTimeout < time.Second || c.WebhookTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("EASEL_WEBHOOK_TIMEOUT %s: want 1s to 1m", c.WebhookTimeout))
	}
	if c.WebhookRetryInitial < 10*time.Millisecond || c.WebhookRetryInitial > time.Hour {
		errs = append(errs, fmt.Errorf("EASEL_WEBHOOK_RETRY_INITIAL %s: want 10ms to 1h", c.WebhookRetryInitial))
	}
	if c.PublicURL == "" {
		c.PublicURL = DefaultPublicURL
	} else if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		errs = append(errs, fmt.Errorf("EASEL_PUBLIC_URL %q: want an absolute http(s) URL with no path, e.g. https://images.example.com", c.PublicURL))
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	if c.SigningSecret != "" && len(c.SigningSecret) < MinSecretLen {
		errs = append(errs, fmt.Errorf("EASEL_SIGNING_SECRET is %d bytes: want at least %d, the gateways' secret", len(c.SigningSecret), MinSecretLen))
	}
	return errors.Join(errs...)
}

// ParseModelMap parses EASEL_GEMINI_MODELS: "standard=<upstream id>,pro=<upstream id>".
func ParseModelMap(s string) (map[catalog.Tier]string, error) {
	out := map[catalog.Tier]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		tier, model, ok := strings.Cut(item, "=")
		tier, model = strings.TrimSpace(tier), strings.TrimSpace(model)
		if !ok || model == "" || (catalog.Tier(tier) != catalog.Standard && catalog.Tier(tier) != catalog.Pro) {
			return nil, fmt.Errorf("%q: want standard=<model id> or pro=<model id>", item)
		}
		out[catalog.Tier(tier)] = model
	}
	return out, nil
}

// ParseQueues parses EASEL_QUEUES: tier names with optional positive integer
// weights, e.g. "standard,pro" or "standard:1,pro:3".
func ParseQueues(s string) (map[catalog.Tier]int, error) {
	out := map[catalog.Tier]int{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, weight := item, 1
		if n, w, ok := strings.Cut(item, ":"); ok {
			name = n
			var err error
			if weight, err = strconv.Atoi(w); err != nil || weight < 1 || weight > 100 {
				return nil, fmt.Errorf("EASEL_QUEUES %q: weight of %q must be an integer from 1 to 100", s, name)
			}
		}
		tier := catalog.Tier(name)
		if tier != catalog.Standard && tier != catalog.Pro {
			return nil, fmt.Errorf("EASEL_QUEUES %q: unknown queue %q; want standard and/or pro", s, name)
		}
		if _, dup := out[tier]; dup {
			return nil, fmt.Errorf("EASEL_QUEUES %q: queue %q listed twice", s, name)
		}
		out[tier] = weight
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("EASEL_QUEUES %q: name at least one of standard, pro", s)
	}
	return out, nil
}
