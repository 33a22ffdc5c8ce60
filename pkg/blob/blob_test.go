package blob

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
)

func TestValidKey(t *testing.T) {
	tests := map[string]bool{
		"2026112214/task_lumen_1-0-0123456789abcdef.png": true,
		"a.png":       true,
		"a/b/c.webp":  true,
		"":            false,
		"/abs.png":    false,
		"../up.png":   false,
		"a/../b.png":  false,
		"a//b.png":    false,
		"a/./b.png":   false,
		".hidden":     false,
		"a/.tmp-x":    false,
		"dir/":        false,
		"a b.png":     false,
		"a\\b.png":    false,
		"a/b.png\x00": false,
		"é.png":       false,
	}
	for k, want := range tests {
		if got := ValidKey(k); got != want {
			t.Errorf("ValidKey(%q) = %v; want %v", k, got, want)
		}
	}
}

func TestPutOpen(t *testing.T) {
	s, err := OpenFS(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	n, err := s.Put(ctx, "2026112214/t-0-abc.png", strings.NewReader("png bytes"))
	if err != nil || n != 9 {
		t.Fatalf("Put = %d, %v", n, err)
	}
	obj, info, err := s.Open(ctx, "2026112214/t-0-abc.png")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, _ := io.ReadAll(obj)
	if string(b) != "png bytes" || info.Size != 9 {
		t.Errorf("read %q size %d", b, info.Size)
	}
	// No temporary file is left behind.
	entries, _ := os.ReadDir(filepath.Join(s.Dir(), "2026112214"))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries; want 1", len(entries))
	}
	for _, key := range []string{"2026112214/missing.png", "../etc/passwd", "2026112214", ""} {
		if _, _, err := s.Open(ctx, key); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("Open(%q) = %v; want NotFound", key, err)
		}
	}
	if _, err := s.Put(ctx, "../escape.png", strings.NewReader("x")); err == nil {
		t.Error("Put outside the directory succeeded")
	}
}

// A symlink is never a blob (Easel writes blobs as regular files): whatever
// it points at, and whether it is the key's last component or a directory on
// the way, Open says not found, and keeps the cause for the logs.
func TestOpenSymlinkIsNotFound(t *testing.T) {
	s, err := OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Put(ctx, "h/real.png", strings.NewReader("png bytes")); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.png"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(s.Dir(), filepath.FromSlash(name))); err != nil {
			t.Skip("symlinks unsupported:", err)
		}
	}
	link(filepath.Join(outside, "secret.png"), "h/out.png")
	link("real.png", "h/in.png")
	link(filepath.Join(s.Dir(), "h", "real.png"), "h/abs.png")
	link("missing.png", "h/dangling.png")
	link("h", "indir")
	link(outside, "outdir")
	if err := os.MkdirAll(filepath.Join(s.Dir(), "h", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	link("sub", "h/subdir.png")

	tests := []struct{ name, key string }{
		{"to a file outside the directory", "h/out.png"},
		{"to a blob inside the directory", "h/in.png"},
		{"absolute, to a blob inside the directory", "h/abs.png"},
		{"dangling", "h/dangling.png"},
		{"to a directory", "h/subdir.png"},
		{"a directory inside the directory, on the way", "indir/real.png"},
		{"a directory outside the directory, on the way", "outdir/secret.png"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, _, err := s.Open(ctx, tt.key)
			if err == nil {
				b, _ := io.ReadAll(obj)
				_ = obj.Close()
				t.Fatalf("Open(%q) served %q through a symlink", tt.key, b)
			}
			var nf *apperr.NotFoundError
			if !errors.As(err, &nf) {
				t.Fatalf("Open(%q) = %v; want *apperr.NotFoundError", tt.key, err)
			}
		})
	}
	// The blob itself is still served.
	obj, info, err := s.Open(ctx, "h/real.png")
	if err != nil || info.Size != 9 {
		t.Fatalf("Open of the regular blob = %v, size %d", err, info.Size)
	}
	_ = obj.Close()
	// The cause is kept for the logs.
	if _, _, err := s.Open(ctx, "h/out.png"); err == nil || err.Error() == errNotFound.Error() {
		t.Errorf("Open through a symlink = %v; want the cause beside %q", err, errNotFound)
	}
}

func TestSweep(t *testing.T) {
	s, err := OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-25 * time.Hour)
	put := func(key string, mtime time.Time) {
		t.Helper()
		if _, err := s.Put(ctx, key, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(s.Dir(), key), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	put("2026112101/old-0.png", old)
	put("2026112101/old-1.png", old)
	put("2026112213/new-0.png", now)
	put("2026112213/old-2.png", old)
	// An old, empty directory goes; a fresh empty one (a writer is about
	// to use it) stays.
	if err := os.Chtimes(filepath.Join(s.Dir(), "2026112101"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.Dir(), "2026112214"), 0o755); err != nil {
		t.Fatal(err)
	}

	n, err := s.Sweep(ctx, now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("removed %d files; want 3", n)
	}
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(s.Dir(), p)); return err == nil }
	if !exists("2026112213/new-0.png") || exists("2026112213/old-2.png") || exists("2026112101/old-0.png") {
		t.Error("wrong files removed")
	}
	if !exists("2026112214") {
		t.Error("fresh empty directory removed")
	}
	if !exists("2026112213") {
		t.Error("directory in use removed")
	}
	// The emptied old directory was modified by the sweep, so it stays until
	// it too is older than the cutoff.
	if _, err := s.Sweep(ctx, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if exists("2026112101") {
		t.Error("old empty directory not removed by a later sweep")
	}
}

func TestTouch(t *testing.T) {
	s, err := OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if ok, err := s.Touch(ctx, "h/abc.png"); ok || err != nil {
		t.Fatalf("Touch of a missing blob = %v, %v", ok, err)
	}
	if _, err := s.Put(ctx, "h/abc.png", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-30 * time.Hour)
	_ = os.Chtimes(filepath.Join(s.Dir(), "h/abc.png"), old, old)
	if ok, err := s.Touch(ctx, "h/abc.png"); !ok || err != nil {
		t.Fatalf("Touch = %v, %v", ok, err)
	}
	if n, _ := s.Sweep(ctx, time.Now().Add(-24*time.Hour)); n != 0 {
		t.Error("the janitor removed a blob just touched")
	}
	if _, err := s.Touch(ctx, "../x.png"); err == nil {
		t.Error("Touch outside the directory")
	}
}
