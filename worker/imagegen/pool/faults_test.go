package pool

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/upstream"
)

// An upstream misconfigured for a model (404 NOT_FOUND, as Vertex answers
// for a model its location lacks), one whose region is refused
// (FAILED_PRECONDITION) or a proxy answering something that is not the
// API: the call moves to another upstream, and the broken one's breaker
// opens. Only the request's own fault (400 INVALID_ARGUMENT, a safety
// block) is final.
func TestUpstreamFaultFailsOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"404 model not found", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"code":404,"status":"NOT_FOUND","message":"Publisher Model was not found or your project does not have access to it"}}`))
		}},
		{"400 FAILED_PRECONDITION", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":{"code":400,"status":"FAILED_PRECONDITION","message":"User location is not supported for the API use."}}`))
		}},
		{"200 not JSON (a proxy)", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte(`<html>captive portal</html>`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			bad := httptest.NewServer(tc.h)
			defer bad.Close()
			healthy := newFake(t, "healthy", "ok")
			e.load(fileJSON(t, `{"failures":1}`, spec{Name: "misconfigured", Provider: "gemini", APIKey: "k", BaseURL: bad.URL, Weight: 1000}, healthy.spec("k", 1)))
			for i := range 20 {
				if _, err := e.generate(context.Background(), stdModel, "a fox"); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if healthy.count() != 20 {
				t.Errorf("healthy upstream calls %d; want 20", healthy.count())
			}
			if s := e.status("misconfigured"); s.Breaker != upstream.Open {
				t.Errorf("the misconfigured upstream's breaker is %s; want open", s.Breaker)
			}
		})
	}
}

// A probe cut short (the task's deadline, a shutdown) gives its lease
// back: the next caller probes, not one ProbeLease later.
func TestCancelledProbeGivesItsLeaseBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	up := newFake(t, "only", "500")
	e.load(fileJSON(t, `{"failures":1,"cooldown":"1s"}`, up.spec("k", 1)))
	_, _ = e.generate(context.Background(), stdModel, "a fox") // opens it
	up.setMode("ok")
	up.delay.Store(int64(time.Second))
	time.Sleep(1100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if _, err := e.generate(ctx, stdModel, "a fox"); err == nil {
		t.Fatal("the probe cut short succeeded")
	}
	cancel()
	up.delay.Store(0)
	if _, err := e.generate(context.Background(), stdModel, "a fox"); err != nil {
		t.Fatalf("the next call after a probe cut short: %v (breaker %s)", err, e.status("only").Breaker)
	}
}

// A file that failed to load because a credentials file it names was not
// there yet loads once the file appears (SIGHUP at once; a tick within a
// minute).
func TestReloadAfterMissingCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newFake(t, "g-a", "ok")
	v := newFake(t, "gcp-new", "ok")
	path := filepath.Join(t.TempDir(), "upstreams.json")
	first := fileJSON(t, "", a.spec("k", 1))
	writeFile(t, path, first)
	e.load(first)
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.pool.Watch(ctx, path, func(string) string { return "" }, 100*time.Millisecond, hup)
	}()
	defer func() { cancel(); <-done }()

	saPath := filepath.Join(t.TempDir(), "sa-new.json") // not mounted yet
	vs := vertexSpec(v, saPath)
	vs.Weight = 1000
	writeFile(t, path, fileJSON(t, "", a.spec("k", 1), vs))
	time.Sleep(400 * time.Millisecond) // the watcher tries, and fails

	_, auth := serviceAccount(t)
	auth.rotate(t, saPath) // the Secret is mounted now
	hup <- os.Interrupt
	deadline := time.Now().Add(5 * time.Second)
	for v.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		e.mustGenerate(5)
	}
	if v.count() == 0 {
		t.Fatalf("the Vertex upstream was never loaded once its credentials file appeared (old upstream calls %d)", a.count())
	}
}
