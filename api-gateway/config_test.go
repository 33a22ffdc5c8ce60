package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/api-gateway/internal/pricing"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/tools/testkit/configtest"
)

func environ(kv ...string) map[string]string {
	return configtest.Env(map[string]string{"EASEL_REDIS_URL": "redis://localhost:6379/0", "EASEL_SIGNING_SECRET": strings.Repeat("s", 32)}, kv...)
}

func TestConfigDefaults(t *testing.T) {
	c, err := LoadConfig(environ())
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8080" || c.PublicURL != "http://localhost:8080" || c.ModelFamily != "lumen" ||
		c.TaskDeadline != 10*time.Minute || c.BlobURL != "file://"+config.DefaultBlobDir() || c.FetchAllowPrivate {
		t.Errorf("defaults: %+v", c)
	}
	if c.Prices != pricing.Default {
		t.Errorf("EASEL_PRICES default %q differs from pricing.Default %q", c.Prices, pricing.Default)
	}
	if c.RateLimit != 10 || c.QueryRateLimit != 50 || c.MaxInflight != 20 || c.AuthCacheTTL != 2*time.Second || c.AdminToken != "" {
		t.Errorf("defaults %+v", c)
	}
}

func TestConfigErrors(t *testing.T) {
	configtest.Run(t, func(env map[string]string) error { _, err := LoadConfig(env); return err }, []configtest.Case{
		{Name: "valid", Env: environ(), Want: ""},
		{Name: "no redis url", Env: environ("EASEL_REDIS_URL", configtest.Unset), Want: "EASEL_REDIS_URL is required"},
		{Name: "no secret", Env: environ("EASEL_SIGNING_SECRET", configtest.Unset), Want: "EASEL_SIGNING_SECRET is required"},
		{Name: "redirect from a directory", Env: environ("EASEL_BLOB_REDIRECT", "true"), Want: "EASEL_BLOB_REDIRECT needs results in a bucket"},
		{Name: "redirect from a bucket", Env: environ("EASEL_BLOB_REDIRECT", "true", "EASEL_BLOB_URL", "s3://easel-results"), Want: ""},
		{Name: "no secret in dev mode", Env: environ("EASEL_SIGNING_SECRET", configtest.Unset, "EASEL_DEV_MODE", "true"), Want: ""},
		{Name: "short secret", Env: environ("EASEL_SIGNING_SECRET", "short"), Want: "at least 32"},
		{Name: "bad addr", Env: environ("EASEL_HTTP_ADDR", "8080"), Want: "EASEL_HTTP_ADDR"},
		{Name: "public url with path", Env: environ("EASEL_PUBLIC_URL", "https://x.example.com/api"), Want: "EASEL_PUBLIC_URL"},
		{Name: "public url not absolute", Env: environ("EASEL_PUBLIC_URL", "x.example.com"), Want: "EASEL_PUBLIC_URL"},
		{Name: "bad duration", Env: environ("EASEL_TASK_DEADLINE", "10"), Want: "EASEL_TASK_DEADLINE: cannot parse as a Go duration"},
		{Name: "tiny deadline", Env: environ("EASEL_TASK_DEADLINE", "1ms"), Want: "EASEL_TASK_DEADLINE"},
		{Name: "short admin token", Env: environ("EASEL_ADMIN_TOKEN", "letmein"), Want: "EASEL_ADMIN_TOKEN"},
		{Name: "bad prices", Env: environ("EASEL_PRICES", "standard=4"), Want: "EASEL_PRICES: prices missing for pro:1K"},
		{Name: "zero rate limit", Env: environ("EASEL_RATE_LIMIT", "0"), Want: "EASEL_RATE_LIMIT"},
		{Name: "slow revocation", Env: environ("EASEL_AUTH_CACHE_TTL", "10s"), Want: "within 5s"},
		{Name: "no auth cache", Env: environ("EASEL_AUTH_CACHE_TTL", "0s"), Want: ""},
		{Name: "negative dev credits", Env: environ("EASEL_DEV_CREDITS", "-1"), Want: "EASEL_DEV_CREDITS"},
		{Name: "dev key outside dev mode", Env: environ("EASEL_DEV_API_KEY", "esk_local_development_key_do_not_deploy_01"), Want: "EASEL_DEV_API_KEY works only with EASEL_DEV_MODE=true"},
		{Name: "dev key in dev mode", Env: environ("EASEL_DEV_API_KEY", "esk_local_development_key_do_not_deploy_01", "EASEL_DEV_MODE", "true"), Want: ""},
		{Name: "bad metrics addr", Env: environ("EASEL_METRICS_ADDR", "9090"), Want: "EASEL_METRICS_ADDR"},
		{Name: "metrics on the API's port", Env: environ("EASEL_METRICS_ADDR", ":8080"), Want: "share a port"},
		{Name: "metrics on the API's port, one host named", Env: environ("EASEL_HTTP_ADDR", "127.0.0.1:8080", "EASEL_METRICS_ADDR", ":8080"), Want: "share a port"},
		{Name: "metrics on the API's port number, another host", Env: environ("EASEL_HTTP_ADDR", "127.0.0.1:8080", "EASEL_METRICS_ADDR", "10.0.0.1:8080"), Want: ""},
		{Name: "both on free ports", Env: environ("EASEL_HTTP_ADDR", "127.0.0.1:0", "EASEL_METRICS_ADDR", "127.0.0.1:0"), Want: ""},
		{Name: "bad metrics on API", Env: environ("EASEL_METRICS_ON_API", "yes please"), Want: "EASEL_METRICS_ON_API"},
	})
}

func TestMetricsConfig(t *testing.T) {
	for _, tt := range []struct {
		name  string
		env   map[string]string
		addr  string
		onAPI bool
	}{
		{"default", environ(), ":9090", false},
		{"empty: off", environ("EASEL_METRICS_ADDR", ""), "", false},
		{"off", environ("EASEL_METRICS_ADDR", "off"), "", false},
		{"an address", environ("EASEL_METRICS_ADDR", "0.0.0.0:9100"), "0.0.0.0:9100", false},
		{"on the API too", environ("EASEL_METRICS_ON_API", "true"), ":9090", true},
		{"on the API only", environ("EASEL_METRICS_ADDR", "", "EASEL_METRICS_ON_API", "true"), "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.MetricsAddr != tt.addr || c.MetricsOnAPI != tt.onAPI {
				t.Errorf("EASEL_METRICS_ADDR %q, EASEL_METRICS_ON_API %v; want %q, %v", c.MetricsAddr, c.MetricsOnAPI, tt.addr, tt.onAPI)
			}
		})
	}
	// The process environment, as the binary reads it.
	t.Setenv("EASEL_REDIS_URL", "redis://localhost:6379/0")
	t.Setenv("EASEL_SIGNING_SECRET", strings.Repeat("s", 32))
	t.Setenv("EASEL_METRICS_ADDR", "")
	if c, err := LoadConfig(nil); err != nil || c.MetricsAddr != "" {
		t.Errorf("EASEL_METRICS_ADDR= in the environment: %q %v; want off", c.MetricsAddr, err)
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
