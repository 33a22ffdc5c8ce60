// Package toolcache builds the servers some tests run (MinIO, Jaeger) from
// the Go module proxy at a pinned version, once, into the user's cache:
// ${XDG_CACHE_HOME:-$HOME/.cache}/easel/<name>/<version>/<name>.
package toolcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Tool is a server binary the tests build and cache.
type Tool struct {
	// Name is the binary's name, and its cache directory's.
	Name string
	// Version is the pinned version of its module.
	Version string
	// Env names a binary to use instead of the cached build.
	Env string
	// Build builds the binary into out; dir is its cache directory, where
	// it may keep scratch files.
	Build func(ctx context.Context, dir, out string) error
}

// CachePath is where the binary of t.Version is cached.
func (t Tool) CachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the %s binary (set %s): %w", t.Name, t.Env, err)
	}
	return filepath.Join(dir, "easel", t.Name, t.Version, t.Name), nil
}

// Built returns the binary if there is one without building it: $Env,
// else the cached build. ok is false when neither exists.
func (t Tool) Built() (bin string, ok bool) {
	if p := os.Getenv(t.Env); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	bin, err := t.CachePath()
	if err != nil {
		return "", false
	}
	_, err = os.Stat(bin)
	return bin, err == nil
}

// Binary returns the binary: $Env, else the cached build, else one built
// now into the cache (once, under a lock, however many test processes ask
// at the same time).
func (t Tool) Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(t.Env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", t.Env, err)
		}
		return p, nil
	}
	bin, err := t.CachePath()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another process while this one waited
	}
	tmp := filepath.Join(dir, fmt.Sprintf("%s.build-%d", t.Name, os.Getpid()))
	defer os.Remove(tmp)
	if err := t.Build(ctx, dir, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}
