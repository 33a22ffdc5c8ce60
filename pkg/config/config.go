// Package config is the part of Easel's configuration that the gateway and
// the workers both read (Common), and the way every Easel process reads its
// own: environment variables, parsed once at start into a struct and
// validated with messages that say what to fix. Each service declares its own
// settings beside its Run function (gateway.Config, worker.Config);
// docs/configuration.md documents them all in one table, and a test keeps
// the two in step.
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
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/store"
)

// Common is what every Easel service reads.
type Common struct {
	// RedisURL is the Redis to use, e.g. redis://localhost:6379/0 or
	// rediss://user:pass@host:6380/0. Required: `make run` sets it to its
	// embedded Redis.
	RedisURL string `env:"EASEL_REDIS_URL"`
	// RedisTimeout bounds each Redis call (dial, write, read, the wait for a
	// pooled connection) and an API request's Redis work: with Redis hung or
	// gone, a request is 503 with Retry-After within about two of these.
	RedisTimeout time.Duration `env:"EASEL_REDIS_TIMEOUT" envDefault:"400ms"`
	// RedisStartTimeout is how long a service waits for Redis at start,
	// not ready meanwhile, before giving up.
	RedisStartTimeout time.Duration `env:"EASEL_REDIS_START_TIMEOUT" envDefault:"60s"`
	// RedisMinReplicas, when above 0, makes every change that moves credits
	// or ends a task wait until that many replicas have it (Redis WAIT), so
	// that a create answered 200 survives a failover.
	RedisMinReplicas int `env:"EASEL_REDIS_MIN_REPLICAS" envDefault:"0"`
	// AccountMaxRunning is an account's share of the workers: at most this
	// many of its tasks (times the account's weight) are queued or running
	// at once across every worker; the rest wait parked, costing no worker
	// and no Redis work, and are queued oldest first as places free. 0: no
	// limit. The same on every gateway and worker.
	AccountMaxRunning int `env:"EASEL_ACCOUNT_MAX_RUNNING" envDefault:"64"`
	// LedgerRetention is how long an account's ledger entries are kept:
	// older ones are dropped as new ones are written (balances are never
	// affected). Export them before they age out (easelctl ledger export).
	// 0: for ever.
	LedgerRetention time.Duration `env:"EASEL_LEDGER_RETENTION" envDefault:"2160h"`
	// ModelFamily is the family word in model ids and task ids.
	ModelFamily string `env:"EASEL_MODEL_FAMILY" envDefault:"lumen"`
	// BlobURL is where result images are kept, for the gateway and the
	// workers alike: file:///path (a directory they all share) or
	// s3://bucket/prefix (an S3-compatible bucket, reached with the S3
	// settings below). Default: file:// and DefaultBlobDir.
	BlobURL string `env:"EASEL_BLOB_URL"`
	// S3Endpoint is the S3-compatible service's URL (http://minio:9000);
	// empty for AWS S3.
	S3Endpoint string `env:"EASEL_S3_ENDPOINT"`
	// S3Region is the bucket's region; empty: AWS_REGION, else us-east-1.
	S3Region string `env:"EASEL_S3_REGION"`
	// S3PathStyle addresses the bucket as endpoint/bucket (MinIO and most
	// self-hosted services) instead of bucket.endpoint.
	S3PathStyle bool `env:"EASEL_S3_PATH_STYLE" envDefault:"false"`
	// S3AccessKeyID and S3SecretAccessKey are the bucket's credentials;
	// unset, the AWS SDK's chain finds them (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity, instance roles).
	S3AccessKeyID     string `env:"EASEL_S3_ACCESS_KEY_ID"`
	S3SecretAccessKey string `env:"EASEL_S3_SECRET_ACCESS_KEY"`
	// FetchAllowPrivate lets editing tasks fetch source images from loopback
	// and private addresses and non-standard ports (local development only).
	FetchAllowPrivate bool `env:"EASEL_FETCH_ALLOW_PRIVATE" envDefault:"false"`
	// FetchPorts are the ports source images may be fetched from.
	FetchPorts []int `env:"EASEL_FETCH_PORTS" envDefault:"80,443" envSeparator:","`
	// FetchAllowCIDRs are private or reserved ranges source images may
	// still be fetched from (an internal image store).
	FetchAllowCIDRs string `env:"EASEL_FETCH_ALLOW_CIDRS"`
	// DevMode relaxes production requirements (a random signing secret when
	// none is set). `make run` turns it on.
	DevMode bool `env:"EASEL_DEV_MODE" envDefault:"false"`
	// ShutdownTimeout is the grace period on SIGTERM.
	ShutdownTimeout time.Duration `env:"EASEL_SHUTDOWN_TIMEOUT" envDefault:"15s"`
	// HTTPIdleTimeout closes keep-alive connections idle this long, on the
	// gateway's API and the workers' health listeners.
	HTTPIdleTimeout time.Duration `env:"EASEL_HTTP_IDLE_TIMEOUT" envDefault:"2m"`
	// PprofAddr, when set, serves /debug/pprof/ there (keep it private).
	PprofAddr string `env:"EASEL_PPROF_ADDR"`
	LogLevel  string `env:"EASEL_LOG_LEVEL" envDefault:"info"`
	LogFormat string `env:"EASEL_LOG_FORMAT" envDefault:"json"`
}

// ReplicaWait is how long a change waits for EASEL_REDIS_MIN_REPLICAS
// replicas: three quarters of the Redis timeout, so that the WAIT answers
// before the read does.
func (c *Common) ReplicaWait() time.Duration { return c.RedisTimeout * 3 / 4 }

// StoreOptions are the store's settings every gateway and worker shares.
func (c *Common) StoreOptions() store.Options {
	return store.Options{MinReplicas: c.RedisMinReplicas, ReplicaWait: c.ReplicaWait(),
		Share: c.AccountMaxRunning, LedgerRetention: c.LedgerRetention}
}

// CommonSettings returns the common part of a service's configuration.
func (c Common) CommonSettings() Common { return c }

// BlobConfig is the result store's configuration (after Validate).
func (c *Common) BlobConfig() blob.Config {
	return blob.Config{URL: c.BlobURL, S3: blob.S3Options{
		Endpoint: c.S3Endpoint, Region: c.S3Region, PathStyle: c.S3PathStyle,
		AccessKeyID: c.S3AccessKeyID, SecretAccessKey: c.S3SecretAccessKey,
	}}
}

// DefaultBlobDir is the blob directory when EASEL_BLOB_URL is not set.
func DefaultBlobDir() string { return filepath.Join(os.TempDir(), "easel-blobs") }

// Parse reads a configuration struct from environ (nil means the process
// environment). It does not validate.
func Parse[T any](environ map[string]string) (T, error) {
	if environ == nil {
		environ = env.ToMap(os.Environ())
	}
	c, err := env.ParseAsWithOptions[T](env.Options{Environment: environ})
	if err != nil {
		return c, fmt.Errorf("configuration: %s", describe(err, reflect.TypeOf(c)))
	}
	return c, nil
}

// Load parses a configuration struct from environ (nil means the process
// environment) and validates it: what a service's LoadConfig does.
func Load[T any, P interface {
	*T
	Validate() error
}](environ map[string]string) (T, error) {
	c, err := Parse[T](environ)
	if err != nil {
		return c, err
	}
	return c, P(&c).Validate()
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

// EgressPolicy is the policy for connections made on a user's behalf.
func (c *Common) EgressPolicy() egress.Policy {
	allow, _ := egress.ParsePrefixes(c.FetchAllowCIDRs) // checked by Validate
	return egress.Policy{AllowPrivate: c.FetchAllowPrivate, Ports: c.FetchPorts, Allow: allow}
}

// Validate checks the common settings and fills derived defaults.
func (c *Common) Validate() error {
	var errs []error
	if c.RedisURL == "" {
		errs = append(errs, errors.New("EASEL_REDIS_URL is required (e.g. redis://localhost:6379/0); `make run` starts a whole stack on an embedded Redis without it"))
	} else if _, err := redisconn.KindOf(c.RedisURL); err != nil {
		errs = append(errs, fmt.Errorf("EASEL_REDIS_URL %q: %w", Redact(c.RedisURL), err))
	}
	if c.RedisTimeout < 10*time.Millisecond || c.RedisTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("EASEL_REDIS_TIMEOUT %s: want 10ms to 1m", c.RedisTimeout))
	}
	if c.RedisMinReplicas < 0 || c.RedisMinReplicas > 16 {
		errs = append(errs, fmt.Errorf("EASEL_REDIS_MIN_REPLICAS %d: want 0 to 16", c.RedisMinReplicas))
	}
	if c.AccountMaxRunning < 0 || c.AccountMaxRunning > 1_000_000 {
		errs = append(errs, fmt.Errorf("EASEL_ACCOUNT_MAX_RUNNING %d: want 0 (no limit) to 1000000", c.AccountMaxRunning))
	}
	if c.LedgerRetention < 0 || (c.LedgerRetention > 0 && c.LedgerRetention < time.Hour) {
		errs = append(errs, fmt.Errorf("EASEL_LEDGER_RETENTION %s: want 0 (for ever) or at least 1h", c.LedgerRetention))
	}
	if c.RedisStartTimeout < 0 {
		errs = append(errs, fmt.Errorf("EASEL_REDIS_START_TIMEOUT %s: want 0 or more", c.RedisStartTimeout))
	}
	if !catalog.ValidFamily(c.ModelFamily) {
		errs = append(errs, fmt.Errorf("EASEL_MODEL_FAMILY %q: want lowercase letters and digits, starting with a letter, at most 32 characters", c.ModelFamily))
	}
	errs = append(errs, c.validateBlobs()...)
	if _, err := egress.ParsePrefixes(c.FetchAllowCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("EASEL_FETCH_ALLOW_CIDRS: %w", err))
	}
	for _, p := range c.FetchPorts {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("EASEL_FETCH_PORTS: %d is not a port", p))
		}
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("EASEL_SHUTDOWN_TIMEOUT: want a positive duration"))
	}
	if c.HTTPIdleTimeout < 100*time.Millisecond || c.HTTPIdleTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("EASEL_HTTP_IDLE_TIMEOUT %s: want 100ms to 1h", c.HTTPIdleTimeout))
	}
	if c.PprofAddr != "" {
		if err := ValidAddr("EASEL_PPROF_ADDR", c.PprofAddr); err != nil {
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

// ValidAddr checks a listen address setting.
func ValidAddr(name, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q: want host:port or :port", name, addr)
	}
	return nil
}

// Redact hides a URL's password.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}

// Names returns every environment variable the given configuration structs
// (pointers) read, sorted.
func Names(configs ...any) []string {
	seen := map[string]bool{}
	for _, v := range configs {
		params, err := env.GetFieldParams(v)
		if err != nil {
			panic(err) // the structs are static; a bad tag is a programming error
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

// validateBlobs settles BlobURL and checks the S3 settings.
func (c *Common) validateBlobs() []error {
	var errs []error
	if c.BlobURL == "" {
		c.BlobURL = (&url.URL{Scheme: "file", Path: filepath.ToSlash(DefaultBlobDir())}).String()
	}
	if _, err := blob.ParseURL(c.BlobURL); err != nil {
		return []error{fmt.Errorf("EASEL_BLOB_URL %q: %w", Redact(c.BlobURL), err)}
	}
	if c.S3Endpoint != "" {
		if u, err := url.Parse(c.S3Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			errs = append(errs, fmt.Errorf("EASEL_S3_ENDPOINT %q: want http(s)://host[:port], without credentials", Redact(c.S3Endpoint)))
		}
	}
	if (c.S3AccessKeyID == "") != (c.S3SecretAccessKey == "") {
		errs = append(errs, errors.New("EASEL_S3_ACCESS_KEY_ID and EASEL_S3_SECRET_ACCESS_KEY: set both or neither (neither: the AWS SDK's own chain)"))
	}
	return errs
}
