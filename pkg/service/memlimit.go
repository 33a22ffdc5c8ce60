package service

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// MemoryLimit is a Go memory limit (runtime/debug.SetMemoryLimit: the heap
// size at which the garbage collector works harder to stay under it) and
// where it comes from.
type MemoryLimit struct {
	Bytes  int64  // 0: none
	Source string // SourceEnv, SourceCgroupV2, SourceCgroupV1, a fallback's, or SourceNone
}

// The sources of a memory limit.
const (
	SourceEnv      = "GOMEMLIMIT"
	SourceCgroupV2 = "cgroup v2 memory.max"
	SourceCgroupV1 = "cgroup v1 memory.limit_in_bytes"
	SourceNone     = "none"
)

// CgroupPercent is the share of the container's memory limit the Go
// runtime aims under. The limit counts only what the runtime manages; the
// rest (the binary's text, thread stacks, what the kernel charges the
// container for its page cache) and the time the collector takes to catch
// up with a burst need headroom before the kernel's OOM killer acts.
const CgroupPercent = 90

// CgroupRoot is where the process's cgroup files are: a container with its
// own cgroup namespace (Docker's and containerd's default on cgroup v2)
// sees its own cgroup there, and Docker and Kubernetes mount the v1 memory
// controller's at memory/.
const CgroupRoot = "/sys/fs/cgroup"

// cgroupUnlimited: a cgroup v1 limit at or above this is no limit (v1
// writes "no limit" as the largest int64 rounded down to a page,
// 9223372036854771712).
const cgroupUnlimited = 1 << 62

// ChooseMemoryLimit picks a process's Go memory limit, in this order:
//
//   - GOMEMLIMIT, when set and not empty: the runtime has applied it
//     already ("off" is no limit); it always wins;
//   - CgroupPercent of the memory limit of the cgroup under cgroupRoot:
//     memory.max (cgroup v2; "max" is none), else memory/memory.limit_in_bytes
//     (v1; the largest int64 is none);
//   - fallback (a service's own figure; zero Bytes for none).
//
// getenv reads the environment (os.Getenv). An error is a malformed
// GOMEMLIMIT, which the runtime itself refuses at start.
func ChooseMemoryLimit(getenv func(string) string, cgroupRoot string, fallback MemoryLimit) (MemoryLimit, error) {
	if s := getenv("GOMEMLIMIT"); s != "" {
		n, err := ParseGoMemLimit(s)
		if err != nil {
			return MemoryLimit{}, err
		}
		return MemoryLimit{Bytes: n, Source: SourceEnv}, nil
	}
	for _, f := range []struct{ path, source string }{
		{"memory.max", SourceCgroupV2},
		{filepath.Join("memory", "memory.limit_in_bytes"), SourceCgroupV1},
	} {
		if n, ok := readCgroupLimit(filepath.Join(cgroupRoot, f.path)); ok {
			return MemoryLimit{Bytes: n/100*CgroupPercent + n%100*CgroupPercent/100, Source: f.source}, nil // ⌊n·90/100⌋ without overflow
		}
	}
	if fallback.Bytes > 0 {
		return fallback, nil
	}
	return MemoryLimit{Source: SourceNone}, nil
}

// readCgroupLimit reads a cgroup memory limit file: ok is false when the
// file is absent or unreadable, says "max", holds no positive number, or
// holds v1's "no limit".
func readCgroupLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= cgroupUnlimited {
		return 0, false
	}
	return n, true
}

// ParseGoMemLimit parses a GOMEMLIMIT value as the Go runtime does: "off",
// or a decimal count of bytes with an optional unit B, KiB, MiB, GiB or
// TiB ("900MiB", "1073741824").
func ParseGoMemLimit(s string) (int64, error) {
	if s == "off" {
		return math.MaxInt64, nil
	}
	num, shift := s, 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}} {
		if strings.HasSuffix(s, u.suffix) {
			num, shift = strings.TrimSuffix(s, u.suffix), u.shift
			break
		}
	}
	bad := fmt.Errorf("GOMEMLIMIT %q: want off, or a number of bytes with an optional unit B, KiB, MiB, GiB or TiB, e.g. 900MiB", s)
	if num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64>>shift {
		return 0, bad
	}
	return n << shift, nil
}

// SetMemoryLimit sets the process's Go memory limit as ChooseMemoryLimit
// picks it from the environment and CgroupRoot (GOMEMLIMIT is left as the
// runtime applied it), and logs the limit and its source.
func SetMemoryLimit(log *zap.Logger, fallback MemoryLimit) MemoryLimit {
	return setMemoryLimit(log, os.Getenv, CgroupRoot, fallback)
}

func setMemoryLimit(log *zap.Logger, getenv func(string) string, cgroupRoot string, fallback MemoryLimit) MemoryLimit {
	l, err := ChooseMemoryLimit(getenv, cgroupRoot, fallback)
	if err != nil { // unreachable: the runtime refuses to start with it
		log.Warn("Go memory limit: GOMEMLIMIT not understood; left as the runtime set it", zap.Error(err))
		return MemoryLimit{Bytes: debug.SetMemoryLimit(-1), Source: SourceEnv}
	}
	if l.Source != SourceEnv && l.Bytes > 0 {
		debug.SetMemoryLimit(l.Bytes)
	}
	shown := "none"
	if l.Bytes > 0 && l.Bytes < math.MaxInt64 {
		shown = fmt.Sprintf("%.0f MiB", float64(l.Bytes)/(1<<20))
	}
	log.Info("Go memory limit", zap.String("limit", shown), zap.Int64("bytes", l.Bytes), zap.String("source", l.Source))
	return l
}

// MemoryFallback is implemented by a service's configuration that knows
// what memory its process needs when neither GOMEMLIMIT nor a container
// limit gives a Go memory limit (the worker: its decode budget and more).
type MemoryFallback interface {
	FallbackMemoryLimit() MemoryLimit
}

// fallbackOf is cfg's fallback memory limit, if it has one.
func fallbackOf(cfg any) MemoryLimit {
	if f, ok := cfg.(MemoryFallback); ok {
		return f.FallbackMemoryLimit()
	}
	return MemoryLimit{Source: SourceNone}
}

// GCPercentDefault is implemented by a service's configuration that runs
// the garbage collector at another GOGC than Go's 100 when GOGC is not set
// (the gateway: its live heap is a few MB, so at 100 it collects many
// times a second under load).
type GCPercentDefault interface {
	DefaultGCPercent() int
}

// SetGCPercent sets GOGC to cfg's default (GCPercentDefault) unless GOGC
// is set, and logs it. The memory limit still bounds the heap.
func SetGCPercent(log *zap.Logger, cfg any) {
	setGCPercent(log, os.Getenv, cfg)
}

func setGCPercent(log *zap.Logger, getenv func(string) string, cfg any) {
	d, ok := cfg.(GCPercentDefault)
	if !ok || d.DefaultGCPercent() <= 0 || getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(d.DefaultGCPercent())
	log.Info("Go GC percent", zap.Int("gogc", d.DefaultGCPercent()), zap.String("source", "default"))
}
