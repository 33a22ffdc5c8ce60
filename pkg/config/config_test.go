package config

import (
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/pricing"
)

func environ(kv ...string) map[string]string {
	m := map[string]string{"EASEL_REDIS_URL": "redis://localhost:6379/0", "EASEL_SIGNING_SECRET": strings.Repeat("s", 32)}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "<unset>" {
			delete(m, kv[i])
			continue
		}
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestGatewayDefaults(t *testing.T) {
	c, err := LoadGateway(environ())
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8080" || c.PublicURL != "http://localhost:8080" || c.ModelFamily != "lumen" ||
		c.TaskDeadline != 10*time.Minute || c.BlobDir != DefaultBlobDir() || c.FetchAllowPrivate {
		t.Errorf("defaults: %+v", c)
	}
}

func TestDefaultPricesArePricingDefault(t *testing.T) {
	c, err := LoadGateway(environ())
	if err != nil {
		t.Fatal(err)
	}
	if c.Prices != pricing.Default {
		t.Errorf("EASEL_PRICES default %q differs from pricing.Default %q", c.Prices, pricing.Default)
	}
	if c.RateLimit != 10 || c.QueryRateLimit != 50 || c.MaxInflight != 20 || c.AuthCacheTTL != 2*time.Second || c.AdminToken != "" {
		t.Errorf("defaults %+v", c)
	}
}

func TestWorkerDefaults(t *testing.T) {
	c, err := LoadWorker(environ())
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8081" || c.Queues != "standard,pro" || c.Generator != "procedural" || c.SimDelay != 3*time.Second || c.TaskCheckInterval != 50*time.Millisecond {
		t.Errorf("defaults: %+v", c)
	}
}

func TestGatewayErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // substring of the error; "" for valid
	}{
		{"valid", environ(), ""},
		{"no redis url", environ("EASEL_REDIS_URL", "<unset>"), "EASEL_REDIS_URL is required"},
		{"bad redis scheme", environ("EASEL_REDIS_URL", "http://localhost:6379"), "EASEL_REDIS_URL"},
		{"redis password not echoed", environ("EASEL_REDIS_URL", "mysql://u:hunter2@h:1"), "EASEL_REDIS_URL"},
		{"no secret", environ("EASEL_SIGNING_SECRET", "<unset>"), "EASEL_SIGNING_SECRET is required"},
		{"no secret in dev mode", environ("EASEL_SIGNING_SECRET", "<unset>", "EASEL_DEV_MODE", "true"), ""},
		{"short secret", environ("EASEL_SIGNING_SECRET", "short"), "at least 32"},
		{"bad family", environ("EASEL_MODEL_FAMILY", "Lumen"), "EASEL_MODEL_FAMILY"},
		{"bad addr", environ("EASEL_HTTP_ADDR", "8080"), "EASEL_HTTP_ADDR"},
		{"public url with path", environ("EASEL_PUBLIC_URL", "https://x.example.com/api"), "EASEL_PUBLIC_URL"},
		{"public url not absolute", environ("EASEL_PUBLIC_URL", "x.example.com"), "EASEL_PUBLIC_URL"},
		{"bad bool", environ("EASEL_FETCH_ALLOW_PRIVATE", "maybe"), "EASEL_FETCH_ALLOW_PRIVATE: cannot parse as true or false"},
		{"bad duration", environ("EASEL_TASK_DEADLINE", "10"), "EASEL_TASK_DEADLINE: cannot parse as a Go duration"},
		{"tiny deadline", environ("EASEL_TASK_DEADLINE", "1ms"), "EASEL_TASK_DEADLINE"},
		{"bad log format", environ("EASEL_LOG_FORMAT", "xml"), "EASEL_LOG_FORMAT"},
		{"bad log level", environ("EASEL_LOG_LEVEL", "loud"), "EASEL_LOG_LEVEL"},
		{"short admin token", environ("EASEL_ADMIN_TOKEN", "letmein"), "EASEL_ADMIN_TOKEN"},
		{"bad prices", environ("EASEL_PRICES", "standard=4"), "EASEL_PRICES: prices missing for pro:1K"},
		{"zero rate limit", environ("EASEL_RATE_LIMIT", "0"), "EASEL_RATE_LIMIT"},
		{"slow revocation", environ("EASEL_AUTH_CACHE_TTL", "10s"), "within 5s"},
		{"no auth cache", environ("EASEL_AUTH_CACHE_TTL", "0s"), ""},
		{"negative dev credits", environ("EASEL_DEV_CREDITS", "-1"), "EASEL_DEV_CREDITS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadGateway(tt.env)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v; want one containing %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks a password: %v", err)
			}
		})
	}
}

func TestWorkerErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"valid", environ(), ""},
		{"no secret needed", environ("EASEL_SIGNING_SECRET", "<unset>"), ""},
		{"queues", environ("EASEL_QUEUES", "standard:2, pro:5"), ""},
		{"unknown queue", environ("EASEL_QUEUES", "standard,turbo"), `unknown queue "turbo"`},
		{"empty queues", environ("EASEL_QUEUES", " , "), "name at least one"},
		{"bad weight", environ("EASEL_QUEUES", "pro:0"), "weight"},
		{"duplicate queue", environ("EASEL_QUEUES", "pro,pro"), "listed twice"},
		{"negative delay", environ("EASEL_SIM_DELAY", "-1s"), "EASEL_SIM_DELAY"},
		{"zero delay", environ("EASEL_SIM_DELAY", "0"), ""},
		{"bad concurrency", environ("EASEL_WORKER_CONCURRENCY", "0"), "EASEL_WORKER_CONCURRENCY"},
		{"unknown generator", environ("EASEL_GENERATOR", "dalle"), "EASEL_GENERATOR"},
		{"check interval", environ("EASEL_TASK_CHECK_INTERVAL", "0s"), "EASEL_TASK_CHECK_INTERVAL"},
		{"short retention", environ("EASEL_BLOB_RETENTION", "10m"), "EASEL_BLOB_RETENTION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadWorker(tt.env)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v; want one containing %q", err, tt.want)
			}
		})
	}
}

func TestParseQueues(t *testing.T) {
	q, err := ParseQueues("standard:2,pro")
	if err != nil || q[catalog.Standard] != 2 || q[catalog.Pro] != 1 || len(q) != 2 {
		t.Errorf("ParseQueues = %v, %v", q, err)
	}
}

func TestDefaultPublicURL(t *testing.T) {
	for addr, want := range map[string]string{
		":8080":          "http://localhost:8080",
		"0.0.0.0:9000":   "http://localhost:9000",
		"[::]:9000":      "http://localhost:9000",
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"[::1]:8080":     "http://[::1]:8080",
		"api.local:80":   "http://api.local:80",
	} {
		if got := DefaultPublicURL(addr); got != want {
			t.Errorf("DefaultPublicURL(%q) = %q; want %q", addr, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	names := Names()
	for _, want := range []string{"EASEL_REDIS_URL", "EASEL_HTTP_ADDR", "EASEL_WORKER_HTTP_ADDR", "EASEL_PUBLIC_URL", "EASEL_BLOB_DIR",
		"EASEL_SIGNING_SECRET", "EASEL_QUEUES", "EASEL_SIM_DELAY", "EASEL_FETCH_ALLOW_PRIVATE", "EASEL_MODEL_FAMILY"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("Names() lacks %s", want)
		}
	}
}
