package e2e

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/tools/testkit/localnet"
	testprograms "github.com/easelhq/easel/tools/testkit/programs"
)

// binaries are the real programs the tests run, built once per test run
// (or `make test`'s, built before it).
var binaries = testprograms.New()

// buildBinaries returns the directory of the gateway, worker, devstack and
// easelctl binaries.
func buildBinaries() (string, error) {
	return binaries.Build("gateway", "worker", "devstack", "easelctl")
}

// TestDevstackOnEmbeddedRedis runs `make run`'s program as a user would: no
// Redis configured, so the embedded miniredis; the real gateway and worker
// binaries as separate processes; the printed URL and key used with the
// API; Ctrl-C stops everything.
func TestDevstackOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	bin, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	gwAddr, wAddr := localnet.FreeAddr(t), localnet.FreeAddr(t)
	cmd := exec.Command(filepath.Join(bin, "devstack"))
	cmd.Env = append(cleanEnv(),
		"EASEL_HTTP_ADDR="+gwAddr, "EASEL_METRICS_ADDR=off",
		"EASEL_WORKER_HTTP_ADDR="+wAddr,
		"EASEL_SIM_DELAY=1s",
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("devstack logs:\n%s", logs.String())
		}
	})

	// The banner gives the URL, the key and the embedded Redis's URL.
	banner := make(chan [3]string, 1)
	go func() {
		var base, key, rurl string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if v, ok := strings.CutPrefix(line, "URL:"); ok {
				base = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "API key:"); ok {
				key = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Redis:"); ok {
				rurl, _, _ = strings.Cut(strings.TrimSpace(v), " ")
			}
			if base != "" && key != "" && rurl != "" {
				banner <- [3]string{base, key, rurl}
				base, key, rurl = "", "", ""
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var base, key, redisURL string
	select {
	case b := <-banner:
		base, key, redisURL = b[0], b[1], b[2]
	case err := <-exited:
		t.Fatalf("devstack exited: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("no banner after 60s\n%s", logs.String())
	}
	if base != "http://"+gwAddr || !strings.HasPrefix(key, "esk_") {
		t.Fatalf("banner URL %q key %q", base, key)
	}
	// A start-up is quiet: nothing warns but the dev-only settings'
	// reminders (the readiness polled before the banner included).
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "\tWARN\t") && !strings.Contains(line, "EASEL_DEV_") {
			t.Errorf("a start-up warned: %s", line)
		}
	}
	ropt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("banner Redis URL %q: %v", redisURL, err)
	}
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("banner Redis URL %q: %v", redisURL, err)
	}

	c := newClient(t, base, key)
	// The dev account is not throttled for local load tests.
	if code, hdr, body := c.do(http.MethodGet, "/v1/task/query?task_id=none", "", nil); code != http.StatusBadRequest && code != http.StatusNotFound || hdr.Get("X-RateLimit-Limit") != "5000" {
		t.Errorf("dev key query: %d limit %q %s", code, hdr.Get("X-RateLimit-Limit"), body)
	}
	src := sourceServer(t) // on loopback: devstack lets editing fetch from it
	for _, tc := range []struct {
		body string
		w, h int
	}{
		{createBody(std, `{"prompt":"a lighthouse at dusk"}`), 1024, 1024},
		{createBody(pro, `{"prompt":"make it winter","image_size":"2K","image_urls":["`+src.URL+`/400x300.png"]}`), 2400, 1792},
	} {
		id := c.create(tc.body)
		rec, _, progress := c.poll(id, 60*time.Second)
		if rec.Status != "completed" {
			t.Fatalf("task %s: %+v %+v", id, rec, rec.Error)
		}
		if len(progress) < 3 {
			t.Errorf("progress seen %v", progress)
		}
		cfg, _, _ := newClient(t, "", "").download(rec.Results[0])
		if cfg.Width != tc.w || cfg.Height != tc.h {
			t.Errorf("image %dx%d; want %dx%d", cfg.Width, cfg.Height, tc.w, tc.h)
		}
	}

	// Ctrl-C: everything stops, workers before the gateway before Redis.
	pids := childPIDs(logs.String())
	if len(pids) != 2 {
		t.Fatalf("child pids %v in logs", pids)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("devstack exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("devstack did not stop within 30s of Ctrl-C")
	}
	out := logs.String()
	iw, ig, ir := strings.Index(out, "worker stopped"), strings.Index(out, "gateway stopped"), strings.Index(out, "embedded redis stopped")
	if iw < 0 || ig < 0 || ir < 0 || iw > ig || ig > ir {
		t.Errorf("stop order wrong (want worker, then gateway, then redis):\n%s", out)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("child %d still running", pid)
		}
	}
	if conn, err := net.DialTimeout("tcp", gwAddr, 200*time.Millisecond); err == nil {
		conn.Close()
		t.Error("gateway port still open after Ctrl-C")
	}
}

// TestDevstackRefusesATakenAddress: with something else answering at the
// gateway's address (a make run left running), devstack says so and
// stops, never printing a banner for a gateway that is not its own.
func TestDevstackRefusesATakenAddress(t *testing.T) {
	t.Parallel()
	bin, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	}))
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "devstack"))
	cmd.Env = append(cleanEnv(), "EASEL_HTTP_ADDR="+other.Listener.Addr().String(), "EASEL_METRICS_ADDR=off",
		"EASEL_WORKER_HTTP_ADDR="+localnet.FreeAddr(t))
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "Easel is running") || !strings.Contains(string(out), "is taken") {
		t.Errorf("devstack on a taken address: %v\n%s", err, out)
	}
}

// TestDevstackNeedsTheBinaries fails clearly when `make build` was skipped.
func TestDevstackNeedsTheBinaries(t *testing.T) {
	t.Parallel()
	bin, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "devstack"), "--bin", t.TempDir())
	cmd.Env = append(cleanEnv(), "EASEL_HTTP_ADDR="+localnet.FreeAddr(t), "EASEL_METRICS_ADDR=off")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "make build") {
		t.Errorf("devstack without binaries: %v\n%s", err, out)
	}
}

var pidRE = regexp.MustCompile(`"pid": (\d+)`)

func childPIDs(logs string) []int {
	var pids []int
	for _, m := range pidRE.FindAllStringSubmatch(logs, -1) {
		if pid, err := strconv.Atoi(m[1]); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cleanEnv is the test's environment without any EASEL_ setting, so the
// devstack runs on its defaults (an embedded Redis) whatever the caller set.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EASEL_") {
			env = append(env, kv)
		}
	}
	return env
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
