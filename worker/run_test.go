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

	"github.com/easelhq/easel/tools/testkit/redistest"
)

// startWorker runs a worker on a private Redis with env added to a minimal
// configuration, and returns its health address.
func startWorker(t *testing.T, env map[string]string) string {
	t.Helper()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		"EASEL_REDIS_URL":        redistest.Start(t).URL,
		"EASEL_BLOB_DIR":         t.TempDir(),
		"EASEL_WORKER_HTTP_ADDR": hl.Addr().String(),
		"EASEL_LOG_LEVEL":        "warn",
	}
	for k, v := range env {
		base[k] = v
	}
	cfg, err := LoadConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Options{HealthListener: hl})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker stopped with: %v", err)
		}
	})
	addr := hl.Addr().String()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
