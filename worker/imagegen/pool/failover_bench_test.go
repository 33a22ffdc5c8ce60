package pool

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/imagegen/gemini"
)

// benchUpstream is a fake Gemini API answering every call the same way
// after a delay, counting its calls.
type benchUpstream struct {
	status int
	delay  time.Duration
	calls  atomic.Int64
	body   []byte
}

func (f *benchUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	time.Sleep(f.delay)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_, _ = w.Write(f.body)
}

func benchImageReply(tb testing.TB) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 8, 8))); err != nil {
		tb.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"candidates": []any{map[string]any{"finishReason": "STOP", "content": map[string]any{"role": "model",
		"parts": []any{map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(buf.Bytes())}}}}}}})
	return b
}

func benchErrorReply(code int, status string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": "fake " + status, "status": status}})
	return b
}

// BenchmarkFailover measures what a broken upstream costs the calls of a
// pool: the same calls (8 at a time, each upstream call answered in
// 20 ms when healthy) on a pool of one healthy upstream, and on a pool
// where it shares the weight equally with one answering 500 and one
// answering 429. It reports the share of calls that succeeded, the median
// and p99 time of a Generate, and the calls each broken upstream got
// (the breaker and the cooldown, not every call, decide).
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 2000x ./worker/imagegen/pool/
func BenchmarkFailover(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ok := benchImageReply(b)
	newGen := func(ctx context.Context, u upstream.Upstream) (imagegen.Generator, error) {
		return gemini.New(ctx, gemini.Config{APIKey: u.APIKey, BaseURL: u.BaseURL, Timeout: 10 * time.Second})
	}
	model, _ := catalog.New("lumen")
	std := model.Models()[0]
	for _, c := range []struct {
		name   string
		broken bool
	}{{"healthy_only", false}, {"with_500_and_429", true}} {
		b.Run(c.name, func(b *testing.B) {
			healthy := &benchUpstream{status: 200, delay: 20 * time.Millisecond, body: ok}
			failing := &benchUpstream{status: 500, body: benchErrorReply(500, "INTERNAL")}
			throttled := &benchUpstream{status: 429, body: benchErrorReply(429, "RESOURCE_EXHAUSTED")}
			servers := map[string]*benchUpstream{"healthy": healthy, "failing": failing, "throttled": throttled}
			var ups []map[string]any
			for name, f := range servers {
				if !c.broken && name != "healthy" {
					continue
				}
				s := httptest.NewServer(f)
				b.Cleanup(s.Close)
				// A fresh name each run: the breakers of an earlier run
				// (-count) stay in Redis.
				ups = append(ups, map[string]any{"name": fmt.Sprintf("%s-%s-%d", c.name, name, time.Now().UnixNano()), "provider": "gemini", "api_key": "k-" + name, "base_url": s.URL})
			}
			file, _ := json.Marshal(map[string]any{"upstreams": ups})
			pl, err := upstream.Parse(file, nil)
			if err != nil {
				b.Fatal(err)
			}
			p := New(rdb, newGen, nil, zap.NewNop())
			if err := p.Load(context.Background(), pl, file); err != nil {
				b.Fatal(err)
			}
			req := imagegen.Request{TaskID: "t", Model: std, Prompt: "p", AspectRatio: "1:1"}
			var (
				mu    sync.Mutex
				times []time.Duration
				good  atomic.Int64
				next  atomic.Int64
			)
			n := int64(b.N)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= n {
						start := time.Now()
						_, err := p.Generate(context.Background(), req, func(int) {})
						d := time.Since(start)
						if err == nil {
							good.Add(1)
						}
						mu.Lock()
						times = append(times, d)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(times)
			b.ReportMetric(100*float64(good.Load())/float64(n), "success-%")
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(failing.calls.Load()), "calls-500")
			b.ReportMetric(float64(throttled.calls.Load()), "calls-429")
			if testing.Verbose() {
				fmt.Println(c.name, "healthy calls", healthy.calls.Load())
			}
		})
	}
}
