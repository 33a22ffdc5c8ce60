package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A service is ready when its own address answers while it runs: one that
// exited (its port taken, say) is not, though something else answers at
// that address, and one that runs is.
func TestWaitReady(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()
	for _, tt := range []struct {
		name    string
		script  string
		wantErr string
	}{
		{"exited", "exit 3", "exited before it was ready"},
		{"running", "exec sleep 30", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := startProc("ready-"+tt.name, "/bin/sh", []string{"-c", tt.script}, nil, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			defer p.kill()
			if tt.wantErr != "" {
				// Its end seen before the wait starts, so the wait cannot
				// pass on the answer before the exit.
				p.done <- <-p.done
			}
			err = p.waitReady(context.Background(), other.URL)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("waitReady: %v; want ready", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("waitReady: %v; want an error saying %q", err, tt.wantErr)
			}
		})
	}
}
