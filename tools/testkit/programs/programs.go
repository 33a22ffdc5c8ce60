// Package programs gives tests Easel's programs as built binaries: the
// ones `make build` leaves in bin/ when the test run names that directory
// (EASEL_TEST_BIN, as `make test` does after building once), or else
// built from this tree once per test process, as `make build` does
// (CGO_ENABLED=0 and the tag nodynamic, like the Dockerfiles): a build
// that is not statically linked fails.
//
// One build shared by every package that runs the real programs (e2e,
// deploy, bench) is a link each instead of one per package, and one
// compiled flavour of the dependencies instead of two.
package programs

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// DirEnv names a directory holding the programs already built from this
// tree (`make build`'s bin/).
const DirEnv = "EASEL_TEST_BIN"

// packages maps each program to its main package, relative to the
// repository's root.
var packages = map[string]string{
	"gateway":  "./api-gateway/cmd/gateway",
	"worker":   "./worker/cmd/worker",
	"devstack": "./tools/cmd/devstack",
	"easelctl": "./tools/cmd/easelctl",
	"loadgen":  "./tools/cmd/loadgen",
	"easel":    "./sdk/go/cmd/easel",
}

// A Set is the programs of one test process.
type Set struct {
	mu     sync.Mutex
	dir    string // where this process builds; "" until the first build
	built  map[string]error
	shared string // DirEnv's directory, if set
}

// New returns the process's programs: call it once, in a package variable
// or TestMain, and Remove them when the tests are done.
func New() *Set {
	return &Set{built: map[string]error{}, shared: os.Getenv(DirEnv)}
}

// Dir returns a directory holding the named programs, building those it
// lacks; a build that fails fails the test.
func (s *Set) Dir(tb testing.TB, names ...string) string {
	tb.Helper()
	dir, err := s.Build(names...)
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// Path returns the path of one program, built if need be.
func (s *Set) Path(tb testing.TB, name string) string {
	tb.Helper()
	return filepath.Join(s.Dir(tb, name), name)
}

// Build returns a directory holding the named programs, building those it
// lacks.
func (s *Set) Build(names ...string) (string, error) {
	if s.shared != "" {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(s.shared, n)); err != nil {
				return "", fmt.Errorf("%s=%s lacks %s (run make build): %w", DirEnv, s.shared, n, err)
			}
		}
		return s.shared, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "easel-programs-")
		if err != nil {
			return "", err
		}
		s.dir = dir
	}
	for _, n := range names {
		err, done := s.built[n]
		if !done {
			err = build(s.dir, n)
			s.built[n] = err
		}
		if err != nil {
			return "", err
		}
	}
	return s.dir, nil
}

// Remove deletes what this process built (never DirEnv's directory).
func (s *Set) Remove() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

func build(dir, name string) error {
	pkg, ok := packages[name]
	if !ok {
		return fmt.Errorf("no program %q", name)
	}
	root, err := Root()
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "nodynamic", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return static(bin)
}

// static fails a binary that is dynamically linked (it names an ELF
// interpreter): one the distroless images could not start. CGO_ENABLED=0
// alone does not ensure it; a dependency that loads shared libraries
// without cgo (purego) links the binary dynamically.
func static(bin string) error {
	if runtime.GOOS != "linux" {
		return nil
	}
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the images need a static binary (build with -tags nodynamic)", filepath.Base(bin))
		}
	}
	return nil
}

// Root returns the repository's root: the nearest directory up from the
// working directory that holds go.work.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.work above the working directory")
		}
		dir = up
	}
}
