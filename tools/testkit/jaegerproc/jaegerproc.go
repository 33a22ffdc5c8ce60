// Package jaegerproc runs a private Jaeger (v2: an OpenTelemetry Collector
// with Jaeger's in-memory storage and query API) on free loopback ports,
// for the tests that read what the services traced, as s3proc runs MinIO.
//
// Jaeger is built from the Go module proxy at a pinned version
// (JaegerVersion) and cached, so a machine with Go needs nothing else:
// Binary finds it, or builds it once into the cache (about 490 CPU-seconds
// on a cold build cache, an 85 MB binary); `make test` does that first
// (cmd/jaeger-install).
//
// Jaeger's go.mod has a replace directive, so `go install module@version`
// refuses it (a module installed that way must build the same as when it
// is the main module). The build is the next closest thing: the pinned
// module is downloaded through the proxy (`go mod download`) and built in
// its own directory, as the main module, with its own go.mod and go.sum
// and -mod=readonly, so every dependency is the version Jaeger pins.
package jaegerproc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/easelhq/easel/tools/testkit/toolcache"
)

// The Jaeger the tests run against: v1.76.0 of the module is the release
// also tagged v2.13.0, whose cmd/jaeger is the v2 binary.
const (
	JaegerModule  = "github.com/jaegertracing/jaeger"
	JaegerVersion = "v1.76.0"
	mainPackage   = "./cmd/jaeger"
)

// BinEnv names a Jaeger v2 binary to use instead of the cached build.
const BinEnv = "EASEL_JAEGER_BIN"

// tool is the Jaeger binary, built in its module's directory (its go.mod
// has a replace directive, which `go install module@version` refuses).
func tool() toolcache.Tool {
	return toolcache.Tool{Name: "jaeger", Version: JaegerVersion, Env: BinEnv, Build: build}
}

// CachePath is where the Jaeger binary of JaegerVersion is cached:
// ${XDG_CACHE_HOME:-$HOME/.cache}/easel/jaeger/<version>/jaeger.
func CachePath() (string, error) { return tool().CachePath() }

// Built returns the Jaeger binary if there is one without building it:
// $EASEL_JAEGER_BIN, else the cached build. ok is false when neither
// exists.
func Built() (bin string, ok bool) { return tool().Built() }

// Binary returns the Jaeger binary: $EASEL_JAEGER_BIN, else the cached
// build, else one built now into the cache (once, under a lock, however
// many test processes ask at the same time).
func Binary(ctx context.Context) (string, error) { return tool().Binary(ctx) }

// build downloads the pinned module and builds its cmd/jaeger into out.
func build(ctx context.Context, dir, out string) error {
	src, err := download(ctx, dir)
	if err != nil {
		return err
	}
	// In the module's directory of the module cache (read-only: -mod=readonly
	// writes nothing there; the build's output goes to out).
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, mainPackage)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build Jaeger (go build %s in %s@%s): %v\n%s", mainPackage, JaegerModule, JaegerVersion, err, b)
	}
	return nil
}

// download fetches the pinned module through the module proxy and returns
// its directory in the module cache.
func download(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", JaegerModule+"@"+JaegerVersion)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); err != nil || jerr != nil || m.Dir == "" {
		return "", fmt.Errorf("download Jaeger (go mod download %s@%s): %v %s\n%s%s", JaegerModule, JaegerVersion, err, m.Error, stderr.Bytes(), out)
	}
	return m.Dir, nil
}

// Proc is a running Jaeger.
type Proc struct {
	// OTLPEndpoint is the OTLP/HTTP receiver's base URL
	// (http://127.0.0.1:port), what OTEL_EXPORTER_OTLP_ENDPOINT takes.
	OTLPEndpoint string
	// QueryURL is the query API's base URL (http://127.0.0.1:port).
	QueryURL string
	cmd      *exec.Cmd
	exited   chan error
	out      *safeBuffer
	once     sync.Once
}

// Start starts Jaeger with its configuration file under dir (which the
// caller owns and removes), keeping the spans it receives in memory.
func Start(ctx context.Context, dir string) (*Proc, error) {
	bin, err := Binary(ctx)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		p, err := start(ctx, bin, dir)
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// config is Jaeger's configuration: the OTLP/HTTP receiver into the memory
// store, the query API over it; every listener on loopback at a port of
// its own (the query's gRPC API too, unused), the collector's own metrics
// off (they would take port 8888).
const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

func start(ctx context.Context, bin, dir string) (*Proc, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, ports[0], ports[1], ports[2]), 0o644); err != nil {
		return nil, err
	}
	p := &Proc{
		QueryURL:     "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		OTLPEndpoint: "http://127.0.0.1:" + strconv.Itoa(ports[2]),
		exited:       make(chan error, 1),
		out:          &safeBuffer{},
	}
	p.cmd = exec.Command(bin, "--config", cfg)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start Jaeger: %w", err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	client := &http.Client{Timeout: time.Second}
	// Ready when both the query API and the receiver answer: the collector
	// starts its extensions (the query API) before its receivers.
	ready := func() error {
		resp, err := client.Get(p.QueryURL + "/api/services")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("query API: %s", resp.Status)
		}
		resp, err = client.Post(p.OTLPEndpoint+"/v1/traces", "application/json", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("OTLP receiver: %s", resp.Status)
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("start Jaeger: not ready within 30s (%v): %s", err, p.out.String())
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			return nil, fmt.Errorf("start Jaeger: it exited (%v): %s", err, p.out.String())
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Stop kills Jaeger (SIGKILL) and waits for it.
func (p *Proc) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		err := <-p.exited
		p.exited <- err
	})
}

// Output is what Jaeger has printed, for failing tests.
func (p *Proc) Output() string { return p.out.String() }

// Client is a client of the Proc's query API.
func (p *Proc) Client() *Client { return NewClient(p.QueryURL) }

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
