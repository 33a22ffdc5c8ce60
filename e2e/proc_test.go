package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// faultStack is what the fault tests run the real programs on: the
// binaries, a directory, and a private redis-server with AOF (it comes
// back from a kill with what it wrote) and a client of it, both stopped
// when the test ends.
func faultStack(t *testing.T) (bin, dir string, rp *redisproc.Proc, rdb redis.UniversalClient) {
	t.Helper()
	bin, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if rp, err = redisproc.Start(dir, "--appendonly", "yes", "--appendfsync", "everysec"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rp.Stop)
	if rdb, err = redisconn.Open(context.Background(), rp.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return bin, dir, rp, rdb
}

// proc is one of the stack's processes, restartable.
type proc struct {
	name, path string
	env        []string
	log        *os.File
	cmd        *exec.Cmd
	done       chan struct{}
}

func startProc(t *testing.T, dir, name, path string, env []string) *proc {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, path: path, env: env, log: f}
	p.start(t)
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		_ = f.Close()
	})
	return p
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command(p.path)
	p.cmd.Env = p.env
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// No Pdeathsig: it fires when the OS thread that started the child
	// exits, which the Go runtime does when it likes, and killed restarted
	// processes at random. The test's cleanup kills them.
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(p.cmd, p.done)
}

// signal sends sig and waits for the process to end (at most 30 s).
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop after %s", p.name, sig)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// restart starts the process again, with env added (a restarted worker
// takes a fresh health port: its old one may since be some connection's
// source port).
func (p *proc) restart(t *testing.T, env ...string) {
	t.Helper()
	select {
	case <-p.done:
	default:
		p.signal(t, syscall.SIGKILL)
	}
	p.env = slices.Concat(p.env, env)
	p.start(t)
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log.Name())
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
