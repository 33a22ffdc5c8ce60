package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
)

// fakeGemini speaks the Gemini API's generateContent JSON. What it answers
// depends on the prompt, so one server serves every scenario:
//
//	"block ..."  the prompt is refused by the safety filter
//	"flaky ..."  429 on the first call, an image on the next
//	"down ..."   500, always
//	"slow ..."   an image, after 5 s
//	"half ..."   an image on odd calls, refused by the safety filter on even ones
//	anything else: a JPEG of the requested aspect ratio
type fakeGemini struct {
	t     *testing.T
	mu    sync.Mutex
	calls map[string]int            // by prompt
	sent  map[string]map[string]any // last request body, by prompt
	paths map[string]string         // last path, by prompt
}

func newFakeGemini(t *testing.T) (*fakeGemini, string) {
	f := &fakeGemini{t: t, calls: map[string]int{}, sent: map[string]map[string]any{}, paths: map[string]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeGemini) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	prompt := ""
	if contents, _ := body["contents"].([]any); len(contents) > 0 {
		parts, _ := contents[0].(map[string]any)["parts"].([]any)
		if len(parts) > 0 {
			prompt, _ = parts[0].(map[string]any)["text"].(string)
		}
	}
	f.mu.Lock()
	f.calls[prompt]++
	n := f.calls[prompt]
	f.sent[prompt] = body
	f.paths[prompt] = r.URL.Path
	f.mu.Unlock()

	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	apiErr := func(code int, status string) {
		reply(code, map[string]any{"error": map[string]any{"code": code, "status": status, "message": "upstream detail that must not reach users"}})
	}
	switch {
	case strings.HasPrefix(prompt, "block"), strings.HasPrefix(prompt, "half") && n%2 == 0:
		reply(200, map[string]any{"promptFeedback": map[string]any{"blockReason": "PROHIBITED_CONTENT"}})
		return
	case strings.HasPrefix(prompt, "flaky") && n == 1:
		apiErr(429, "RESOURCE_EXHAUSTED")
		return
	case strings.HasPrefix(prompt, "down"):
		apiErr(500, "INTERNAL")
		return
	case strings.HasPrefix(prompt, "slow"):
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
			return
		}
	}
	ratio, _ := body["generationConfig"].(map[string]any)["imageConfig"].(map[string]any)["aspectRatio"].(string)
	w2, h2 := 64, 64
	if ratio == "16:9" {
		w2, h2 = 128, 72
	}
	var buf bytes.Buffer
	_ = jpeg.Encode(&buf, image.NewRGBA(image.Rect(0, 0, w2, h2)), nil)
	reply(200, map[string]any{"candidates": []any{map[string]any{
		"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"inlineData": map[string]any{"mimeType": "image/jpeg", "data": base64.StdEncoding.EncodeToString(buf.Bytes())}}}},
		"finishReason": "STOP",
	}}})
}

func (f *fakeGemini) request(prompt string) (string, map[string]any, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paths[prompt], f.sent[prompt], f.calls[prompt]
}

func TestGeminiGenerator(t *testing.T) {
	t.Parallel()
	fake, url := newFakeGemini(t)
	s := startStack(t, stackOptions{env: map[string]string{
		"EASEL_GENERATOR":              "gemini",
		"EASEL_GEMINI_API_KEY":         "test-key",
		"EASEL_GEMINI_BASE_URL":        url,
		"EASEL_GEMINI_MODELS":          "standard=upstream-flash,pro=upstream-pro",
		"EASEL_RETRY_INITIAL_INTERVAL": "50ms",
		"EASEL_RETRY_MAX_ATTEMPTS":     "3",
		"EASEL_TASK_DEADLINE":          "2s",
	}})
	id, key := s.newAccount(t, account.Spec{Name: "gemini", Credits: 1000, RateLimit: 100})
	c := newClient(t, s.base, key)
	src := sourceServer(t)

	// The provider answers JPEG: a PNG task (the default) has it encoded
	// again, a JPEG one keeps it as it came.
	tests := []struct {
		name, model, input string
		status             string
		code               string
		refunded           bool
		format, ext        string
		results            int
		refund             int64 // credits, when refunded
	}{
		{"image", std, `{"prompt":"a fox","aspect_ratio":"16:9"}`, "completed", "", false, "png", ".png?", 1, 0},
		{"pro edit, as JPEG", pro, `{"prompt":"edit it","image_size":"2K","image_urls":["` + src.URL + `/32x32.png"],"output_format":"jpeg"}`, "completed", "", false, "jpeg", ".jpg?", 1, 0},
		{"safety block", std, `{"prompt":"block this"}`, "failed", "content_blocked", true, "", "", 0, 4},
		{"429 then success", std, `{"prompt":"flaky once"}`, "completed", "", false, "png", ".png?", 1, 0},
		{"500 forever", pro, `{"prompt":"down hard"}`, "failed", "upstream_unavailable", true, "", "", 0, 18},
		{"past the deadline", std, `{"prompt":"slow as ever"}`, "failed", "timeout", true, "", "", 0, 4},
		{"one image of two refused", std, `{"prompt":"half refused","num_images":2}`, "completed", "", true, "png", ".png?", 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			task := c.create(createBody(tt.model, tt.input))
			rec, _, _ := c.poll(task, 30*time.Second)
			if rec.Status != tt.status {
				t.Fatalf("status %s (%+v); want %s", rec.Status, rec.Error, tt.status)
			}
			if tt.code != "" {
				if rec.Error == nil || rec.Error.Code != tt.code || strings.Contains(rec.Error.Message, "upstream detail") {
					t.Errorf("error %+v; want code %s and no upstream detail", rec.Error, tt.code)
				}
			} else {
				if len(rec.Results) != tt.results {
					t.Fatalf("%d results; want %d", len(rec.Results), tt.results)
				}
				cfg, format, _ := newClient(t, "", "").download(rec.Results[0])
				if format != tt.format || !strings.Contains(rec.Results[0], tt.ext) || cfg.Width == 0 {
					t.Errorf("result %s is %s %dx%d; want %s", rec.Results[0], format, cfg.Width, cfg.Height, tt.format)
				}
			}
			entries, _ := s.accounts.Ledger(context.Background(), id, 1000)
			refunds := 0
			for _, e := range entries {
				if e.Kind == account.Refund && e.TaskID == task {
					refunds++
					if e.Amount != tt.refund {
						t.Errorf("refunded %d credits; want %d", e.Amount, tt.refund)
					}
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tt.refunded]; refunds != want {
				t.Errorf("%d refunds of the task; want %d", refunds, want)
			}
		})
	}
	t.Cleanup(func() {
		// What was sent upstream.
		path, body, calls := fake.request("a fox")
		ic, _ := body["generationConfig"].(map[string]any)["imageConfig"].(map[string]any)
		if path != "/v1beta/models/upstream-flash:generateContent" || ic["aspectRatio"] != "16:9" || ic["imageSize"] != nil || calls != 1 {
			t.Errorf("standard request: %s %v (%d calls)", path, ic, calls)
		}
		path, body, _ = fake.request("edit it")
		ic, _ = body["generationConfig"].(map[string]any)["imageConfig"].(map[string]any)
		parts, _ := body["contents"].([]any)[0].(map[string]any)["parts"].([]any)
		inline := false
		for _, p := range parts {
			if d, ok := p.(map[string]any)["inlineData"].(map[string]any); ok && d["mimeType"] == "image/png" && d["data"] != "" {
				inline = true
			}
		}
		if path != "/v1beta/models/upstream-pro:generateContent" || ic["imageSize"] != "2K" || ic["aspectRatio"] != "1:1" || !inline {
			t.Errorf("pro edit request: %s %v inline=%v", path, ic, inline)
		}
		if _, _, calls := fake.request("flaky once"); calls != 2 {
			t.Errorf("429 then success took %d calls; want 2", calls)
		}
		if _, _, calls := fake.request("down hard"); calls != 3 {
			t.Errorf("500 forever: %d calls; want EASEL_RETRY_MAX_ATTEMPTS=3", calls)
		}
	})
}
