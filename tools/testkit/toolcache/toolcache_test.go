package toolcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// A tool is built once however many callers ask at once, then found in the
// cache; $Env wins over the cache; a failed build leaves nothing cached.
func TestBinary(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var builds atomic.Int32
	tool := Tool{Name: "fake", Version: "v1", Env: "EASEL_FAKE_BIN", Build: func(_ context.Context, _, out string) error {
		builds.Add(1)
		return os.WriteFile(out, []byte("bin"), 0o755)
	}}
	if _, ok := tool.Built(); ok {
		t.Fatal("Built before any build")
	}
	var wg sync.WaitGroup
	bins := make([]string, 4)
	for i := range bins {
		wg.Go(func() {
			b, err := tool.Binary(context.Background())
			if err != nil {
				t.Error(err)
			}
			bins[i] = b
		})
	}
	wg.Wait()
	want, _ := tool.CachePath()
	for _, b := range bins {
		if b != want {
			t.Errorf("Binary = %q; want %q", b, want)
		}
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("%d builds; want 1", n)
	}
	if b, ok := tool.Built(); !ok || b != want {
		t.Errorf("Built = %q, %v; want the cached %q", b, ok, want)
	}

	other := filepath.Join(t.TempDir(), "mine")
	if err := os.WriteFile(other, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EASEL_FAKE_BIN", other)
	if b, err := tool.Binary(context.Background()); err != nil || b != other {
		t.Errorf("Binary with $EASEL_FAKE_BIN = %q, %v; want %q", b, err, other)
	}
	t.Setenv("EASEL_FAKE_BIN", "")

	failing := Tool{Name: "broken", Version: "v1", Env: "EASEL_BROKEN_BIN", Build: func(context.Context, string, string) error {
		return errors.New("no proxy")
	}}
	if _, err := failing.Binary(context.Background()); err == nil {
		t.Error("a failed build: no error")
	}
	if _, ok := failing.Built(); ok {
		t.Error("a failed build left a binary")
	}
}
