//go:build unix

package blob

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
)

// Only regular files are blobs. A FIFO, a socket or a directory under a
// blob's key is not found, at once: opening a FIFO for reading waits for a
// writer, which would hold a download (and its connection) forever.
func TestOpenNotRegularIsNotFound(t *testing.T) {
	s, err := OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(context.Background(), "h/real.png", strings.NewReader("png bytes")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(s.Dir(), "h", "fifo.png")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	// Should Open block on the FIFO, a writer opened here lets it go, so
	// the test fails instead of hanging.
	t.Cleanup(func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
	})
	// A socket's path is short: bind it in its own short-named directory
	// and move it into the store.
	sockDir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	ln, err := net.Listen("unix", filepath.Join(sockDir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Rename(filepath.Join(sockDir, "s"), filepath.Join(s.Dir(), "h", "sock.png")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.Dir(), "h", "dir.png"), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{"h/fifo.png", "h/sock.png", "h/dir.png", "h"} {
		t.Run(key, func(t *testing.T) {
			type result struct {
				obj Object
				err error
			}
			done := make(chan result, 1)
			go func() {
				obj, _, err := s.Open(context.Background(), key)
				done <- result{obj, err}
			}()
			select {
			case r := <-done:
				if r.err == nil {
					b, _ := io.ReadAll(r.obj)
					_ = r.obj.Close()
					t.Fatalf("Open(%q) served %q", key, b)
				}
				var nf *apperr.NotFoundError
				if !errors.As(r.err, &nf) {
					t.Fatalf("Open(%q) = %v; want *apperr.NotFoundError", key, r.err)
				}
			case <-time.After(2 * time.Second):
				t.Fatalf("Open(%q) still blocked after 2s; want not found at once", key)
			}
		})
	}
	// The regular blob beside them is served.
	obj, info, err := s.Open(context.Background(), "h/real.png")
	if err != nil || info.Size != 9 {
		t.Fatalf("Open of the regular blob = %v, size %d", err, info.Size)
	}
	b, err := io.ReadAll(obj)
	_ = obj.Close()
	if err != nil || string(b) != "png bytes" {
		t.Fatalf("read %q, %v", b, err)
	}
}
