package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/tools/testkit/localnet"
)

// TestStartupFailuresEndWithAMessage runs the real binaries with each way
// they can fail to start: a port taken (each listener), a bad setting, a
// Redis that never answers. Each must exit non-zero, its last line naming
// the service and the cause, and never panic.
func TestStartupFailuresEndWithAMessage(t *testing.T) {
	t.Parallel()
	dir, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	// Held for the whole test: the cleanup keeps it referenced until the
	// parallel cases below have ended. Unreferenced once this function
	// returns (before they run), the listener would be closed by the
	// garbage collector at any moment, and its port free again.
	taken := listen(t)
	t.Cleanup(func() { _ = taken.Close() })
	takenAddr := taken.Addr().String()
	closedRedis := "redis://" + localnet.FreeAddr(t)
	secret := "EASEL_SIGNING_SECRET=0123456789abcdef0123456789abcdef0123456789abcdef"
	gatewayBase := []string{"EASEL_REDIS_URL=" + closedRedis, secret, "EASEL_PUBLIC_URL=http://127.0.0.1:1",
		"EASEL_HTTP_ADDR=127.0.0.1:0", "EASEL_METRICS_ADDR=off"}
	workerBase := []string{"EASEL_REDIS_URL=" + closedRedis, "EASEL_WORKER_HTTP_ADDR=127.0.0.1:0"}
	// Only the cases about Redis give up on it soon: elsewhere the wait for
	// Redis (60 s by default) must not end before the failure the case is
	// about, however slowly a loaded machine starts the process.
	noRedis := "EASEL_REDIS_START_TIMEOUT=1s"
	cases := []struct {
		name, bin string
		env       []string
		want      string // in the last line
	}{
		{"gateway API port taken", "gateway", []string{"EASEL_HTTP_ADDR=" + takenAddr}, "address already in use"},
		{"gateway metrics port taken", "gateway", []string{"EASEL_METRICS_ADDR=" + takenAddr}, "EASEL_METRICS_ADDR"},
		{"gateway pprof port taken", "gateway", []string{"EASEL_PPROF_ADDR=" + takenAddr}, "EASEL_PPROF_ADDR"},
		{"gateway bad setting", "gateway", []string{"EASEL_REDIS_TIMEOUT=soon"}, "EASEL_REDIS_TIMEOUT"},
		{"gateway without a signing secret", "gateway", []string{"EASEL_SIGNING_SECRET="}, "EASEL_SIGNING_SECRET"},
		{"gateway Redis never answers", "gateway", []string{noRedis}, "EASEL_REDIS_START_TIMEOUT"},
		{"worker health port taken", "worker", []string{"EASEL_WORKER_HTTP_ADDR=" + takenAddr}, "address already in use"},
		{"worker pprof port taken", "worker", []string{"EASEL_PPROF_ADDR=" + takenAddr}, "EASEL_PPROF_ADDR"},
		{"worker bad setting", "worker", []string{"EASEL_WORKER_CONCURRENCY=many"}, "EASEL_WORKER_CONCURRENCY"},
		{"worker Redis never answers", "worker", []string{noRedis}, "EASEL_REDIS_START_TIMEOUT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base := gatewayBase
			if c.bin == "worker" {
				base = workerBase
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, c.bin))
			// Later entries win: the case's settings override the base's.
			cmd.Env = append(append([]string{"PATH=/usr/bin:/bin"}, base...), c.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			out := stderr.String()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 || ctx.Err() != nil {
				t.Fatalf("want a non-zero exit, got %v (ctx %v)\n%s", err, ctx.Err(), out)
			}
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("the start-up failure panicked:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, c.bin+": ") || !strings.Contains(last, c.want) {
				t.Fatalf("last line %q: want %q and %q\n%s", last, c.bin+": ", c.want, out)
			}
			for _, l := range lines {
				if strings.Contains(l, "write error") {
					t.Errorf("a logging error line: %q", l)
				}
			}
		})
	}
}
