package api_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// While the limiter's Redis is down, requests are refused (503, the default)
// or let through unlimited (EASEL_RATE_LIMIT_FAIL_OPEN), and the failure is
// logged once for the burst, then its end once.
func TestLimiterDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		failOpen  bool
		want      int // status of a create while the limiter is down
		wantQuery int // of a query for an unknown task
	}{
		{"fails closed by default", false, 503, 503},
		{"fails open when told", true, 200, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := redistest.Start(t) // the limiter's own Redis, to stop
			core, logs := observer.New(zap.DebugLevel)
			e := newEnvWith(t, nil, zap.New(core), func(d *deps) {
				rdb := redis.NewClient(&redis.Options{Addr: lim.Addr, MaxRetries: -1})
				t.Cleanup(func() { _ = rdb.Close() })
				d.Limiter = ratelimit.New(rdb)
				// Below ratelimit.LeaseFrom: every request asks Redis.
				d.Limits = web.Limits{Create: 50, Query: 50}
				d.RateLimitFailOpen = tc.failOpen
			})
			if r := e.Create(e.KeyA, okBody); r.Status != 200 || r.Header.Get("X-RateLimit-Limit") == "" {
				t.Fatalf("with the limiter up: %d %v", r.Status, r.Header)
			}
			if err := lim.Proc.Down(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				r := e.Create(e.KeyA, okBody)
				if r.Status != tc.want {
					t.Fatalf("create %d with the limiter down: %d %s", i, r.Status, r.Body)
				}
				if r.Header.Get("X-RateLimit-Limit") != "" {
					t.Errorf("X-RateLimit-Limit %q from a limiter that did not answer", r.Header.Get("X-RateLimit-Limit"))
				}
				if tc.want == 503 {
					assertEnvelope(t, r, 503, "the service is unavailable, try again")
					if r.Header.Get("Retry-After") == "" {
						t.Error("503 without Retry-After")
					}
				}
				if q := e.Query(e.KeyA, "task_lumen_1"); q.Status != tc.wantQuery {
					t.Fatalf("query with the limiter down: %d %s", q.Status, q.Body)
				}
			}
			if err := lim.Proc.Restart(); err != nil {
				t.Fatal(err)
			}
			// The client redials a refused server about once a second.
			for deadline := time.Now().Add(10 * time.Second); ; {
				r := e.Create(e.KeyA, okBody)
				if r.Status == 200 && r.Header.Get("X-RateLimit-Limit") != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("with the limiter back: %d %v", r.Status, r.Header)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Ten failed requests: one line when they began, one when they
			// ended, no warning per request beyond its access-log line.
			var lines []string
			for _, l := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
				if l.Message != "request" {
					lines = append(lines, l.Message)
				}
			}
			for _, l := range logs.FilterLevelExact(zapcore.InfoLevel).FilterMessageSnippet("rate limiter").All() {
				lines = append(lines, l.Message)
			}
			want := []string{"rate limiter: Redis: failing", "rate limiter: Redis: recovered"}
			if len(lines) != 2 || lines[0] != want[0] || lines[1] != want[1] {
				t.Errorf("logged %q; want %q", lines, want)
			}
		})
	}
}
