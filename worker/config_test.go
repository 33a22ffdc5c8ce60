package worker

import (
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/tools/testkit/configtest"
	"github.com/easelhq/easel/worker/internal/processor"
)

func environ(kv ...string) map[string]string {
	return configtest.Env(map[string]string{"EASEL_REDIS_URL": "redis://localhost:6379/0"}, kv...)
}

func TestConfigDefaults(t *testing.T) {
	c, err := LoadConfig(environ())
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8081" || c.Queues != "standard,pro" || c.Generator != "procedural" || c.SimDelay != 3*time.Second || c.TaskCheckInterval != 50*time.Millisecond {
		t.Errorf("defaults: %+v", c)
	}
	if c.ProgressStep != processor.DefaultProgressStep || c.ProgressInterval != processor.DefaultProgressInterval {
		t.Errorf("progress pacing %d points, %s; want the processor's defaults", c.ProgressStep, c.ProgressInterval)
	}
	if c.WebhookConcurrency != 50 || c.WebhookTimeout != 10*time.Second || c.WebhookRetryInitial != 5*time.Second || c.PublicURL != "http://localhost:8080" || c.SigningSecret != "" {
		t.Errorf("webhook defaults: %+v", c)
	}
	c, err = LoadConfig(environ("EASEL_PUBLIC_URL", "https://images.example.com/"))
	if err != nil || c.PublicURL != "https://images.example.com" {
		t.Errorf("EASEL_PUBLIC_URL with a slash: %q, %v", c.PublicURL, err)
	}
}

func TestConfigErrors(t *testing.T) {
	configtest.Run(t, func(env map[string]string) error { _, err := LoadConfig(env); return err }, []configtest.Case{
		{Name: "valid", Env: environ(), Want: ""},
		{Name: "no signing secret needed", Env: environ("EASEL_SIGNING_SECRET", configtest.Unset), Want: ""},
		{Name: "queues", Env: environ("EASEL_QUEUES", "standard:2, pro:5"), Want: ""},
		{Name: "decode budget under a task's", Env: environ("EASEL_DECODE_BUDGET_MB", "300"), Want: "EASEL_DECODE_BUDGET_MB 300"},
		{Name: "decode budget of one task", Env: environ("EASEL_DECODE_BUDGET_MB", "400"), Want: ""},
		{Name: "unknown queue", Env: environ("EASEL_QUEUES", "standard,turbo"), Want: `unknown queue "turbo"`},
		{Name: "empty queues", Env: environ("EASEL_QUEUES", " , "), Want: "name at least one"},
		{Name: "bad weight", Env: environ("EASEL_QUEUES", "pro:0"), Want: "weight"},
		{Name: "duplicate queue", Env: environ("EASEL_QUEUES", "pro,pro"), Want: "listed twice"},
		{Name: "negative delay", Env: environ("EASEL_SIM_DELAY", "-1s"), Want: "EASEL_SIM_DELAY"},
		{Name: "zero delay", Env: environ("EASEL_SIM_DELAY", "0"), Want: ""},
		{Name: "progress step", Env: environ("EASEL_PROGRESS_STEP", "0"), Want: "EASEL_PROGRESS_STEP"},
		{Name: "progress step of one point", Env: environ("EASEL_PROGRESS_STEP", "1"), Want: ""},
		{Name: "progress interval", Env: environ("EASEL_PROGRESS_INTERVAL", "10ms"), Want: "EASEL_PROGRESS_INTERVAL"},
		{Name: "bad concurrency", Env: environ("EASEL_WORKER_CONCURRENCY", "0"), Want: "EASEL_WORKER_CONCURRENCY"},
		{Name: "unknown generator", Env: environ("EASEL_GENERATOR", "dalle"), Want: "EASEL_GENERATOR"},
		{Name: "gemini without a key", Env: environ("EASEL_GENERATOR", "gemini"), Want: "EASEL_GEMINI_API_KEY"},
		{Name: "bad gemini models", Env: environ("EASEL_GENERATOR", "gemini", "EASEL_GEMINI_API_KEY", "k", "EASEL_GEMINI_MODELS", "turbo=x"), Want: "EASEL_GEMINI_MODELS"},
		{Name: "check interval", Env: environ("EASEL_TASK_CHECK_INTERVAL", "0s"), Want: "EASEL_TASK_CHECK_INTERVAL"},
		{Name: "short retention", Env: environ("EASEL_BLOB_RETENTION", "10m"), Want: "EASEL_BLOB_RETENTION"},
		{Name: "retry attempts", Env: environ("EASEL_RETRY_MAX_ATTEMPTS", "0"), Want: "EASEL_RETRY_MAX_ATTEMPTS"},
		{Name: "common settings checked", Env: environ("EASEL_LOG_LEVEL", "loud"), Want: "EASEL_LOG_LEVEL"},
		{Name: "webhooks off", Env: environ("EASEL_WEBHOOK_CONCURRENCY", "0"), Want: ""},
		{Name: "negative webhook concurrency", Env: environ("EASEL_WEBHOOK_CONCURRENCY", "-1"), Want: "EASEL_WEBHOOK_CONCURRENCY"},
		{Name: "webhook timeout too short", Env: environ("EASEL_WEBHOOK_TIMEOUT", "500ms"), Want: "EASEL_WEBHOOK_TIMEOUT"},
		{Name: "webhook timeout too long", Env: environ("EASEL_WEBHOOK_TIMEOUT", "2m"), Want: "EASEL_WEBHOOK_TIMEOUT"},
		{Name: "short webhook retries for tests", Env: environ("EASEL_WEBHOOK_RETRY_INITIAL", "50ms"), Want: ""},
		{Name: "webhook retry of nothing", Env: environ("EASEL_WEBHOOK_RETRY_INITIAL", "0s"), Want: "EASEL_WEBHOOK_RETRY_INITIAL"},
		{Name: "public url", Env: environ("EASEL_PUBLIC_URL", "https://images.example.com/"), Want: ""},
		{Name: "public url with a path", Env: environ("EASEL_PUBLIC_URL", "https://images.example.com/v1"), Want: "EASEL_PUBLIC_URL"},
		{Name: "public url not http", Env: environ("EASEL_PUBLIC_URL", "images.example.com"), Want: "EASEL_PUBLIC_URL"},
		{Name: "short signing secret", Env: environ("EASEL_SIGNING_SECRET", "short"), Want: "EASEL_SIGNING_SECRET is 5 bytes"},
		{Name: "signing secret", Env: environ("EASEL_SIGNING_SECRET", "0123456789abcdef0123456789abcdef"), Want: ""},
	})
}

func TestParseQueues(t *testing.T) {
	q, err := ParseQueues("standard:2,pro")
	if err != nil || q[catalog.Standard] != 2 || q[catalog.Pro] != 1 || len(q) != 2 {
		t.Errorf("ParseQueues = %v, %v", q, err)
	}
}
