// Package redisproc runs a private redis-server process on a free loopback
// port, with persistence off: for tests (through package redistest) and the
// benchmark, which must never touch a Redis another process uses.
package redisproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proc is a running redis-server.
type Proc struct {
	Addr   string // host:port
	URL    string // redis://host:port/0
	cmd    *exec.Cmd
	exited chan error
	out    *safeBuffer
	// What it was started with, for Restart.
	bin, dir string
	port     int
	extra    []string
	conf     string // config file, the first argument (sentinels); "" for none
	// hold keeps the port of a server taken Down, so that no other
	// process's server takes it before Restart.
	hold net.Listener
}

// ErrNotInstalled is returned when redis-server is not on PATH.
var ErrNotInstalled = errors.New("redis-server not found on PATH: install it (Debian: apt-get install redis-server; macOS: brew install redis)")

// Start starts a redis-server with its working directory in dir (which the
// caller owns and removes). extra are further redis-server arguments.
func Start(dir string, extra ...string) (*Proc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		p, err := start(bin, dir, extra)
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(bin, dir string, extra []string) (*Proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startOn(bin, dir, port, extra)
}

func startOn(bin, dir string, port int, extra []string) (*Proc, error) {
	return startConf(bin, "", dir, port, extra)
}

// startConf is startOn with a config file, given as the first argument when
// not "" (a sentinel needs one it can rewrite).
func startConf(bin, conf, dir string, port int, extra []string) (*Proc, error) {
	out := &safeBuffer{}
	var args []string
	if conf != "" {
		args = append(args, conf)
	}
	args = append(args, []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no", // extra may say yes: later arguments win
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
	}...)
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, exited: make(chan error, 1), out: out, bin: bin, dir: dir, port: port, extra: extra, conf: conf}
	go func() { p.exited <- cmd.Wait() }()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-p.exited:
			return nil, fmt.Errorf("redis-server exited (%v): %s", err, out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := rdb.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			// Make sure the server answering is ours, not another process
			// that took the port between freePort and the bind.
			if !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				p.Stop()
				return nil, fmt.Errorf("port %d is taken by another Redis", port)
			}
			break
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("redis-server did not answer within 10s: %v; output: %s", err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Addr, p.URL = addr, "redis://"+addr+"/0"
	return p, nil
}

// Pid is the server's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop kills the server (SIGKILL) and waits for it, and lets go of its
// port. Stopping a stopped server does nothing.
func (p *Proc) Stop() {
	if p.hold != nil {
		_ = p.hold.Close()
		p.hold = nil
	}
	select {
	case <-p.exited:
		p.exited <- nil // keep it closed for the next Stop
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused server must be able to die
	_ = p.cmd.Process.Kill()
	err := <-p.exited
	p.exited <- err
}

// Down kills the server as Stop does, but keeps its port until Restart:
// a client connecting meanwhile is hung up on at once, as by a server
// gone, and no other test's server can take the port (a server started
// elsewhere on it would answer this one's clients).
func (p *Proc) Down() error {
	p.Stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger a moment
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))); err == nil {
			p.hold = l
			go hangUp(l)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("holding port %d: %w", p.port, err)
}

func hangUp(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

// Pause stops the server's process (SIGSTOP): it keeps its connections and
// answers nothing, as a hung server does. Resume continues it.
func (p *Proc) Pause() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (p *Proc) Resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// Restart stops the server if it runs and starts it again on the same port,
// in the same directory, with the same arguments: with appendonly yes, it
// comes back with what its AOF holds.
func (p *Proc) Restart() error {
	p.Stop()
	var lastErr error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger a moment
		np, err := startConf(p.bin, p.conf, p.dir, p.port, p.extra)
		if err == nil {
			*p = *np
			return nil
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	return lastErr
}

// Output is what the server printed.
func (p *Proc) Output() string { return p.out.String() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
