package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/easelhq/easel/api-gateway/internal/connlimit"

	"github.com/easelhq/easel/api-gateway/internal/pricing"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/pkg/egress"
)

// Config is the gateway's configuration: the common settings and its own.
type Config struct {
	config.Common
	// HTTPAddr is the listen address.
	HTTPAddr string `env:"EASEL_HTTP_ADDR" envDefault:":8080"`
	// PublicURL is the base of result URLs; default the gateway's own address.
	PublicURL string `env:"EASEL_PUBLIC_URL"`
	// SigningSecret keys the HMAC of result URLs; at least 32 bytes. Every
	// gateway replica needs the same one.
	SigningSecret string `env:"EASEL_SIGNING_SECRET"`
	// TaskDeadline bounds a task from creation to its end.
	TaskDeadline time.Duration `env:"EASEL_TASK_DEADLINE" envDefault:"10m"`
	// DevAPIKey, when set, is made to work at start: an account named "dev"
	// (with DevCredits) gets it unless it already belongs to one. For local
	// stacks (make run, docker compose); leave it unset in production.
	DevAPIKey  string `env:"EASEL_DEV_API_KEY"`
	DevCredits int64  `env:"EASEL_DEV_CREDITS" envDefault:"1000000"`
	// AdminToken enables the admin API under /admin/v1 and guards it; unset,
	// the admin routes do not exist.
	AdminToken string `env:"EASEL_ADMIN_TOKEN"`
	// Console serves the account console at /console (docs/console.md).
	Console bool `env:"EASEL_CONSOLE" envDefault:"true"`
	// A console session ends after ConsoleIdle unused, and ConsoleMax
	// after sign-in whatever its use.
	ConsoleIdle time.Duration `env:"EASEL_CONSOLE_SESSION_IDLE" envDefault:"2h"`
	ConsoleMax  time.Duration `env:"EASEL_CONSOLE_SESSION_MAX" envDefault:"12h"`
	// DevUserEmail and DevUserPassword, with DevAPIKey, make an admin
	// console user of the dev account at start (make run prints them).
	DevUserEmail    string `env:"EASEL_DEV_USER_EMAIL"`
	DevUserPassword string `env:"EASEL_DEV_USER_PASSWORD"`
	// Prices is the price table (package pricing).
	Prices string `env:"EASEL_PRICES" envDefault:"standard=4,pro:1K=18,pro:2K=18,pro:4K=24"` // = pricing.Default
	// Default per-key rate limits (requests per second) and per-account
	// limit of unfinished tasks; accounts may override each.
	RateLimit      int `env:"EASEL_RATE_LIMIT" envDefault:"10"`
	QueryRateLimit int `env:"EASEL_QUERY_RATE_LIMIT" envDefault:"50"`
	MaxInflight    int `env:"EASEL_MAX_INFLIGHT" envDefault:"20"`
	// UploadMBPerDay is each account's budget of uploaded megabytes a UTC
	// day (POST /v1/uploads).
	UploadMBPerDay int `env:"EASEL_UPLOAD_MB_PER_DAY" envDefault:"500"`
	// FetchMaxMegapix is the workers' pixel limit on a source image, which
	// uploads are held to as well.
	FetchMaxMegapix int `env:"EASEL_FETCH_MAX_MEGAPIXELS" envDefault:"50"`
	// RateLimitFailOpen: while the rate limiter cannot reach Redis, let
	// requests through unlimited (true) or refuse them with 503 (false).
	RateLimitFailOpen bool `env:"EASEL_RATE_LIMIT_FAIL_OPEN" envDefault:"false"`
	// AuthCacheTTL bounds how long a gateway trusts what it read of a key
	// and its account: a revoked key or disabled account stops working
	// within it. At most 5s.
	AuthCacheTTL time.Duration `env:"EASEL_AUTH_CACHE_TTL" envDefault:"2s"`
	// AuthFailRate is how many requests a second whose API key or admin
	// token fails authentication a client address may make (bursts of four
	// times that); past it the gateway refuses them, 429, before any Redis
	// call. AuthFailPrefixRate is the same for a network (a /24 or a /64,
	// bursts of four times that), AuthFailGlobalRate for everyone on this
	// gateway (bursts of twice that). 0 turns a limit off.
	AuthFailRate       float64 `env:"EASEL_AUTH_FAIL_RATE" envDefault:"5"`
	AuthFailPrefixRate float64 `env:"EASEL_AUTH_FAIL_PREFIX_RATE" envDefault:"20"`
	AuthFailGlobalRate float64 `env:"EASEL_AUTH_FAIL_GLOBAL_RATE" envDefault:"500"`
	// TrustedProxies are the proxies (CIDR ranges) whose X-Forwarded-For
	// gives the client's address; from anyone else it is ignored.
	TrustedProxies string `env:"EASEL_TRUSTED_PROXIES"`
	// MaxConns caps the API's open connections; 0 derives the cap from the
	// process's file limit (nine tenths of it, at most 100,000).
	MaxConns int `env:"EASEL_MAX_CONNS" envDefault:"0"`
	// MaxConnsPerClient caps one client address's open connections (0: no
	// cap). Behind a load balancer every connection comes from it: raise
	// this, or set 0 and cap at the balancer.
	MaxConnsPerClient int `env:"EASEL_MAX_CONNS_PER_CLIENT" envDefault:"512"`
	// MaxConnsPerNetwork caps one client network's (a /24 or a /64) open
	// connections (0: no cap); behind a load balancer, as
	// MaxConnsPerClient.
	MaxConnsPerNetwork int `env:"EASEL_MAX_CONNS_PER_NETWORK" envDefault:"2048"`
	// MetricsAddr is the operations listener: /metrics, /healthz and
	// /readyz, for Prometheus and probes, apart from the public API. Empty
	// (or off) turns it off.
	MetricsAddr string `env:"EASEL_METRICS_ADDR" envDefault:":9090"`
	// MetricsOnAPI serves /metrics on the API's port too, for deployments
	// that scrape only that one (the metrics are then public unless
	// something in front hides them).
	MetricsOnAPI bool `env:"EASEL_METRICS_ON_API" envDefault:"false"`
	// BlobRedirect answers a verified result download with a redirect to a
	// presigned URL of the bucket (s3:// EASEL_BLOB_URL only), valid as long
	// as the result URL, instead of streaming the bytes through the gateway.
	BlobRedirect bool `env:"EASEL_BLOB_REDIRECT" envDefault:"false"`
}

// metricsOff is the EASEL_METRICS_ADDR that turns the operations listener
// off, besides the empty string.
const metricsOff = "off"

// connCaps returns the total and per-client connection caps for a process
// that may open files more files.
// firstByteNearCap is how long a connection accepted near the total cap
// has to send its first byte.
const firstByteNearCap = 2 * time.Second

func (c *Config) connCaps(files uint64) connlimit.Limits {
	total := c.MaxConns
	if total == 0 {
		total = 100_000
		if files > 0 {
			total = int(min(files*9/10, 100_000))
		}
	}
	return connlimit.Limits{Total: total, PerClient: c.MaxConnsPerClient, PerNetwork: c.MaxConnsPerNetwork, FirstByte: firstByteNearCap}
}

// trustedProxies are the parsed EASEL_TRUSTED_PROXIES.
func (c *Config) trustedProxies() []netip.Prefix {
	p, _ := egress.ParsePrefixes(c.TrustedProxies) // checked by Validate
	return p
}

// LoadConfig reads the gateway's configuration from environ (nil means the
// process environment) and validates it.
func LoadConfig(environ map[string]string) (Config, error) {
	return config.Load[Config](emptyMeansOff(environ))
}

// emptyMeansOff keeps an EASEL_METRICS_ADDR set to the empty string, which
// the configuration library would replace with the default, as "off".
func emptyMeansOff(environ map[string]string) map[string]string {
	if environ == nil {
		environ = map[string]string{}
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				environ[k] = v
			}
		}
	}
	if v, set := environ["EASEL_METRICS_ADDR"]; !set || v != "" {
		return environ
	}
	out := make(map[string]string, len(environ))
	for k, v := range environ {
		out[k] = v
	}
	out["EASEL_METRICS_ADDR"] = metricsOff
	return out
}

// MinSecretLen is the shortest accepted EASEL_SIGNING_SECRET.
const MinSecretLen = 32

// Validate checks the gateway's settings and fills derived defaults.
func (c *Config) Validate() error {
	errs := []error{c.Common.Validate()}
	if err := config.ValidAddr("EASEL_HTTP_ADDR", c.HTTPAddr); err != nil {
		errs = append(errs, err)
	}
	if c.MetricsAddr == metricsOff {
		c.MetricsAddr = ""
	}
	if c.MetricsAddr != "" {
		if err := config.ValidAddr("EASEL_METRICS_ADDR", c.MetricsAddr); err != nil {
			errs = append(errs, err)
		} else if samePort(c.MetricsAddr, c.HTTPAddr) {
			errs = append(errs, fmt.Errorf("EASEL_METRICS_ADDR %q and EASEL_HTTP_ADDR %q share a port: give the operations listener its own, or set EASEL_METRICS_ADDR= (off) and EASEL_METRICS_ON_API=true to serve /metrics on the API's port", c.MetricsAddr, c.HTTPAddr))
		}
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
	if c.TaskDeadline < time.Second {
		errs = append(errs, fmt.Errorf("EASEL_TASK_DEADLINE %s: want at least 1s", c.TaskDeadline))
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
	}{{"EASEL_RATE_LIMIT", c.RateLimit}, {"EASEL_QUERY_RATE_LIMIT", c.QueryRateLimit}, {"EASEL_MAX_INFLIGHT", c.MaxInflight}, {"EASEL_UPLOAD_MB_PER_DAY", c.UploadMBPerDay}} {
		if l.v < 1 || l.v > 1_000_000 {
			errs = append(errs, fmt.Errorf("%s %d: want 1 to 1000000", l.name, l.v))
		}
	}
	if c.FetchMaxMegapix < 1 || c.FetchMaxMegapix > 1000 {
		errs = append(errs, fmt.Errorf("EASEL_FETCH_MAX_MEGAPIXELS %d: want 1 to 1000", c.FetchMaxMegapix))
	}
	if c.AuthCacheTTL < 0 || c.AuthCacheTTL > 5*time.Second {
		errs = append(errs, fmt.Errorf("EASEL_AUTH_CACHE_TTL %s: want 0 to 5s (revocations must take effect within 5s)", c.AuthCacheTTL))
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"EASEL_AUTH_FAIL_RATE", c.AuthFailRate}, {"EASEL_AUTH_FAIL_PREFIX_RATE", c.AuthFailPrefixRate}, {"EASEL_AUTH_FAIL_GLOBAL_RATE", c.AuthFailGlobalRate}} {
		if r.v < 0 || r.v > 1e6 {
			errs = append(errs, fmt.Errorf("%s %g: want 0 (off) to 1000000", r.name, r.v))
		}
	}
	if c.MaxConns < 0 || c.MaxConnsPerClient < 0 || c.MaxConnsPerNetwork < 0 {
		errs = append(errs, errors.New("EASEL_MAX_CONNS, EASEL_MAX_CONNS_PER_CLIENT and EASEL_MAX_CONNS_PER_NETWORK: want 0 or more"))
	}
	if _, err := egress.ParsePrefixes(c.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("EASEL_TRUSTED_PROXIES: %w", err))
	}
	if c.DevAPIKey != "" && !c.DevMode {
		errs = append(errs, errors.New("EASEL_DEV_API_KEY works only with EASEL_DEV_MODE=true: a key everyone can read in the README must never open a production gateway; create keys with easelctl or the admin API"))
	}
	if c.ConsoleIdle < time.Minute || c.ConsoleMax < c.ConsoleIdle || c.ConsoleMax > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("EASEL_CONSOLE_SESSION_IDLE %s and EASEL_CONSOLE_SESSION_MAX %s: want 1m <= idle <= max <= 720h", c.ConsoleIdle, c.ConsoleMax))
	}
	if (c.DevUserEmail != "" || c.DevUserPassword != "") && (c.DevAPIKey == "" || c.DevUserEmail == "" || c.DevUserPassword == "") {
		errs = append(errs, errors.New("EASEL_DEV_USER_EMAIL and EASEL_DEV_USER_PASSWORD go together, with EASEL_DEV_API_KEY (development only)"))
	}
	if c.DevCredits < 0 {
		errs = append(errs, errors.New("EASEL_DEV_CREDITS: want 0 or more"))
	}
	if c.BlobRedirect && !strings.HasPrefix(c.BlobURL, "s3://") {
		errs = append(errs, errors.New("EASEL_BLOB_REDIRECT needs results in a bucket (EASEL_BLOB_URL=s3://...): a directory has no URLs to redirect to"))
	}
	return errors.Join(errs...)
}

// samePort reports whether two listen addresses would claim the same
// port: the same fixed port on the same host, or on every address.
func samePort(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool {
		ip := net.ParseIP(h)
		return h == "" || ip != nil && ip.IsUnspecified()
	}
	return ha == hb || wildcard(ha) || wildcard(hb)
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

// DefaultGCPercent is the gateway's GOGC when GOGC is unset
// (service.GCPercentDefault): 400. Its live heap is a few MB, so at Go's
// 100 it collects many times a second under load; 400 collects a quarter
// as often, for a heap up to five times what is live, which the Go memory
// limit still bounds (BENCHMARKS.md, "The hot path", compares the two).
func (Config) DefaultGCPercent() int { return 400 }
