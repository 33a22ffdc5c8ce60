package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWindowCounts(t *testing.T) {
	// One call a second for 300 s: 60 in any 60 s window.
	var steady []float64
	for i := 0; i < 300; i++ {
		steady = append(steady, float64(i)+0.5)
	}
	if m, mean := windowCounts(steady, 60, 300); m != 60 || mean != 60 {
		t.Errorf("steady: max %d, mean %v; want 60, 60", m, mean)
	}
	// A burst of 10 at 30 s on top: a window holding it has 70. 429s
	// (negative) count.
	burst := append([]float64(nil), steady...)
	for i := 0; i < 10; i++ {
		burst = append(burst, -(30 + float64(i)/100))
	}
	if m, _ := windowCounts(burst, 60, 300); m != 70 {
		t.Errorf("burst: max %d; want 70", m)
	}
	// A run shorter than a window: the rate scaled to it.
	if m, mean := windowCounts([]float64{1, 2, 3}, 60, 30); m != 3 || mean != 6 {
		t.Errorf("short: max %d, mean %v; want 3, 6", m, mean)
	}
	if m, mean := windowCounts(nil, 60, 300); m != 0 || mean != 0 {
		t.Errorf("none: max %d, mean %v", m, mean)
	}
}

// The fake upstream answers 429 to every n-th call at once, and an image
// in Gemini's shape to the others after its latency.
func TestFakeUpstream(t *testing.T) {
	f := newFakeUpstream(20*time.Millisecond, 3)
	srv := httptest.NewServer(f)
	defer srv.Close()
	for i := 1; i <= 6; i++ {
		start := time.Now()
		resp, err := http.Post(srv.URL+"/v1beta/models/m:generateContent", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if i%3 == 0 {
			if resp.StatusCode != 429 {
				t.Errorf("call %d: %d; want 429", i, resp.StatusCode)
			}
			continue
		}
		if resp.StatusCode != 200 || time.Since(start) < 20*time.Millisecond {
			t.Errorf("call %d: %d after %v", i, resp.StatusCode, time.Since(start))
		}
		var body struct {
			Candidates []struct {
				Content struct {
					Parts []struct {
						InlineData struct{ MimeType, Data string } `json:"inlineData"`
					} `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
		}
		if err := json.Unmarshal(b, &body); err != nil || len(body.Candidates) != 1 || len(body.Candidates[0].Content.Parts) != 1 {
			t.Fatalf("call %d: %s (%v)", i, b, err)
		}
		d := body.Candidates[0].Content.Parts[0].InlineData
		raw, _ := base64.StdEncoding.DecodeString(d.Data)
		if cfg, err := png.DecodeConfig(bytes.NewReader(raw)); err != nil || d.MimeType != "image/png" || cfg.Width != 64 || cfg.Height != 64 {
			t.Errorf("call %d: %s %+v %v", i, d.MimeType, cfg, err)
		}
	}
	calls, thr := f.record()
	if len(calls) != 6 || thr != 2 || calls[2] >= 0 || calls[0] < 0 {
		t.Errorf("record %v, %d 429s", calls, thr)
	}
}

// writeFlatPNG's file decodes with image/png to the picture it describes.
func TestWriteFlatPNG(t *testing.T) {
	t.Parallel() // the 300 MB deflate below is slow under -race: alongside the timed runs
	var buf bytes.Buffer
	if err := writeFlatPNG(&buf, 37, [3]uint16{0x1234, 0x8765, 0xabcd}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 37, 37) {
		t.Fatalf("bounds %v", img.Bounds())
	}
	if _, ok := img.(*image.RGBA64); !ok {
		t.Errorf("decoded as %T; want *image.RGBA64 (16-bit, 8 bytes a pixel)", img)
	}
	for _, p := range []image.Point{{0, 0}, {36, 0}, {5, 17}, {36, 36}} {
		r, g, b, a := img.At(p.X, p.Y).RGBA()
		if r != 0x1234 || g != 0x8765 || b != 0xabcd || a != 0xffff {
			t.Errorf("%v: %x %x %x %x", p, r, g, b, a)
		}
	}
	// The attack's size compresses to a few hundred KB (only checked
	// without -short: it deflates 300 MB).
	if testing.Short() {
		return
	}
	var big bytes.Buffer
	if err := writeFlatPNG(&big, 7071, [3]uint16{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(big.Bytes()))
	if err != nil || cfg.Width != 7071 || big.Len() > 1<<20 {
		t.Errorf("7071: %+v, %d bytes, %v", cfg, big.Len(), err)
	}
}

// The drip server sends a byte each tick and holds the connection until
// the client goes away.
func TestDripServer(t *testing.T) {
	d := &dripServer{every: 10 * time.Millisecond}
	srv := httptest.NewServer(d)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/drip.png", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) < 5 || len(b) > 20 || !bytes.HasPrefix([]byte("\x89PNG\r\n\x1a\n"), b[:min(len(b), 8)]) {
		t.Errorf("%d bytes in 150 ms at one per 10 ms: %q", len(b), b)
	}
	for wait := time.Now().Add(time.Second); d.active.Load() != 0 && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	if d.active.Load() != 0 || d.peak.Load() != 1 || d.requests.Load() != 1 {
		t.Errorf("active %d, peak %d, requests %d", d.active.Load(), d.peak.Load(), d.requests.Load())
	}
}

// runPart runs easelbench with args and the built binaries, and returns
// its results.
func runPart(t *testing.T, timeout time.Duration, args ...string) *results {
	t.Helper()
	bin, err := builtBinaries()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.json")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := run(ctx, append([]string{"--bin", bin, "--json", out}, args...)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// TestQuotaRun: three workers under a quota of 60 a minute (one call a
// second) against an upstream answering 429 to one call in five, briefly.
func TestQuotaRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and three workers for 20 s")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	res := runPart(t, 2*time.Minute, "--only", "quota", "--duration", "20s", "--quota-rate", "3", "--quota-latency", "200ms",
		"--quota-429-every", "5", "--worker-env", "EASEL_RETRY_INITIAL_INTERVAL=100ms")
	q := res.Quota
	if q == nil || res.Inflight != nil || len(res.Parts) != 1 || res.Parts[0] != "quota" {
		t.Fatalf("results %+v", res)
	}
	// 60 a minute is one a second; a 429 stops everyone for 10 s.
	if q.Calls < 5 || q.MaxPerWindow > 21 || q.Throttled != q.Calls/5 {
		t.Errorf("%d calls, %d 429s, max %d in a window", q.Calls, q.Throttled, q.MaxPerWindow)
	}
	if q.Created < 50 || q.Failed != 0 || q.Completed < 3 || q.Completed+q.Queued+q.Processing != int(q.Created) {
		t.Errorf("created %d, completed %d, failed %d %v, queued %d, processing %d", q.Created, q.Completed, q.Failed, q.FailedCodes, q.Queued, q.Processing)
	}
}

// TestDripRun: a short drip attack, the fetch timeout cut to 5 s.
func TestDripRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and a worker")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	res := runPart(t, 2*time.Minute, "--only", "drip", "--drip-tasks", "4", "--drip-samples", "2", "--worker-env", "EASEL_FETCH_TIMEOUT=5s")
	d := res.Drip
	if d == nil {
		t.Fatalf("results %+v", res)
	}
	if len(d.Unloaded) != 2 || len(d.Attacked) != 2 || d.UnloadedMedianS < 1 || d.UnloadedMedianS > 5 || d.AttackedMedianS < 1 {
		t.Errorf("unloaded %v, attacked %v", d.Unloaded, d.Attacked)
	}
	if d.HeldAtStart != 4 || d.DripRequests < 4 {
		t.Errorf("drip connections %d at start, %d requests", d.HeldAtStart, d.DripRequests)
	}
	if d.AttackerOutcomes["failed: source_fetch_failed"] != 4 {
		t.Errorf("A's tasks: %v; want 4 failed with source_fetch_failed", d.AttackerOutcomes)
	}
}

// TestMemoryRun: ten small 16-bit PNGs over a decode limit cut to fit the
// test: the task fails at once, the worker lives.
func TestMemoryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway and a worker")
	}
	// Runs the services for a set time, mostly waiting: alongside the
	// package\'s other runs.
	t.Parallel()
	// 2000² at 8 bytes is 30.5 MB a picture, 305 MB for ten: over 100 MB.
	res := runPart(t, 2*time.Minute, "--only", "memory", "--memory-side", "2000",
		"--worker-env", "EASEL_FETCH_MAX_DECODED_MB=100", "--worker-env", "EASEL_DECODE_BUDGET_MB=100")
	m := res.Memory
	if m == nil {
		t.Fatalf("results %+v", res)
	}
	if m.Status != "failed" || m.FailureCode != "invalid_source_image" || !m.once() || !m.WorkerAlive || m.OutOfMemory {
		t.Errorf("memory: %+v", m)
	}
	if m.PeakRSSMB <= 0 || m.PeakRSSMB > 400 || len(m.Samples) < 10 || len(m.Fetches) != 10 {
		t.Errorf("peak RSS %v MB, %d samples, fetches %v", m.PeakRSSMB, len(m.Samples), m.Fetches)
	}
}
