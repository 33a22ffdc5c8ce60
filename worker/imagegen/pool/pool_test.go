package pool

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/imagegen/gemini"
)

var (
	stdModel = catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}
	proModel = catalog.Model{ID: "lumen-3-pro-image-preview", Tier: catalog.Pro}
)

// pngBytes is a small PNG, the fakes' image.
var pngBytes = func() []byte {
	var buf bytes.Buffer
	_ = png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 4, 3)))
	return buf.Bytes()
}()

// fakeUpstream speaks the Gemini API's generateContent (and, for Vertex
// AI, its projects/…/publishers/google/models/…:generateContent). What it
// answers depends on its mode:
//
//	ok      an image (but "block …" prompts: a safety block; "reject …"
//	        prompts: 400 INVALID_ARGUMENT)
//	500     500 INTERNAL
//	429     429 RESOURCE_EXHAUSTED
//	401     401 UNAUTHENTICATED, unless the key is goodKey
//	403     403 PERMISSION_DENIED
//	badkey  400 with the reason API_KEY_INVALID
type fakeUpstream struct {
	name    string
	url     string
	mode    atomic.Value // string
	goodKey string
	// delay holds each answer back (a time.Duration): set while calls
	// may be under way.
	delay atomic.Int64

	mu    sync.Mutex
	calls int
	keys  []string
	paths []string
	auths []string
}

func newFake(t *testing.T, name, mode string) *fakeUpstream {
	t.Helper()
	f := &fakeUpstream{name: name}
	f.mode.Store(mode)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fakeUpstream) setMode(m string) { f.mode.Store(m) }

func (f *fakeUpstream) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body struct {
		Contents []struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
	}
	_ = json.Unmarshal(b, &body)
	prompt := ""
	if len(body.Contents) > 0 && len(body.Contents[0].Parts) > 0 {
		prompt = body.Contents[0].Parts[0].Text
	}
	key := r.Header.Get("x-goog-api-key")
	f.mu.Lock()
	f.calls++
	f.keys = append(f.keys, key)
	f.paths = append(f.paths, r.URL.Path)
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if d := time.Duration(f.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	apiErr := func(code int, status string, details ...any) {
		e := map[string]any{"code": code, "status": status, "message": f.name + " says no"}
		if len(details) > 0 {
			e["details"] = details
		}
		reply(code, map[string]any{"error": e})
	}
	switch mode := f.mode.Load().(string); {
	case mode == "500":
		apiErr(500, "INTERNAL")
	case mode == "429":
		apiErr(429, "RESOURCE_EXHAUSTED")
	case mode == "401" && (f.goodKey == "" || key != f.goodKey):
		apiErr(401, "UNAUTHENTICATED")
	case mode == "403":
		apiErr(403, "PERMISSION_DENIED")
	case mode == "badkey":
		apiErr(400, "INVALID_ARGUMENT", map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"})
	case strings.HasPrefix(prompt, "block"):
		reply(200, map[string]any{"promptFeedback": map[string]any{"blockReason": "PROHIBITED_CONTENT"}})
	case strings.HasPrefix(prompt, "reject"):
		apiErr(400, "INVALID_ARGUMENT")
	default:
		reply(200, map[string]any{"candidates": []any{map[string]any{
			"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(pngBytes)}}}},
			"finishReason": "STOP",
		}}})
	}
}

// spec is an upstream of a test's file.
type spec struct {
	Name            string   `json:"name"`
	Provider        string   `json:"provider"`
	APIKey          string   `json:"api_key,omitempty"`
	BaseURL         string   `json:"base_url,omitempty"`
	Project         string   `json:"project,omitempty"`
	Location        string   `json:"location,omitempty"`
	CredentialsFile string   `json:"credentials_file,omitempty"`
	Weight          int      `json:"weight,omitempty"`
	Models          []string `json:"models,omitempty"`
	RPM             int      `json:"rpm,omitempty"`
	Concurrency     int      `json:"concurrency,omitempty"`
}

func (f *fakeUpstream) spec(key string, weight int) spec {
	return spec{Name: f.name, Provider: "gemini", APIKey: key, BaseURL: f.url, Weight: weight}
}

// fileJSON is a pool file of upstreams with breaker settings.
func fileJSON(t *testing.T, breaker string, ups ...spec) []byte {
	t.Helper()
	u, err := json.Marshal(ups)
	if err != nil {
		t.Fatal(err)
	}
	if breaker == "" {
		breaker = "{}"
	}
	return []byte(`{"upstreams":` + string(u) + `,"breaker":` + breaker + `}`)
}

// obs is the Observer: the calls by upstream and outcome, and the last
// breaker state seen of each.
type obs struct {
	mu     sync.Mutex
	calls  map[string]int // "name/outcome"
	states map[string]upstream.State
	// removed: the upstreams a reload dropped, in order.
	removed []string
}

func (o *obs) UpstreamCall(name string, oc upstream.Outcome, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[name+"/"+string(oc)]++
}

func (o *obs) UpstreamBreaker(name string, s upstream.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.states[name] = s
}

func (o *obs) UpstreamRemoved(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.removed = append(o.removed, name)
}

func (o *obs) get(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[key]
}

// env is a test's pool, with what it observes.
type env struct {
	t    *testing.T
	rdb  redis.UniversalClient
	pool *Pool
	obs  *obs
	log  *zap.Logger
	logs *observer.ObservedLogs
}

// newGen makes an upstream's generator as the worker does (worker.go's
// newPool).
func newGen(ctx context.Context, u upstream.Upstream) (imagegen.Generator, error) {
	m := map[catalog.Tier]string{}
	for t, id := range u.ModelIDs {
		m[catalog.Tier(t)] = id
	}
	return gemini.New(ctx, gemini.Config{APIKey: u.APIKey, BaseURL: u.BaseURL, Models: m, Timeout: 10 * time.Second,
		Vertex: u.Provider == upstream.Vertex, Project: u.Project, Location: u.Location, CredentialsFile: u.CredentialsFile,
		Expected: map[catalog.Tier]time.Duration{catalog.Standard: time.Second, catalog.Pro: time.Second}})
}

func newEnv(t *testing.T) *env {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	o := &obs{calls: map[string]int{}, states: map[string]upstream.State{}}
	rdb := redistest.Start(t).Client(t)
	log := zap.New(core)
	return &env{t: t, rdb: rdb, pool: New(rdb, newGen, o, log), obs: o, log: log, logs: logs}
}

// load parses data and loads it into the pool.
func (e *env) load(data []byte) {
	e.t.Helper()
	pl, err := upstream.Parse(data, func(string) string { return "" })
	if err != nil {
		e.t.Fatalf("Parse: %v", err)
	}
	if err := e.pool.Load(context.Background(), pl, data); err != nil {
		e.t.Fatalf("Load: %v", err)
	}
}

// generate makes one call as the processor does: the task's logger in
// ctx.
func (e *env) generate(ctx context.Context, m catalog.Model, prompt string) ([]imagegen.Image, error) {
	ctx = logging.WithLogger(ctx, e.log, zap.String("task_id", "task_test"))
	return e.pool.Generate(ctx, imagegen.Request{Model: m, Prompt: prompt, AspectRatio: "1:1"}, func(int) {})
}

// mustGenerate makes n images one after another, failing on any error.
func (e *env) mustGenerate(n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		imgs, err := e.generate(context.Background(), stdModel, "a fox")
		if err != nil {
			e.t.Fatalf("call %d: %v", i+1, err)
		}
		if len(imgs) != 1 || imgs[0].Width != 4 || imgs[0].Height != 3 {
			e.t.Fatalf("call %d: images %+v", i+1, imgs)
		}
	}
}

func (e *env) refusedLogs() int {
	return e.logs.FilterMessageSnippet("UPSTREAM CREDENTIAL REFUSED").FilterLevelExact(zapcore.ErrorLevel).Len()
}

func (e *env) status(name string) upstream.Status {
	e.t.Helper()
	st, err := upstream.Statuses(context.Background(), e.rdb)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range st {
		if s.Name == name {
			return s
		}
	}
	e.t.Fatalf("no status of %s in %+v", name, st)
	return upstream.Status{}
}

// A pool with one upstream of each kind of fault: one answering 500, one
// 429, one 401, and one healthy.
func TestFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down, busy, revoked, healthy := newFake(t, "down", "500"), newFake(t, "busy", "429"), newFake(t, "revoked", "401"), newFake(t, "healthy", "ok")
	revoked.goodKey = "fresh-key"
	const breaker = `{"failures":2,"cooldown":"30s","throttle":"30s"}`
	busySpec := busy.spec("k-busy", 1)
	busySpec.RPM = 1000 // a quota: its 429 cools it there too
	e.load(fileJSON(t, breaker, down.spec("k-down", 1), busySpec, revoked.spec("old-key", 1), healthy.spec("k-healthy", 1)))

	e.mustGenerate(40)

	if n := healthy.count(); n != 40 {
		t.Errorf("healthy: %d calls; want every one of the 40", n)
	}
	if n := revoked.count(); n != 1 {
		t.Errorf("revoked (401): %d calls; want 1, then disabled", n)
	}
	if n := down.count(); n != 2 {
		t.Errorf("down (500): %d calls; want 2 (failures), then its breaker open", n)
	}
	if n := busy.count(); n != 1 {
		t.Errorf("busy (429): %d calls; want 1, then cooling", n)
	}
	for key, want := range map[string]int{"healthy/success": 40, "revoked/refused": 1, "down/failure": 2, "busy/throttled": 1} {
		if got := e.obs.get(key); got != want {
			t.Errorf("observer: %s %d; want %d", key, got, want)
		}
	}
	e.obs.mu.Lock()
	downState := e.obs.states["down"]
	e.obs.mu.Unlock()
	if s := downState; s != upstream.Open {
		t.Errorf("observer: down's breaker %q; want open", s)
	}
	if n := e.refusedLogs(); n != 1 {
		t.Errorf("%d loud logs of the refused credential; want 1", n)
	}
	if s := e.status("revoked"); !s.Disabled {
		t.Errorf("revoked: %+v; want disabled", s)
	}
	if s := e.status("down"); s.Breaker != upstream.Open || s.OpenUntil == nil {
		t.Errorf("down: %+v; want open", s)
	}
	if s := e.status("busy"); s.CoolingUntil == nil || s.Breaker != upstream.Closed {
		t.Errorf("busy: %+v; want cooling, breaker closed", s)
	}
	if d, err := e.pool.cur.Load().quota.Cooldown(context.Background(), quotaKey("busy")); err != nil || d <= 0 {
		t.Errorf("busy's quota cooldown %v, %v; want one after its 429", d, err)
	}

	// Reloading the same credential keeps it disabled.
	e.load(fileJSON(t, breaker+" ", down.spec("k-down", 1), busySpec, revoked.spec("old-key", 1), healthy.spec("k-healthy", 1)))
	e.mustGenerate(10)
	if n := revoked.count(); n != 1 {
		t.Errorf("revoked after a reload with the same key: %d calls; want still 1", n)
	}

	// The file gives it a new key: it takes calls again.
	e.load(fileJSON(t, breaker, down.spec("k-down", 1), busySpec, revoked.spec("fresh-key", 1), healthy.spec("k-healthy", 1)))
	for i := 0; i < 200 && revoked.count() == 1; i++ {
		e.mustGenerate(1)
	}
	revoked.mu.Lock()
	keys := revoked.keys
	revoked.mu.Unlock()
	if len(keys) < 2 || keys[len(keys)-1] != "fresh-key" {
		t.Fatalf("revoked with a new key: keys sent %v; want fresh-key after the reload", keys)
	}
	if s := e.status("revoked"); s.Disabled {
		t.Errorf("revoked with a new key: %+v; want enabled", s)
	}
	if n := e.refusedLogs(); n != 1 {
		t.Errorf("%d loud logs; want still 1", n)
	}
	if n := down.count(); n != 2 {
		t.Errorf("down: %d calls; its breaker (open for 30 s) should have kept it at 2", n)
	}
}

// The same pool under concurrent calls: the credential's refusal is logged
// once, and the broken upstreams get a bounded number of calls.
func TestFailoverConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down, busy, revoked, healthy := newFake(t, "c-down", "500"), newFake(t, "c-busy", "429"), newFake(t, "c-revoked", "401"), newFake(t, "c-healthy", "ok")
	for _, f := range []*fakeUpstream{down, busy, revoked, healthy} {
		f.delay.Store(int64(5 * time.Millisecond))
	}
	e.load(fileJSON(t, `{"failures":3,"cooldown":"30s","throttle":"30s"}`, down.spec("k", 1), busy.spec("k", 1), revoked.spec("k", 1), healthy.spec("k", 1)))
	const workers, each = 8, 15
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := e.generate(context.Background(), stdModel, "a fox"); err != nil {
					failed.Add(1)
					t.Errorf("call: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	if n := healthy.count(); n != workers*each {
		t.Errorf("healthy: %d calls; want %d", n, workers*each)
	}
	// At most the calls allowed before the first report came back.
	if n := revoked.count(); n < 1 || n > workers {
		t.Errorf("revoked: %d calls; want 1 to %d", n, workers)
	}
	if n := busy.count(); n < 1 || n > workers {
		t.Errorf("busy: %d calls; want 1 to %d", n, workers)
	}
	if n := down.count(); n < 3 || n > 3+workers {
		t.Errorf("down: %d calls; want 3 to %d", n, 3+workers)
	}
	if n := e.refusedLogs(); n != 1 {
		t.Errorf("%d loud logs of the refused credential; want exactly 1", n)
	}
}

// Every way the provider refuses a credential disables the upstream.
func TestRefusals(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"401", "403", "badkey"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			bad, healthy := newFake(t, "bad-"+mode, mode), newFake(t, "good-"+mode, "ok")
			e.load(fileJSON(t, `{"failures":100}`, bad.spec("k", 5), healthy.spec("k", 1)))
			for i := 0; i < 100 && bad.count() == 0; i++ {
				e.mustGenerate(1)
			}
			e.mustGenerate(20)
			if n := bad.count(); n != 1 {
				t.Errorf("%s: %d calls; want 1, then disabled", mode, n)
			}
			if got := e.obs.get(bad.name + "/refused"); got != 1 {
				t.Errorf("observer: %d refused; want 1", got)
			}
			if s := e.status(bad.name); !s.Disabled {
				t.Errorf("status %+v; want disabled", s)
			}
		})
	}
}

// The caller's own input refused: returned at once, no other upstream
// tried, the upstream's breaker untouched.
func TestFinalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prompt string
		code   apperr.Code
	}{
		{"block this", task.ContentBlocked},
		{"reject this image", task.GenerationFailed},
	}
	for _, tt := range tests {
		t.Run(string(tt.code), func(t *testing.T) {
			e := newEnv(t)
			fakes := []*fakeUpstream{newFake(t, "f1", "ok"), newFake(t, "f2", "ok"), newFake(t, "f3", "ok")}
			var specs []spec
			for _, f := range fakes {
				specs = append(specs, f.spec("k", 1))
			}
			e.load(fileJSON(t, `{"failures":1}`, specs...))
			for i := 0; i < 5; i++ {
				_, err := e.generate(context.Background(), stdModel, tt.prompt)
				if apperr.CodeOf(err) != tt.code || apperr.IsRetryable(err) {
					t.Fatalf("error %v (code %s); want %s, not retryable", err, apperr.CodeOf(err), tt.code)
				}
			}
			total := 0
			for _, f := range fakes {
				total += f.count()
				if s := e.status(f.name); s.Breaker != upstream.Closed {
					t.Errorf("%s: breaker %s after a final error; want closed", f.name, s.Breaker)
				}
			}
			if total != 5 {
				t.Errorf("%d calls for 5 refused requests; want 5 (no failover)", total)
			}
			e.mustGenerate(3)
		})
	}
}

// A call every upstream fails tries each once and returns a retryable
// error; so does a tier no upstream serves, and a pool not loaded yet.
func TestNoUpstreamLeft(t *testing.T) {
	t.Parallel()
	t.Run("all fail", func(t *testing.T) {
		e := newEnv(t)
		a, b, c := newFake(t, "all-a", "500"), newFake(t, "all-b", "500"), newFake(t, "all-c", "429")
		e.load(fileJSON(t, `{"failures":10}`, a.spec("k", 1), b.spec("k", 1), c.spec("k", 1)))
		_, err := e.generate(context.Background(), stdModel, "a fox")
		if !apperr.IsRetryable(err) || apperr.CodeOf(err) != task.UpstreamUnavailable {
			t.Fatalf("error %v; want a retryable upstream_unavailable", err)
		}
		if a.count() != 1 || b.count() != 1 || c.count() != 1 {
			t.Errorf("calls %d %d %d; want each upstream tried once", a.count(), b.count(), c.count())
		}
	})
	t.Run("tier not served", func(t *testing.T) {
		e := newEnv(t)
		a := newFake(t, "std-only", "ok")
		s := a.spec("k", 1)
		s.Models = []string{"standard"}
		e.load(fileJSON(t, "", s))
		_, err := e.generate(context.Background(), proModel, "a fox")
		if !apperr.IsRetryable(err) || apperr.CodeOf(err) != task.UpstreamUnavailable {
			t.Fatalf("error %v; want a retryable upstream_unavailable", err)
		}
		if a.count() != 0 {
			t.Errorf("%d calls to an upstream not serving pro", a.count())
		}
		if tiers := e.pool.Tiers(); len(tiers) != 1 || tiers[0] != catalog.Standard {
			t.Errorf("Tiers %v; want [standard]", tiers)
		}
		e.mustGenerate(1)
	})
	t.Run("not loaded", func(t *testing.T) {
		e := newEnv(t)
		_, err := e.generate(context.Background(), stdModel, "a fox")
		if !apperr.IsRetryable(err) || apperr.CodeOf(err) != task.UpstreamUnavailable {
			t.Fatalf("error %v; want a retryable upstream_unavailable", err)
		}
	})
	t.Run("all open, cooling or disabled", func(t *testing.T) {
		e := newEnv(t)
		a, b, c := newFake(t, "x-a", "500"), newFake(t, "x-b", "429"), newFake(t, "x-c", "401")
		e.load(fileJSON(t, `{"failures":1,"cooldown":"30s","throttle":"30s"}`, a.spec("k", 1), b.spec("k", 1), c.spec("k", 1)))
		_, _ = e.generate(context.Background(), stdModel, "a fox") // each tried once
		start := time.Now()
		_, err := e.generate(context.Background(), stdModel, "a fox")
		if !apperr.IsRetryable(err) || apperr.CodeOf(err) != task.UpstreamUnavailable || !strings.Contains(err.Error(), "open, cooling or disabled") {
			t.Fatalf("error %v; want a retryable upstream_unavailable saying why", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("took %v; want at once", d)
		}
		if a.count()+b.count()+c.count() != 3 {
			t.Errorf("calls %d %d %d; want only the first call's", a.count(), b.count(), c.count())
		}
	})
}

// An open breaker lets one probe through after its cooldown, in the pool
// too; a failed probe opens it again, a good one closes it.
func TestProbe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down, healthy := newFake(t, "p-down", "500"), newFake(t, "p-healthy", "ok")
	e.load(fileJSON(t, `{"failures":1,"cooldown":"1s"}`, down.spec("k", 1), healthy.spec("k", 1)))
	for i := 0; i < 100 && down.count() == 0; i++ {
		e.mustGenerate(1)
	}
	if down.count() != 1 {
		t.Fatalf("down: %d calls", down.count())
	}
	e.mustGenerate(10)
	if n := down.count(); n != 1 {
		t.Fatalf("down while open: %d calls; want 1", n)
	}
	time.Sleep(1100 * time.Millisecond)
	for i := 0; i < 100 && down.count() == 1; i++ {
		e.mustGenerate(1)
	}
	e.mustGenerate(10) // within the new cooldown
	if n := down.count(); n != 2 {
		t.Fatalf("down after one cooldown: %d calls; want 2 (one probe, failed)", n)
	}
	down.setMode("ok")
	time.Sleep(1100 * time.Millisecond)
	e.mustGenerate(40)
	if n := down.count(); n < 6 {
		t.Errorf("down recovered: %d calls in all; want it back in the rotation", n)
	}
	if s := e.status(down.name); s.Breaker != upstream.Closed {
		t.Errorf("down recovered: breaker %s", s.Breaker)
	}
}

// Weights share the calls.
func TestWeights(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	heavy, light := newFake(t, "heavy", "ok"), newFake(t, "light", "ok")
	e.load(fileJSON(t, "", heavy.spec("k", 3), light.spec("k", 1)))
	const n = 400
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/8; i++ {
				if _, err := e.generate(context.Background(), stdModel, "a fox"); err != nil {
					t.Errorf("call: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	h, l := heavy.count(), light.count()
	if h+l != n || h < 260 || h > 340 {
		t.Errorf("weights 3:1: %d and %d calls of %d; want about 300 and 100", h, l, n)
	}
}

// writeFile replaces path's content at once (as a ConfigMap's update does).
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Hot reload under load: an upstream removed and another added while calls
// run; none fails, and the removed one takes no call begun after.
func TestWatchReloadUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b, c := newFake(t, "r-a", "ok"), newFake(t, "r-b", "ok"), newFake(t, "r-c", "ok")
	for _, f := range []*fakeUpstream{a, b, c} {
		f.delay.Store(int64(10 * time.Millisecond))
	}
	path := filepath.Join(t.TempDir(), "upstreams.json")
	first := fileJSON(t, "", a.spec("k", 1), b.spec("k", 1))
	writeFile(t, path, first)
	e.load(first)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		e.pool.Watch(ctx, path, func(string) string { return "" }, 50*time.Millisecond, nil)
	}()

	const workers = 6
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		done   [workers]atomic.Int64
		stop   = make(chan struct{})
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.generate(context.Background(), stdModel, "a fox"); err != nil {
					failed.Add(1)
					t.Errorf("call during the reload: %v", err)
				}
				done[w].Add(1)
			}
		}()
	}
	waitCalls := func(min int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		var start [workers]int64
		for w := range done {
			start[w] = done[w].Load()
		}
		for w := range done {
			for done[w].Load() < start[w]+min {
				if time.Now().After(deadline) {
					t.Fatalf("worker %d stuck", w)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	waitCalls(3)
	// a out, c in, b reweighted.
	writeFile(t, path, fileJSON(t, "", b.spec("k", 2), c.spec("k", 1)))
	deadline := time.Now().Add(10 * time.Second)
	for c.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the new upstream never got a call: the file was not reloaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Every call begun before the reload has ended after two more each.
	waitCalls(2)
	aAfter := a.count()
	waitCalls(10)
	close(stop)
	wg.Wait()
	if n := a.count(); n != aAfter {
		t.Errorf("the removed upstream got %d calls after the reload", n-aAfter)
	}
	if failed.Load() > 0 {
		t.Errorf("%d calls failed during the reload", failed.Load())
	}
	var names []string
	st, _ := upstream.Statuses(context.Background(), e.rdb)
	for _, s := range st {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "r-b,r-c" {
		t.Errorf("published upstreams %v; want r-b, r-c", names)
	}
	// The upstream the file dropped leaves the metrics.
	e.obs.mu.Lock()
	removed := slices.Clone(e.obs.removed)
	e.obs.mu.Unlock()
	if !slices.Equal(removed, []string{"r-a"}) {
		t.Errorf("removed from the metrics: %v; want r-a", removed)
	}
	fileState := func() *upstream.FileState {
		t.Helper()
		f, err := upstream.ReadFileState(context.Background(), e.rdb)
		if err != nil || f == nil {
			t.Fatalf("the file's state: %+v, %v", f, err)
		}
		return f
	}
	if f := fileState(); f.Path != path || time.Since(f.LoadedAt) > 10*time.Second || f.RefusedAt != nil {
		t.Errorf("the file's state after the reload: %+v; want %s loaded just now, nothing refused", f, path)
	}

	// A file that does not parse is logged and the pool kept.
	writeFile(t, path, []byte(`{"upstreams":[{"name":"broken"}]}`))
	time.Sleep(200 * time.Millisecond)
	if e.logs.FilterMessageSnippet("not usable").Len() == 0 {
		t.Error("a broken file was not logged")
	}
	// ... and shown to operators: the pool they see is the one loaded
	// before, and the change was refused, with why.
	if f := fileState(); f.RefusedAt == nil || !strings.Contains(f.Refusal, "broken") || f.LoadedAt.After(*f.RefusedAt) {
		t.Errorf("the file's state after a refused change: %+v; want the refusal and its reason", f)
	}
	before := c.count() + b.count()
	e.mustGenerate(5)
	if c.count()+b.count() != before+5 {
		t.Error("the pool changed on a broken file")
	}
	cancel()
	<-watched
}

// SIGHUP (the hup channel) reloads at once, whatever the interval.
func TestWatchHUP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := newFake(t, "h-a", "ok"), newFake(t, "h-b", "ok")
	path := filepath.Join(t.TempDir(), "upstreams.json")
	first := fileJSON(t, "", a.spec("k", 1))
	writeFile(t, path, first)
	e.load(first)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan os.Signal, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		e.pool.Watch(ctx, path, func(string) string { return "" }, time.Hour, hup)
	}()
	defer func() { cancel(); <-watched }()
	writeFile(t, path, fileJSON(t, "", b.spec("k", 1)))
	e.mustGenerate(2)
	if a.count() != 2 || b.count() != 0 {
		t.Fatalf("before SIGHUP: a %d, b %d; want the old file", a.count(), b.count())
	}
	hup <- os.Interrupt
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mustGenerate(1)
		if b.count() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload the file")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An upstream with its quota used up is skipped for another that has
// some left (a call is drawn, by weight, among the healthy upstreams that
// serve the task's model and have quota left), rather than waited for.
func TestQuotaLeft(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	limited, spare := newFake(t, "q-limited", "ok"), newFake(t, "q-spare", "ok")
	ls := limited.spec("k", 1000)
	ls.RPM = 1 // one call a minute
	e.load(fileJSON(t, "", ls, spare.spec("k", 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for i := 0; i < 3; i++ {
		if _, err := e.generate(ctx, stdModel, "a fox"); err != nil {
			t.Fatalf("call %d after %v: %v (limited %d calls, spare %d)", i+1, time.Since(start), err, limited.count(), spare.count())
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("3 calls took %v: the pool waited for a used-up quota instead of using the spare upstream", d)
	}
}

// After a 429 the breaker's throttle (here 1 s) lets the upstream be tried
// again; the quota's own cooldown (10 s by default) must not then hold that
// call back.
func TestThrottleMatchesQuotaCooldown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	busy, other := newFake(t, "t-busy", "429"), newFake(t, "t-other", "ok")
	bs := busy.spec("k", 1000)
	bs.RPM = 10000
	e.load(fileJSON(t, `{"throttle":"1s"}`, bs, other.spec("k", 1)))
	for i := 0; i < 100 && busy.count() == 0; i++ {
		e.mustGenerate(1)
	}
	busy.setMode("ok")
	time.Sleep(1200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := e.generate(ctx, stdModel, "a fox"); err != nil {
		t.Fatalf("call after the throttle: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the call after the breaker's 1 s throttle took %v (busy %d calls): it waited for the quota's cooldown", d, busy.count())
	}
}

// A call cancelled (the task's deadline, a shutdown) returns ctx's error
// and does not count against the upstream.
func TestCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := newFake(t, "slow", "ok")
	slow.delay.Store(int64(2 * time.Second))
	e.load(fileJSON(t, `{"failures":1}`, slow.spec("k", 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.generate(ctx, stdModel, "a fox")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v; want the context's", err)
	}
	if s := e.status("slow"); s.Breaker != upstream.Closed || s.FailuresInARow != 0 {
		t.Errorf("status %+v; a cancelled call is not the upstream's failure", s)
	}
}

// vertexAuth is a Google OAuth token endpoint: it checks the service
// account's signed assertion and answers a token.
type vertexAuth struct {
	t     *testing.T
	pub   atomic.Pointer[rsa.PublicKey] // the service account's current key
	email string
	url   string
	fail  atomic.Bool // answer 400 invalid_grant (a deleted key)
	calls atomic.Int64
}

func (a *vertexAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	_ = r.ParseForm()
	w.Header().Set("Content-Type", "application/json")
	if a.fail.Load() {
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`))
		return
	}
	if err := a.check(r.PostForm); err != nil {
		a.t.Errorf("token request: %v", err)
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
		return
	}
	_, _ = w.Write([]byte(`{"access_token":"tok","token_type":"Bearer","expires_in":3600}`))
}

func (a *vertexAuth) check(f url.Values) error {
	if g := f.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		return fmt.Errorf("grant_type %q", g)
	}
	parts := strings.Split(f.Get("assertion"), ".")
	if len(parts) != 3 {
		return fmt.Errorf("assertion %q is not a JWT", f.Get("assertion"))
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(a.pub.Load(), crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		Iss, Aud, Scope string
	}
	_ = json.Unmarshal(payload, &claims)
	if claims.Iss != a.email || claims.Aud != a.url+"/token" || !strings.Contains(claims.Scope, "cloud-platform") {
		return fmt.Errorf("claims %s", payload)
	}
	return nil
}

// serviceAccount writes a service account's JSON key whose token_uri is a
// fake token endpoint, and returns its path and the endpoint.
func serviceAccount(t *testing.T) (string, *vertexAuth) {
	t.Helper()
	auth := &vertexAuth{t: t, email: "easel@proj-1.iam.gserviceaccount.com"}
	srv := httptest.NewServer(auth)
	t.Cleanup(srv.Close)
	auth.url = srv.URL
	path := filepath.Join(t.TempDir(), "sa.json")
	auth.rotate(t, path)
	return path, auth
}

// rotate gives the service account a new key, written at path (as a
// Kubernetes Secret's update does), the old one no longer accepted.
func (a *vertexAuth) rotate(t *testing.T, path string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "proj-1",
		"private_key_id": fmt.Sprintf("key-%d", time.Now().UnixNano()),
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   a.email,
		"client_id":      "1234567890",
		"token_uri":      a.url + "/token",
	})
	writeFile(t, path, sa)
	a.pub.Store(&key.PublicKey)
}

func vertexSpec(f *fakeUpstream, sa string) spec {
	return spec{Name: f.name, Provider: "vertex", Project: "proj-1", Location: "europe-west4", CredentialsFile: sa, BaseURL: f.url}
}

// The Vertex AI path: the SDK's Vertex backend, authenticated with the
// service account's OAuth token.
func TestVertex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sa, auth := serviceAccount(t)
	v := newFake(t, "gcp-eu", "ok")
	e.load(fileJSON(t, "", vertexSpec(v, sa)))
	e.mustGenerate(3)
	v.mu.Lock()
	paths, auths, keys := v.paths, v.auths, v.keys
	v.mu.Unlock()
	if len(paths) != 3 {
		t.Fatalf("%d calls; want 3", len(paths))
	}
	const want = "/v1beta1/projects/proj-1/locations/europe-west4/publishers/google/models/gemini-2.5-flash-image:generateContent"
	for i := range paths {
		if paths[i] != want || auths[i] != "Bearer tok" || keys[i] != "" {
			t.Errorf("call %d: %s, Authorization %q, key %q; want %s with Bearer tok and no API key", i+1, paths[i], auths[i], keys[i], want)
		}
	}
	if n := auth.calls.Load(); n != 1 {
		t.Errorf("%d token requests; want 1 (the token is kept until it expires)", n)
	}
	if s := e.status("gcp-eu"); s.Provider != "vertex" || s.Project != "proj-1" || s.Location != "europe-west4" {
		t.Errorf("status %+v", s)
	}
}

// Vertex AI's 403 (the service account lacks the permission) disables the
// upstream, as a refused key does.
func TestVertexPermissionDenied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sa, _ := serviceAccount(t)
	v, healthy := newFake(t, "gcp-denied", "403"), newFake(t, "v-healthy", "ok")
	e.load(fileJSON(t, `{"failures":100}`, vertexSpec(v, sa), healthy.spec("k", 1)))
	for i := 0; i < 100 && v.count() == 0; i++ {
		e.mustGenerate(1)
	}
	e.mustGenerate(20)
	if n := v.count(); n != 1 {
		t.Errorf("%d calls; want 1, then disabled", n)
	}
	if s := e.status(v.name); !s.Disabled {
		t.Errorf("status %+v; want disabled", s)
	}
}

// A service account whose key Google no longer accepts: the token
// endpoint answers 400 invalid_grant. That is the credential refused (as a
// 401 is), not a failure of the upstream to retry every cooldown.
func TestVertexTokenRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sa, auth := serviceAccount(t)
	auth.fail.Store(true)
	v, healthy := newFake(t, "gcp-revoked", "ok"), newFake(t, "t-healthy", "ok")
	e.load(fileJSON(t, `{"failures":100}`, vertexSpec(v, sa), healthy.spec("k", 1)))
	for i := 0; i < 100 && auth.calls.Load() == 0; i++ {
		e.mustGenerate(1)
	}
	e.mustGenerate(20)
	if v.count() != 0 {
		t.Errorf("the Vertex fake got %d calls without a token", v.count())
	}
	if got := e.obs.get("gcp-revoked/refused"); got != 1 {
		t.Errorf("outcomes: refused %d, failure %d; want 1 refused (the credential), then disabled",
			got, e.obs.get("gcp-revoked/failure"))
	}
	if s := e.status(v.name); !s.Disabled {
		last := ""
		if len(s.RecentErrors) > 0 {
			last, _, _ = strings.Cut(s.RecentErrors[0].Message, "\n")
		}
		t.Errorf("status: disabled %v, %d failures in a row, last error %q; want disabled", s.Disabled, s.FailuresInARow, last)
	}
}

// A credentials file that is no service account's key fails the load;
// the pool keeps what it had.
func TestLoadRefusesBadCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := newFake(t, "l-good", "ok")
	e.load(fileJSON(t, "", good.spec("k", 1)))
	bad := filepath.Join(t.TempDir(), "user.json")
	if err := os.WriteFile(bad, []byte(`{"type":"authorized_user","client_id":"x","client_secret":"y","refresh_token":"z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	data := fileJSON(t, "", spec{Name: "l-bad", Provider: "vertex", Project: "p", Location: "l", CredentialsFile: bad})
	pl, err := upstream.Parse(data, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pool.Load(context.Background(), pl, data); err == nil || !strings.Contains(err.Error(), "l-bad") {
		t.Fatalf("Load: %v; want the bad upstream named", err)
	}
	e.mustGenerate(2)
	if good.count() != 2 {
		t.Errorf("the pool changed on a failed load")
	}
}

// pick draws by weight among the untried.
func TestPick(t *testing.T) {
	t.Parallel()
	a := &member{up: upstream.Upstream{Name: "a", Weight: 1}}
	b := &member{up: upstream.Upstream{Name: "b", Weight: 9}}
	cands := []*member{a, b}
	if m := pick(cands, map[*member]bool{a: true, b: true}); m != nil {
		t.Errorf("all tried: %v", m.up.Name)
	}
	for i := 0; i < 50; i++ {
		if m := pick(cands, map[*member]bool{b: true}); m != a {
			t.Fatalf("b tried: picked %v", m)
		}
	}
	if m := pick(nil, map[*member]bool{}); m != nil {
		t.Error("no candidates")
	}
}

// A Vertex AI upstream refused (403), its service account's key then
// rotated in place in the credentials file (a Kubernetes Secret updated)
// and the upstreams file reloaded: it is a new credential, and takes calls
// again.
func TestVertexCredentialRotatedInPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sa, auth := serviceAccount(t)
	v, healthy := newFake(t, "gcp-rotated", "403"), newFake(t, "rot-healthy", "ok")
	path := filepath.Join(t.TempDir(), "upstreams.json")
	first := fileJSON(t, `{"failures":100}`, vertexSpec(v, sa), healthy.spec("k", 1))
	writeFile(t, path, first)
	e.load(first)
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		e.pool.Watch(ctx, path, func(string) string { return "" }, 50*time.Millisecond, hup)
	}()
	defer func() { cancel(); <-watched }()
	for i := 0; i < 100 && v.count() == 0; i++ {
		e.mustGenerate(1)
	}
	if s := e.status(v.name); !s.Disabled {
		t.Fatalf("after its 403: %+v; want disabled", s)
	}

	// The operator rotates the key, fixes the permission, and makes the
	// workers read the files again (SIGHUP, and an edit of the upstreams
	// file).
	auth.rotate(t, sa)
	v.setMode("ok")
	hup <- os.Interrupt
	writeFile(t, path, append(first, '\n'))
	deadline := time.Now().Add(3 * time.Second)
	for e.logs.FilterMessage("upstreams loaded").Len() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if e.logs.FilterMessage("upstreams loaded").Len() < 2 {
		t.Fatal("the upstreams file was not reloaded")
	}
	e.mustGenerate(40)
	if n := v.count(); n < 2 {
		t.Errorf("the upstream with its rotated key: %d calls in all; want it back (status %+v)", n, e.status(v.name))
	}
}
