// Package config reads Easel's configuration from environment variables, once,
// at start, and validates it with messages that say what to fix.
//
// Every variable is declared here, in the structs below; README.md documents
// them in one table and a test keeps the two in step.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/pricing"
)

// Common is what every Easel process reads.
type Common struct {
	// RedisURL is the Redis to use, e.g. redis://localhost:6379/0 or
	// rediss://user:pass@host:6380/0. Required: `make run` sets it to its
	// embedded Redis.
	RedisURL string `env:"EASEL_REDIS_URL"`
	// ModelFamily is the family word in model ids and task ids.
	ModelFamily string `env:"EASEL_MODEL_FAMILY" envDefault:"lumen"`
	// BlobDir is the directory holding result images, shared by the gateway
	// and the workers.
	BlobDir string `env:"EASEL_BLOB_DIR"`
	// FetchAllowPrivate lets editing tasks fetch source images from loopback
	// and private addresses and non-standard ports (local development only).
	FetchAllowPrivate bool `env:"EASEL_FETCH_ALLOW_PRIVATE" envDefault:"false"`
	// FetchPorts are the ports source images may be fetched from.
	FetchPorts []int `env:"EASEL_FETCH_PORTS" envDefault:"80,443" envSeparator:","`
	// FetchAllowCIDRs are private or reserved ranges source images may
	// still be fetched from (an internal image store).
	FetchAllowCIDRs string `env:"EASEL_FETCH_ALLOW_CIDRS"`
	// TaskDeadline bounds a task from creation to its end.
	TaskDeadline time.Duration `env:"EASEL_TASK_DEADLINE" envDefault:"10m"`
	// DevMode relaxes production requirements (a random signing secret when
	// none is set). `make run` turns it on.
	DevMode bool `env:"EASEL_DEV_MODE" envDefault:"false"`
	// PprofAddr, when set, serves /debug/pprof/ there (keep it private).
	PprofAddr string `env:"EASEL_PPROF_ADDR"`
	LogLevel  string `env:"EASEL_LOG_LEVEL" envDefault:"info"`
	LogFormat string `env:"EASEL_LOG_FORMAT" envDefault:"json"`
}

// Gateway is the API gateway's configuration.
type Gateway struct {
	Common
	// HTTPAddr is the listen address.
	HTTPAddr string `env:"EASEL_HTTP_ADDR" envDefault:":8080"`
	// PublicURL is the base of result URLs; default the gateway's own address.
	PublicURL string `env:"EASEL_PUBLIC_URL"`
	// SigningSecret keys the HMAC of result URLs; at least 32 bytes. Every
	// gateway replica needs the same one.
	SigningSecret   string        `env:"EASEL_SIGNING_SECRET"`
	ShutdownTimeout time.Duration `env:"EASEL_SHUTDOWN_TIMEOUT" envDefault:"15s"`
	// DevAPIKey, when set, is made to work at start: an account named "dev"
	// (with DevCredits) gets it unless it already belongs to one. For local
	// stacks (make run, docker compose); leave it unset in production.
	DevAPIKey  string `env:"EASEL_DEV_API_KEY"`
	DevCredits int64  `env:"EASEL_DEV_CREDITS" envDefault:"1000000"`
	// AdminToken enables the admin API under /admin/v1 and guards it; unset,
	// the admin routes do not exist.
	AdminToken string `env:"EASEL_ADMIN_TOKEN"`
	// Prices is the price table (package pricing).
	Prices string `env:"EASEL_PRICES" envDefault:"standard=4,pro:1K=18,pro:2K=18,pro:4K=24"` // = pricing.Default
	// Default per-key rate limits (requests per second) and per-account
	// limit of unfinished tasks; accounts may override each.
	RateLimit      int `env:"EASEL_RATE_LIMIT" envDefault:"10"`
	QueryRateLimit int `env:"EASEL_QUERY_RATE_LIMIT" envDefault:"50"`
	MaxInflight    int `env:"EASEL_MAX_INFLIGHT" envDefault:"20"`
	// AuthCacheTTL bounds how long a gateway trusts what it read of a key
	// and its account: a revoked key or disabled account stops working
	// within it. At most 5s.
	AuthCacheTTL time.Duration `env:"EASEL_AUTH_CACHE_TTL" envDefault:"2s"`
}

// Worker is a worker's configuration.
type Worker struct {
	Common
	// HTTPAddr serves the worker's /healthz and /readyz.
	HTTPAddr string `env:"EASEL_WORKER_HTTP_ADDR" envDefault:":8081"`
	// Queues lists the queues (model tiers) this worker serves, optionally
	// weighted: "standard,pro" or "standard:1,pro:3".
	Queues string `env:"EASEL_QUEUES" envDefault:"standard,pro"`
	// Concurrency is how many tasks one worker runs at once.
	Concurrency int `env:"EASEL_WORKER_CONCURRENCY" envDefault:"16"`
	// Generator picks the image generator: procedural or gemini.
	Generator string `env:"EASEL_GENERATOR" envDefault:"procedural"`
	// Gemini settings (EASEL_GENERATOR=gemini).
	GeminiAPIKey  string        `env:"EASEL_GEMINI_API_KEY"`
	GeminiBaseURL string        `env:"EASEL_GEMINI_BASE_URL"`
	GeminiModels  string        `env:"EASEL_GEMINI_MODELS" envDefault:"standard=gemini-2.5-flash-image,pro=gemini-3-pro-image-preview"`
	GeminiTimeout time.Duration `env:"EASEL_GEMINI_TIMEOUT" envDefault:"3m"`
	// Retries of a generation after a retryable error.
	RetryMaxAttempts int           `env:"EASEL_RETRY_MAX_ATTEMPTS" envDefault:"4"`
	RetryMaxElapsed  time.Duration `env:"EASEL_RETRY_MAX_ELAPSED" envDefault:"2m"`
	RetryInitial     time.Duration `env:"EASEL_RETRY_INITIAL_INTERVAL" envDefault:"1s"`
	// Source image fetching.
	FetchMaxImageMB  int           `env:"EASEL_FETCH_MAX_IMAGE_MB" envDefault:"20"`
	FetchMaxTotalMB  int           `env:"EASEL_FETCH_MAX_TOTAL_MB" envDefault:"100"`
	FetchMaxMegapix  int           `env:"EASEL_FETCH_MAX_MEGAPIXELS" envDefault:"50"`
	FetchTimeout     time.Duration `env:"EASEL_FETCH_TIMEOUT" envDefault:"30s"`
	FetchConnTimeout time.Duration `env:"EASEL_FETCH_CONNECT_TIMEOUT" envDefault:"5s"`
	// SimDelay is the procedural generator's simulated duration for the
	// standard model; pro takes twice as long.
	SimDelay time.Duration `env:"EASEL_SIM_DELAY" envDefault:"3s"`
	// TaskCheckInterval is how often an idle worker polls its queues.
	TaskCheckInterval time.Duration `env:"EASEL_TASK_CHECK_INTERVAL" envDefault:"50ms"`
	// BlobRetention is how long result images are kept; a little over the 24
	// hours their URLs are valid.
	BlobRetention   time.Duration `env:"EASEL_BLOB_RETENTION" envDefault:"24h10m"`
	ShutdownTimeout time.Duration `env:"EASEL_SHUTDOWN_TIMEOUT" envDefault:"15s"`
}

// DefaultBlobDir is the blob directory when EASEL_BLOB_DIR is unset.
func DefaultBlobDir() string { return filepath.Join(os.TempDir(), "easel-blobs") }

// LoadGateway reads the gateway's configuration from environ (nil means the
// process environment) and validates it.
func LoadGateway(environ map[string]string) (Gateway, error) {
	c, err := parse[Gateway](environ)
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

// LoadWorker reads a worker's configuration from environ (nil means the
// process environment) and validates it.
func LoadWorker(environ map[string]string) (Worker, error) {
	c, err := parse[Worker](environ)
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

func parse[T any](environ map[string]string) (T, error) {
	if environ == nil {
		environ = env.ToMap(os.Environ())
	}
	c, err := env.ParseAsWithOptions[T](env.Options{Environment: environ})
	if err != nil {
		return c, fmt.Errorf("configuration: %s", describe(err, reflect.TypeOf(c)))
	}
	return c, nil
}

// describe turns the env library's errors into one line per variable.
func describe(err error, t reflect.Type) string {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err.Error()
	}
	msgs := make([]string, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			msgs = append(msgs, fmt.Sprintf("%s: cannot parse as %s", envKey(t, pe.Name), describeType(pe.Type)))
			continue
		}
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}

// envKey returns the variable name of a struct field, looking into embedded
// structs.
func envKey(t reflect.Type, field string) string {
	if f, ok := t.FieldByName(field); ok {
		if k, _, _ := strings.Cut(f.Tag.Get("env"), ","); k != "" {
			return k
		}
	}
	return field
}

func describeType(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(time.Duration(0)):
		return `a Go duration such as "500ms", "3s" or "10m"`
	case reflect.TypeOf(false):
		return "true or false"
	case reflect.TypeOf(0):
		return "an integer"
	}
	return t.String()
}

// EgressPolicy is the policy for fetching source images.
func (c *Common) EgressPolicy() egress.Policy {
	allow, _ := egress.ParsePrefixes(c.FetchAllowCIDRs) // checked by Validate
	return egress.Policy{AllowPrivate: c.FetchAllowPrivate, Ports: c.FetchPorts, Allow: allow}
}

// Validate checks the common settings.
func (c *Common) Validate() error {
	var errs []error
	if c.RedisURL == "" {
		errs = append(errs, errors.New("EASEL_REDIS_URL is required (e.g. redis://localhost:6379/0); `make run` starts a whole stack on an embedded Redis without it"))
	} else if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		errs = append(errs, fmt.Errorf("EASEL_REDIS_URL %q: want redis://[user:password@]host:port[/db] or rediss://host:port", redact(c.RedisURL)))
	}
	if !catalog.ValidFamily(c.ModelFamily) {
		errs = append(errs, fmt.Errorf("EASEL_MODEL_FAMILY %q: want lowercase letters and digits, starting with a letter, at most 32 characters", c.ModelFamily))
	}
	if c.BlobDir == "" {
		c.BlobDir = DefaultBlobDir()
	}
	if c.TaskDeadline < time.Second {
		errs = append(errs, fmt.Errorf("EASEL_TASK_DEADLINE %s: want at least 1s", c.TaskDeadline))
	}
	if _, err := egress.ParsePrefixes(c.FetchAllowCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("EASEL_FETCH_ALLOW_CIDRS: %w", err))
	}
	for _, p := range c.FetchPorts {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("EASEL_FETCH_PORTS: %d is not a port", p))
		}
	}
	if c.PprofAddr != "" {
		if err := validAddr("EASEL_PPROF_ADDR", c.PprofAddr); err != nil {
			errs = append(errs, err)
		}
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("EASEL_LOG_FORMAT %q: want json or console", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("EASEL_LOG_LEVEL %q: want debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// MinSecretLen is the shortest accepted EASEL_SIGNING_SECRET.
const MinSecretLen = 32

// Validate checks the gateway's settings and fills derived defaults.
func (c *Gateway) Validate() error {
	errs := []error{c.Common.Validate()}
	if err := validAddr("EASEL_HTTP_ADDR", c.HTTPAddr); err != nil {
		errs = append(errs, err)
	}
	if c.PublicURL == "" {
		c.PublicURL = DefaultPublicURL(c.HTTPAddr)
	} else if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		errs = append(errs, fmt.Errorf("EASEL_PUBLIC_URL %q: want an absolute http(s) URL with no path, e.g. https://images.example.com", c.PublicURL))
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	switch {
	case c.SigningSecret == "" && !c.DevMode:
		errs = append(errs, errors.New("EASEL_SIGNING_SECRET is required: at least 32 random bytes, the same on every gateway (e.g. `openssl rand -hex 32`)"))
	case c.SigningSecret != "" && len(c.SigningSecret) < MinSecretLen:
		errs = append(errs, fmt.Errorf("EASEL_SIGNING_SECRET is %d bytes: want at least %d", len(c.SigningSecret), MinSecretLen))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("EASEL_SHUTDOWN_TIMEOUT: want a positive duration"))
	}
	if c.AdminToken != "" && len(c.AdminToken) < MinSecretLen {
		errs = append(errs, fmt.Errorf("EASEL_ADMIN_TOKEN is %d bytes: want at least %d", len(c.AdminToken), MinSecretLen))
	}
	if _, err := pricing.Parse(c.Prices); err != nil {
		errs = append(errs, fmt.Errorf("EASEL_PRICES: %w", err))
	}
	for _, l := range []struct {
		name string
		v    int
	}{{"EASEL_RATE_LIMIT", c.RateLimit}, {"EASEL_QUERY_RATE_LIMIT", c.QueryRateLimit}, {"EASEL_MAX_INFLIGHT", c.MaxInflight}} {
		if l.v < 1 || l.v > 1_000_000 {
			errs = append(errs, fmt.Errorf("%s %d: want 1 to 1000000", l.name, l.v))
		}
	}
	if c.AuthCacheTTL < 0 || c.AuthCacheTTL > 5*time.Second {
		errs = append(errs, fmt.Errorf("EASEL_AUTH_CACHE_TTL %s: want 0 to 5s (revocations must take effect within 5s)", c.AuthCacheTTL))
	}
	if c.DevCredits < 0 {
		errs = append(errs, errors.New("EASEL_DEV_CREDITS: want 0 or more"))
	}
	return errors.Join(errs...)
}

// Validate checks a worker's settings.
func (c *Worker) Validate() error {
	errs := []error{c.Common.Validate()}
	if err := validAddr("EASEL_WORKER_HTTP_ADDR", c.HTTPAddr); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseQueues(c.Queues); err != nil {
		errs = append(errs, err)
	}
	if c.Concurrency < 1 || c.Concurrency > 10000 {
		errs = append(errs, fmt.Errorf("EASEL_WORKER_CONCURRENCY %d: want 1 to 10000", c.Concurrency))
	}
	switch c.Generator {
	case "procedural":
	case "gemini":
		if c.GeminiAPIKey == "" {
			errs = append(errs, errors.New("EASEL_GEMINI_API_KEY is required with EASEL_GENERATOR=gemini"))
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
	if c.RetryMaxAttempts < 1 || c.RetryMaxAttempts > 20 {
		errs = append(errs, fmt.Errorf("EASEL_RETRY_MAX_ATTEMPTS %d: want 1 to 20", c.RetryMaxAttempts))
	}
	if c.RetryMaxElapsed <= 0 || c.RetryInitial <= 0 || c.RetryInitial > c.RetryMaxElapsed {
		errs = append(errs, fmt.Errorf("EASEL_RETRY_INITIAL_INTERVAL %s and EASEL_RETRY_MAX_ELAPSED %s: want positive durations, the first no longer than the second", c.RetryInitial, c.RetryMaxElapsed))
	}
	for _, f := range []struct {
		name   string
		v, max int
	}{{"EASEL_FETCH_MAX_IMAGE_MB", c.FetchMaxImageMB, 1024}, {"EASEL_FETCH_MAX_TOTAL_MB", c.FetchMaxTotalMB, 10240}, {"EASEL_FETCH_MAX_MEGAPIXELS", c.FetchMaxMegapix, 1000}} {
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
	if c.TaskCheckInterval < time.Millisecond || c.TaskCheckInterval > 10*time.Second {
		errs = append(errs, fmt.Errorf("EASEL_TASK_CHECK_INTERVAL %s: want 1ms to 10s", c.TaskCheckInterval))
	}
	if c.BlobRetention < time.Hour {
		errs = append(errs, fmt.Errorf("EASEL_BLOB_RETENTION %s: want at least 1h (result URLs are valid for 24h)", c.BlobRetention))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("EASEL_SHUTDOWN_TIMEOUT: want a positive duration"))
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

func validAddr(name, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q: want host:port or :port", name, addr)
	}
	return nil
}

// DefaultPublicURL turns a listen address into a URL a local client can use.
func DefaultPublicURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://localhost:8080"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// redact hides a URL's password.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}

// Names returns every environment variable the gateway and the workers read,
// sorted.
func Names() []string {
	seen := map[string]bool{}
	for _, v := range []any{&Gateway{}, &Worker{}} {
		params, err := env.GetFieldParams(v)
		if err != nil {
			panic(err) // the structs above are static; a bad tag is a programming error
		}
		for _, p := range params {
			seen[p.Key] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
