//go:build unix

package api_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO in the blob directory is no blob: its download is 404 at once,
// where opening it for reading would wait for a writer that never comes
// (downloads have no request deadline). The request is bounded, so a
// regression fails instead of hanging.
func TestDownloadFIFOIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const key = "2026112214/0123456789abcdef0123456789abcdef.png"
	fifo := filepath.Join(e.Blobs.Dir(), filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	// Should the gateway wait on the FIFO, a writer opened here releases
	// it, so the server can close.
	t.Cleanup(func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
	})
	for _, method := range []string{"GET", "HEAD"} {
		t.Run(method, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, e.Srv.URL+e.putDownload(key, nil), nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s of a FIFO: %v after %s; want 404 at once", method, err, time.Since(start).Round(time.Millisecond))
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if method == "GET" {
				assertEnvelope(t, reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, 404, "not found")
			} else if resp.StatusCode != 404 {
				t.Fatalf("HEAD of a FIFO: %d; want 404", resp.StatusCode)
			}
		})
	}
}
