package gemini

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

func encode(t *testing.T, format string, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(i)
	}
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	var err error
	if format == "jpeg" {
		err = jpeg.Encode(&buf, img, nil)
	} else {
		err = png.Encode(&buf, img)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fake is a Gemini API stand-in: it records requests and answers with what
// the test sets.
type fake struct {
	mu       sync.Mutex
	requests []recorded
	reply    func(n int) (status int, body any)
	delay    time.Duration
}

type recorded struct {
	path   string
	apiKey string
	body   map[string]any
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	f.mu.Lock()
	f.requests = append(f.requests, recorded{r.URL.Path, r.Header.Get("x-goog-api-key"), body})
	n := len(f.requests)
	f.mu.Unlock()
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
			return
		}
	}
	status, reply := f.reply(n)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(reply)
}

func imageReply(mime string, data ...[]byte) map[string]any {
	parts := []any{map[string]any{"text": "Here is your image."}}
	for _, d := range data {
		parts = append(parts, map[string]any{"inlineData": map[string]any{"mimeType": mime, "data": base64.StdEncoding.EncodeToString(d)}})
	}
	return map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP"}}}
}

func apiError(code int, status, msg string) map[string]any {
	return map[string]any{"error": map[string]any{"code": code, "status": status, "message": msg}}
}

func setup(t *testing.T, f *fake) (*Generator, catalog.Model, catalog.Model) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	g, err := New(context.Background(), Config{APIKey: "test-key", BaseURL: srv.URL, Models: map[catalog.Tier]string{catalog.Pro: "gemini-pro-test"}, Expected: map[catalog.Tier]time.Duration{catalog.Standard: time.Second, catalog.Pro: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := catalog.New("lumen")
	std, _ := cat.ByTier(catalog.Standard)
	pro, _ := cat.ByTier(catalog.Pro)
	return g, std, pro
}

func path(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func TestRequestShape(t *testing.T) {
	png1 := encode(t, "png", 16, 9)
	f := &fake{reply: func(int) (int, any) { return 200, imageReply("image/png", png1) }}
	g, std, pro := setup(t, f)

	// Standard, text to image: no image size is sent.
	if _, err := g.Generate(context.Background(), imagegen.Request{Model: std, Prompt: "a cat", AspectRatio: "16:9", ImageSize: "1K"}, func(int) {}); err != nil {
		t.Fatal(err)
	}
	// Pro, editing: the size, and the sources inline.
	src := imagegen.Source{Data: encode(t, "jpeg", 8, 8), MIME: "image/jpeg", Width: 8, Height: 8}
	if _, err := g.Generate(context.Background(), imagegen.Request{Model: pro, Prompt: "make it blue", AspectRatio: "1:1", ImageSize: "4K", Sources: []imagegen.Source{src}}, func(int) {}); err != nil {
		t.Fatal(err)
	}
	if len(f.requests) != 2 {
		t.Fatalf("%d requests", len(f.requests))
	}
	r1, r2 := f.requests[0], f.requests[1]
	if r1.path != "/v1beta/models/gemini-2.5-flash-image:generateContent" || r2.path != "/v1beta/models/gemini-pro-test:generateContent" {
		t.Errorf("paths %q %q", r1.path, r2.path)
	}
	if r1.apiKey != "test-key" {
		t.Errorf("api key header %q", r1.apiKey)
	}
	gc1, _ := path(r1.body, "generationConfig").(map[string]any)
	if path(gc1, "imageConfig", "aspectRatio") != "16:9" || path(gc1, "imageConfig", "imageSize") != nil {
		t.Errorf("standard imageConfig %v", gc1["imageConfig"])
	}
	if mods, _ := gc1["responseModalities"].([]any); len(mods) == 0 || !strings.Contains(strings.ToUpper(strings.Join(toStrings(mods), ",")), "IMAGE") {
		t.Errorf("responseModalities %v", gc1["responseModalities"])
	}
	if path(r2.body, "generationConfig", "imageConfig", "imageSize") != "4K" || path(r2.body, "generationConfig", "imageConfig", "aspectRatio") != "1:1" {
		t.Errorf("pro imageConfig %v", path(r2.body, "generationConfig", "imageConfig"))
	}
	contents, _ := r2.body["contents"].([]any)
	parts, _ := path(contents[0].(map[string]any), "parts").([]any)
	if len(parts) != 2 || path(parts[0].(map[string]any), "text") != "make it blue" ||
		path(parts[1].(map[string]any), "inlineData", "mimeType") != "image/jpeg" ||
		path(parts[1].(map[string]any), "inlineData", "data") != base64.StdEncoding.EncodeToString(src.Data) {
		t.Errorf("parts %v", parts)
	}
}

func toStrings(v []any) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i], _ = x.(string)
	}
	return out
}

func TestResponses(t *testing.T) {
	pngData, jpegData := encode(t, "png", 32, 18), encode(t, "jpeg", 20, 10)
	tests := []struct {
		name      string
		status    int
		reply     any
		wantN     int
		wantMIME  string
		wantW     int
		wantCode  apperr.Code
		retryable bool
	}{
		{"png", 200, imageReply("image/png", pngData), 1, "image/png", 32, "", false},
		{"jpeg keeps its format", 200, imageReply("image/jpeg", jpegData), 1, "image/jpeg", 20, "", false},
		{"two images", 200, imageReply("image/png", pngData, pngData), 2, "image/png", 32, "", false},
		{"prompt blocked", 200, map[string]any{"promptFeedback": map[string]any{"blockReason": "SAFETY"}}, 0, "", 0, task.ContentBlocked, false},
		{"image held back", 200, map[string]any{"candidates": []any{map[string]any{"finishReason": "IMAGE_SAFETY"}}}, 0, "", 0, task.ContentBlocked, false},
		{"text only", 200, map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": "I can't draw that"}}}, "finishReason": "STOP"}}}, 0, "", 0, task.GenerationFailed, false},
		{"corrupt image", 200, imageReply("image/png", []byte("not a png")), 0, "", 0, task.GenerationFailed, false},
		{"429", 429, apiError(429, "RESOURCE_EXHAUSTED", "quota"), 0, "", 0, task.UpstreamUnavailable, true},
		{"500", 500, apiError(500, "INTERNAL", "boom"), 0, "", 0, task.UpstreamUnavailable, true},
		{"503", 503, apiError(503, "UNAVAILABLE", "overloaded"), 0, "", 0, task.UpstreamUnavailable, true},
		{"400", 400, apiError(400, "INVALID_ARGUMENT", "Unable to process input image"), 0, "", 0, task.GenerationFailed, false},
		{"bad key", 400, map[string]any{"error": map[string]any{"code": 400, "status": "INVALID_ARGUMENT", "message": "API key not valid. Please pass a valid API key.",
			"details": []any{map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}}}}, 0, "", 0, apperr.Internal, false},
		{"403", 403, apiError(403, "PERMISSION_DENIED", "denied"), 0, "", 0, apperr.Internal, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, std, _ := setup(t, &fake{reply: func(int) (int, any) { return tt.status, tt.reply }})
			imgs, err := g.Generate(context.Background(), imagegen.Request{Model: std, Prompt: "p", AspectRatio: "1:1"}, func(int) {})
			if tt.wantCode != "" {
				e, ok := apperr.As(err)
				if !ok || e.Code != tt.wantCode || e.Retryable != tt.retryable {
					t.Fatalf("error %v; want %s retryable=%v", err, tt.wantCode, tt.retryable)
				}
				if strings.Contains(e.Message, "quota") || strings.Contains(e.Message, "API key") || strings.Contains(e.Message, "boom") {
					t.Errorf("message %q leaks the upstream reply", e.Message)
				}
				// Only a 429 slows every worker down.
				if throttled := errors.Is(err, imagegen.ErrThrottled); throttled != (tt.status == 429) {
					t.Errorf("errors.Is(err, ErrThrottled) = %v for a %d", throttled, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(imgs) != tt.wantN || imgs[0].MIME != tt.wantMIME || imgs[0].Width != tt.wantW {
				t.Errorf("images %d, first %s %dx%d", len(imgs), imgs[0].MIME, imgs[0].Width, imgs[0].Height)
			}
		})
	}
}

func TestDeadlineAndProgress(t *testing.T) {
	f := &fake{delay: 2 * time.Second, reply: func(int) (int, any) { return 200, imageReply("image/png", encode(t, "png", 4, 4)) }}
	g, std, _ := setup(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	var mu sync.Mutex
	var seen []int
	_, err := g.Generate(ctx, imagegen.Request{Model: std, Prompt: "p", AspectRatio: "1:1"}, func(p int) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow call past the deadline: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 {
		t.Errorf("progress while waiting: %v", seen)
	}
	for i, p := range seen {
		if p <= 0 || p >= 100 || (i > 0 && p <= seen[i-1]) {
			t.Errorf("progress %v", seen)
		}
	}
}

func TestUnreachable(t *testing.T) {
	g, err := New(context.Background(), Config{APIKey: "k", BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := catalog.New("lumen")
	std, _ := cat.ByTier(catalog.Standard)
	_, err = g.Generate(context.Background(), imagegen.Request{Model: std, Prompt: "p", AspectRatio: "1:1"}, func(int) {})
	if e, ok := apperr.As(err); !ok || e.Code != task.UpstreamUnavailable || !e.Retryable {
		t.Errorf("connection refused: %v", err)
	}
}
