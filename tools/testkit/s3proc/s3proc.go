// Package s3proc runs a private S3 server, MinIO, on a free loopback port:
// for tests (through package s3test), as redisproc does for redis-server.
//
// MinIO is built from the Go module proxy at a pinned version (MinIOVersion)
// and cached, so a machine with Go needs nothing else: Binary finds it, or
// builds it once (several minutes) into the cache; `make test` does that
// first (cmd/minio-install).
package s3proc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/easelhq/easel/tools/testkit/toolcache"
)

// The MinIO tests run against: its module has no replace directives, so
// `go install` of a pinned pseudo-version works from the module proxy.
const (
	MinIOModule  = "github.com/minio/minio"
	MinIOVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"
)

// BinEnv names a MinIO binary to use instead of the cached build.
const BinEnv = "EASEL_MINIO_BIN"

// tool is the MinIO binary, built with `go install` into the cache.
func tool() toolcache.Tool {
	return toolcache.Tool{Name: "minio", Version: MinIOVersion, Env: BinEnv, Build: build}
}

// CachePath is where the MinIO binary of MinIOVersion is cached:
// ${XDG_CACHE_HOME:-$HOME/.cache}/easel/minio/<version>/minio.
func CachePath() (string, error) { return tool().CachePath() }

// Built returns the MinIO binary if there is one without building it:
// $EASEL_MINIO_BIN, else the cached build. ok is false when neither exists.
func Built() (bin string, ok bool) { return tool().Built() }

// Binary returns the MinIO binary: $EASEL_MINIO_BIN, else the cached build,
// else one built now with `go install` into the cache (once, under a lock,
// however many test processes ask at the same time).
func Binary(ctx context.Context) (string, error) { return tool().Binary(ctx) }

// build installs the pinned MinIO into a scratch GOBIN under dir and moves
// it to out.
func build(ctx context.Context, dir, out string) error {
	gobin, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(gobin)
	cmd := exec.CommandContext(ctx, "go", "install", MinIOModule+"@"+MinIOVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build MinIO (go install %s@%s): %v\n%s", MinIOModule, MinIOVersion, err, b)
	}
	return os.Rename(filepath.Join(gobin, "minio"), out)
}

// Proc is a running MinIO server.
type Proc struct {
	Endpoint  string // http://127.0.0.1:port
	AccessKey string
	SecretKey string
	cmd       *exec.Cmd
	exited    chan error
	out       *safeBuffer
	once      sync.Once
}

// Start starts a MinIO server keeping its data under dir (which the caller
// owns and removes), with fresh random root credentials.
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

func start(ctx context.Context, bin, dir string) (*Proc, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	p := &Proc{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		AccessKey: "easeltest",
		SecretKey: hex.EncodeToString(secret),
		exited:    make(chan error, 1),
		out:       &safeBuffer{},
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, "server", "--quiet",
		"--address", "127.0.0.1:"+strconv.Itoa(ports[0]),
		"--console-address", "127.0.0.1:"+strconv.Itoa(ports[1]),
		"--certs-dir", filepath.Join(dir, "certs"),
		data)
	p.cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+p.AccessKey,
		"MINIO_ROOT_PASSWORD="+p.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CI_CD=1",
	)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start MinIO: %w", err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-p.exited:
			p.exited <- err
			return nil, fmt.Errorf("MinIO exited (%v): %s", err, p.out.String())
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		default:
		}
		resp, err := client.Get(p.Endpoint + "/minio/health/cluster")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("MinIO did not become ready within 30s (%v): %s", err, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL) and waits for it.
func (p *Proc) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		err := <-p.exited
		p.exited <- err
	})
}

// Output is what the server has printed, for failing tests.
func (p *Proc) Output() string { return p.out.String() }

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
