// Command devstack runs the whole Easel stack on one machine for development:
// `make run` builds the binaries and starts it.
//
// Without EASEL_REDIS_URL it starts an embedded Redis (miniredis); then it
// starts the gateway and the worker as separate processes (the production
// topology), has the gateway create a dev account for an API key
// (EASEL_DEV_API_KEY, or a new one), and prints the URL and the key. Ctrl-C
// stops the workers, then the gateway, then Redis.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/tools/devredis"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	binDir := fs.String("bin", "", "directory holding the gateway and worker binaries (default: this program's directory)")
	workers := fs.Int("workers", 1, "number of worker processes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workers < 1 || *workers > 16 {
		return fmt.Errorf("--workers %d: want 1 to 16", *workers)
	}
	if *binDir == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		*binDir = filepath.Dir(self)
	}
	log, err := logging.New(os.Stderr, envOr("EASEL_LOG_LEVEL", "info"), "console", "devstack")
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	// The binaries first: nothing starts (not even the embedded Redis,
	// which could take a port meant for the gateway) for a stack that
	// cannot run.
	for _, name := range []string{"gateway", "worker"} {
		if _, err := os.Stat(filepath.Join(*binDir, name)); err != nil {
			return fmt.Errorf("%s binary: %w (run `make build` first)", name, err)
		}
	}

	env, cleanup, err := stackEnv()
	if err != nil {
		return err
	}
	defer cleanup()

	redisURL := os.Getenv("EASEL_REDIS_URL")
	if redisURL == "" {
		srv, err := devredis.Start(envOr("EASEL_DEV_REDIS_ADDR", "127.0.0.1:0"))
		if err != nil {
			return err
		}
		defer func() {
			srv.Close()
			log.Info("embedded redis stopped")
		}()
		redisURL = srv.URL()
		log.Info("embedded redis started (data lives in memory until devstack stops)", zap.String("addr", srv.Addr()))
		// The embedded Redis runs scripts in an interpreted Lua, in this
		// process: on a busy laptop a call can outlast the 400ms meant
		// for a real server.
		if env["EASEL_REDIS_TIMEOUT"] == "" {
			env["EASEL_REDIS_TIMEOUT"] = "2s"
		}
	}
	env["EASEL_REDIS_URL"] = redisURL

	// The gateway makes the key work when it starts.
	key := env["EASEL_DEV_API_KEY"]

	// The banner waits on the gateway's readiness at its address: another
	// program there (a make run left running) would answer for it.
	if err := addrFree(env["EASEL_HTTP_ADDR"]); err != nil {
		return err
	}

	procs := &processes{log: log}
	defer procs.stopAll()
	gwEnv := merge(env, nil)
	if err := procs.start(filepath.Join(*binDir, "gateway"), "gateway", gwEnv); err != nil {
		return err
	}
	for i := 0; i < *workers; i++ {
		wEnv := merge(env, map[string]string{"EASEL_WORKER_HTTP_ADDR": workerAddr(env["EASEL_WORKER_HTTP_ADDR"], i)})
		if err := procs.start(filepath.Join(*binDir, "worker"), "worker-"+strconv.Itoa(i+1), wEnv); err != nil {
			return err
		}
	}

	base := env["EASEL_PUBLIC_URL"]
	if err := waitReady(ctx, base+"/readyz", procs.exited); err != nil {
		return err
	}
	fmt.Fprintf(out, `
Easel is running.

  URL:      %s
  API key:  %s
  Console:  %s/console  (sign in as %s, password %s)
  Redis:    %s  (for bin/easelctl: export EASEL_REDIS_URL=%s)

  curl -s -X POST %s/v1/task/create \
    -H "Authorization: Bearer %s" -H "Content-Type: application/json" \
    -d '{"model":"%s-2.5-flash-image","task_type":"image","input":{"prompt":"a lighthouse at dusk"}}'

Press Ctrl-C to stop.
`, base, key, base, env["EASEL_DEV_USER_EMAIL"], env["EASEL_DEV_USER_PASSWORD"], redisURL, redisURL, base, key, env["EASEL_MODEL_FAMILY"])

	select {
	case <-ctx.Done():
		log.Info("stopping")
		return nil
	case p := <-procs.exited:
		return fmt.Errorf("%s exited unexpectedly: %v", p.name, p.err)
	}
}

// stackEnv is the environment of the gateway and the workers: the caller's,
// with dev defaults for what it leaves unset.
func stackEnv() (map[string]string, func(), error) {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	cleanup := func() {}
	setDefault := func(k, v string) {
		if env[k] == "" {
			env[k] = v
		}
	}
	setDefault("EASEL_DEV_MODE", "true")
	setDefault("EASEL_FETCH_ALLOW_PRIVATE", "true")
	setDefault("EASEL_LOG_FORMAT", "console")
	setDefault("EASEL_MODEL_FAMILY", "lumen")
	setDefault("EASEL_HTTP_ADDR", "127.0.0.1:8080")
	setDefault("EASEL_WORKER_HTTP_ADDR", "127.0.0.1:8081")
	setDefault("EASEL_METRICS_ADDR", "127.0.0.1:9090")
	// Progress written as it rises, to be watched: production writes a
	// 20-second generation four times.
	setDefault("EASEL_PROGRESS_STEP", "1")
	setDefault("EASEL_PROGRESS_INTERVAL", "400ms")
	setDefault("EASEL_PUBLIC_URL", localURL(env["EASEL_HTTP_ADDR"]))
	if env["EASEL_SIGNING_SECRET"] == "" {
		// One secret for the run, shared by every process.
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		env["EASEL_SIGNING_SECRET"] = hex.EncodeToString(b)
	}
	// The dev account's console user: a fixed sign-in, like make run's
	// fixed key, for a local stack only.
	setDefault("EASEL_DEV_USER_EMAIL", "dev@easel.localhost")
	setDefault("EASEL_DEV_USER_PASSWORD", "easel-dev-password")
	if env["EASEL_DEV_API_KEY"] == "" {
		key, err := account.NewKey()
		if err != nil {
			return nil, cleanup, err
		}
		env["EASEL_DEV_API_KEY"] = key
	}
	// Results in a directory of their own, unless a store is named.
	if env["EASEL_BLOB_URL"] == "" {
		dir, err := os.MkdirTemp("", "easel-dev-blobs-")
		if err != nil {
			return nil, cleanup, err
		}
		env["EASEL_BLOB_URL"] = "file://" + filepath.ToSlash(dir)
		cleanup = func() { _ = os.RemoveAll(dir) }
	}
	return env, cleanup, nil
}

// localURL is how a browser on this machine reaches a listen address.
func localURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// workerAddr gives worker i its own health port: base port + i.
func workerAddr(base string, i int) string {
	host, port, err := net.SplitHostPort(base)
	if err != nil || i == 0 {
		return base
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return base
	}
	return net.JoinHostPort(host, strconv.Itoa(p+i))
}

// addrFree checks nothing listens on the gateway's address.
func addrFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("the gateway's address %s is taken (another make run?): stop what holds it, or set EASEL_HTTP_ADDR: %w", addr, err)
	}
	return ln.Close()
}

func waitReady(ctx context.Context, url string, exited <-chan exit) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway not ready at %s after 30s", url)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-exited:
			return fmt.Errorf("%s exited during start-up: %v", p.name, p.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func merge(base, over map[string]string) []string {
	out := make([]string, 0, len(base)+len(over))
	for k, v := range base {
		if _, ok := over[k]; !ok {
			out = append(out, k+"="+v)
		}
	}
	for k, v := range over {
		out = append(out, k+"="+v)
	}
	return out
}

type exit struct {
	name string
	err  error
}

// processes are the child processes, stopped in reverse start order (the
// workers before the gateway).
type processes struct {
	log    *zap.Logger
	list   []*child
	exited chan exit
}

type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *processes) start(path, name string, env []string) error {
	if p.exited == nil {
		p.exited = make(chan exit, 32)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s binary: %w (run `make build` first)", name, err)
	}
	cmd := exec.Command(path)
	cmd.Env = env
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		close(c.done)
		p.exited <- exit{name: name, err: err}
	}()
	p.list = append(p.list, c)
	p.log.Info("started", zap.String("process", name), zap.Int("pid", cmd.Process.Pid))
	return nil
}

// stopAll sends SIGTERM to each child, last started first, and waits for it
// (killing it after 20 s).
func (p *processes) stopAll() {
	for i := len(p.list) - 1; i >= 0; i-- {
		c := p.list[i]
		select {
		case <-c.done:
			continue
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			p.log.Warn("did not stop in time; killing", zap.String("process", c.name))
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if st := c.cmd.ProcessState; st != nil && !st.Success() {
			p.log.Warn("stopped", zap.String("process", c.name), zap.String("state", st.String()))
		} else {
			p.log.Info("stopped", zap.String("process", c.name))
		}
	}
}
