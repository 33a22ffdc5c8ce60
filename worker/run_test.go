package worker

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/easelhq/easel/tools/testkit/configtest"
	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// startWorker runs a worker on a private Redis with env added to a minimal
// configuration, and returns its health address once it is ready.
func startWorker(t *testing.T, env map[string]string) string {
	t.Helper()
	addr := runWorker(t, redistest.Start(t).URL, env)
	localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 10*time.Second)
	return addr
}

// runWorker runs a worker on redisURL and returns its health address at
// once.
func runWorker(t *testing.T, redisURL string, env map[string]string) string {
	t.Helper()
	return runWorkerWith(t, redisURL, env, Options{})
}

// runWorkerWith is runWorker with opts (its health listener is the
// test's own).
func runWorkerWith(t *testing.T, redisURL string, env map[string]string, opts Options) string {
	t.Helper()
	hl := localnet.Listen(t)
	opts.HealthListener = hl
	base := configtest.Env(nil, "EASEL_REDIS_URL", redisURL, "EASEL_BLOB_URL", "file://"+t.TempDir(),
		"EASEL_WORKER_HTTP_ADDR", hl.Addr().String(), "EASEL_LOG_LEVEL", "warn")
	cfg := configtest.Load(t, LoadConfig, base, env)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), opts)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker stopped with: %v", err)
		}
	})
	return hl.Addr().String()
}

// The worker is ready only while Redis takes its writes; not ready, it says
// when to ask again.
func TestWorkerReadinessNeedsWrites(t *testing.T) {
	srv := redistest.Start(t)
	addr := runWorker(t, srv.URL, nil)
	localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 10*time.Second)
	srv.RefuseWrites(t)
	resp := localnet.WaitStatus(t, "http://"+addr+"/readyz", 503, 5*time.Second)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("the worker's 503 has no Retry-After")
	}
	localnet.WaitStatus(t, "http://"+addr+"/healthz", 200, time.Second)
	srv.AcceptWrites(t)
	localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 5*time.Second)
}

// Started before its Redis, the worker waits for it (live, not ready)
// instead of exiting.
func TestWorkerStartsBeforeRedis(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Proc.Down(); err != nil {
		t.Fatal(err)
	}
	addr := runWorker(t, srv.URL, map[string]string{"EASEL_REDIS_START_TIMEOUT": "60s"})
	localnet.WaitStatus(t, "http://"+addr+"/healthz", 200, 10*time.Second)
	// Not ready all through go-redis's first dial retries (about 1.9 s)
	// and past them.
	localnet.HoldsStatus(t, "http://"+addr+"/readyz", 503, 2500*time.Millisecond)
	if err := srv.Proc.Restart(); err != nil {
		t.Fatal(err)
	}
	localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 15*time.Second)
}

// The health server closes keep-alive connections left idle, as the
// gateway does: an idle connection once stayed open 40 s and more.
func TestHealthServerClosesIdleConnections(t *testing.T) {
	addr := startWorker(t, map[string]string{"EASEL_HTTP_IDLE_TIMEOUT": "300ms"})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: w\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	// Now idle: the server must hang up well before this deadline.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the server sent more bytes on an idle connection")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("an idle keep-alive connection was still open after 10 s (idle timeout 300 ms)")
	}
}
