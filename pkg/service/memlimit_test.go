package service

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/easelhq/easel/pkg/config"
)

func TestChooseMemoryLimit(t *testing.T) {
	const gib = 1 << 30
	budget := MemoryLimit{Bytes: 1536 << 20, Source: "EASEL_DECODE_BUDGET_MB 1024 + 512 MiB"}
	tests := []struct {
		name     string
		env      map[string]string
		files    map[string]string // under the cgroup root
		fallback MemoryLimit
		want     MemoryLimit
		err      string
	}{
		{name: "v2 limit", files: map[string]string{"memory.max": "1073741824\n"}, fallback: budget,
			want: MemoryLimit{Bytes: gib * 9 / 10, Source: SourceCgroupV2}},
		{name: "v2 without a limit: the fallback", files: map[string]string{"memory.max": "max\n"}, fallback: budget, want: budget},
		{name: "v2 without a limit, no fallback", files: map[string]string{"memory.max": "max\n"}, want: MemoryLimit{Source: SourceNone}},
		{name: "v1 limit", files: map[string]string{"memory/memory.limit_in_bytes": "1610612736\n"}, fallback: budget,
			want: MemoryLimit{Bytes: 1536 << 20 * 9 / 10, Source: SourceCgroupV1}},
		{name: "v1 without a limit (the page-rounded largest int64)", files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, fallback: budget, want: budget},
		{name: "no cgroup files: the fallback", fallback: budget, want: budget},
		{name: "nothing at all", want: MemoryLimit{Source: SourceNone}},
		{name: "v2 wins over v1", files: map[string]string{"memory.max": "536870912", "memory/memory.limit_in_bytes": "1073741824"},
			want: MemoryLimit{Bytes: 512 << 20 * 9 / 10, Source: SourceCgroupV2}},
		{name: "GOMEMLIMIT wins over the cgroup", env: map[string]string{"GOMEMLIMIT": "700MiB"}, files: map[string]string{"memory.max": "1073741824"}, fallback: budget,
			want: MemoryLimit{Bytes: 700 << 20, Source: SourceEnv}},
		{name: "GOMEMLIMIT wins over the fallback", env: map[string]string{"GOMEMLIMIT": "2GiB"}, fallback: budget,
			want: MemoryLimit{Bytes: 2 << 30, Source: SourceEnv}},
		{name: "GOMEMLIMIT in bytes", env: map[string]string{"GOMEMLIMIT": "123456789"}, want: MemoryLimit{Bytes: 123456789, Source: SourceEnv}},
		{name: "GOMEMLIMIT=off: no limit, as asked", env: map[string]string{"GOMEMLIMIT": "off"}, files: map[string]string{"memory.max": "1073741824"}, fallback: budget,
			want: MemoryLimit{Bytes: math.MaxInt64, Source: SourceEnv}},
		{name: "empty GOMEMLIMIT is unset", env: map[string]string{"GOMEMLIMIT": ""}, files: map[string]string{"memory.max": "1073741824"},
			want: MemoryLimit{Bytes: gib * 9 / 10, Source: SourceCgroupV2}},
		{name: "malformed GOMEMLIMIT", env: map[string]string{"GOMEMLIMIT": "1 GB"}, err: "GOMEMLIMIT"},
		{name: "malformed memory.max: the next source", files: map[string]string{"memory.max": "lots"}, fallback: budget, want: budget},
		{name: "a zero memory.max is no limit", files: map[string]string{"memory.max": "0"}, fallback: budget, want: budget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tt.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ChooseMemoryLimit(func(k string) string { return tt.env[k] }, root, tt.fallback)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ChooseMemoryLimit = %+v, %v; want an error about %s", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ChooseMemoryLimit = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// keepMemoryLimit restores the process's Go memory limit after a test.
func keepMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
}

func TestSetMemoryLimit(t *testing.T) {
	keepMemoryLimit(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("1073741824\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	debug.SetMemoryLimit(math.MaxInt64)
	l := setMemoryLimit(zap.New(core), func(string) string { return "" }, root, MemoryLimit{Bytes: 5 << 30, Source: "fallback"})
	if got := debug.SetMemoryLimit(-1); got != 966367641 || l.Bytes != got {
		t.Errorf("the runtime's limit is %d (chose %+v); want 90%% of the cgroup's 1 GiB, 966367641", got, l)
	}
	if e := logs.FilterMessage("Go memory limit").All(); len(e) != 1 || e[0].ContextMap()["source"] != SourceCgroupV2 || e[0].ContextMap()["limit"] != "922 MiB" {
		t.Errorf("logged %+v; want the limit and its source", logs.All())
	}

	// GOMEMLIMIT was applied by the runtime: it is left alone.
	debug.SetMemoryLimit(300 << 20)
	l = setMemoryLimit(zap.NewNop(), func(k string) string { return map[string]string{"GOMEMLIMIT": "300MiB"}[k] }, root, MemoryLimit{})
	if got := debug.SetMemoryLimit(-1); got != 300<<20 || l != (MemoryLimit{Bytes: 300 << 20, Source: SourceEnv}) {
		t.Errorf("with GOMEMLIMIT the runtime's limit is %d (chose %+v); want GOMEMLIMIT's", got, l)
	}
}

type fallbackConfig struct{ config.Common }

func (fallbackConfig) FallbackMemoryLimit() MemoryLimit {
	return MemoryLimit{Bytes: 3 << 30, Source: "the test's fallback"}
}

// A service started with Start runs under a Go memory limit: its
// container's, else its configuration's fallback.
func TestStartSetsTheMemoryLimit(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: the runtime's limit is its")
	}
	keepMemoryLimit(t)
	want, err := ChooseMemoryLimit(os.Getenv, CgroupRoot, fallbackConfig{}.FallbackMemoryLimit())
	if err != nil {
		t.Fatal(err)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	load := func(map[string]string) (fallbackConfig, error) {
		return fallbackConfig{config.Common{LogLevel: "error", LogFormat: "json"}}, nil
	}
	var got int64
	err = Start(context.Background(), "test", load, func(ctx context.Context, cfg fallbackConfig, log *zap.Logger) error {
		got = debug.SetMemoryLimit(-1)
		return nil
	})
	if err != nil || got != want.Bytes {
		t.Errorf("Start: %v; the service ran with a Go memory limit of %d; want %d (%s)", err, got, want.Bytes, want.Source)
	}
}
