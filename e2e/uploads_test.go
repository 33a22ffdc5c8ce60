package e2e

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"mime/multipart"
	"strings"
	"testing"
	"time"
)

// pngBytes encodes a w×h image.
func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{uint8(x), uint8(y), 200, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type uploadData struct {
	URL         string `json:"url"`
	ExpiresAt   int64  `json:"expires_at"`
	ContentType string `json:"content_type"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

// upload sends body with contentType to POST /v1/uploads.
func (c *client) upload(contentType string, body []byte) (int, uploadData, []byte) {
	c.t.Helper()
	st, _, b := c.do("POST", "/v1/uploads", string(body), map[string]string{"Content-Type": contentType})
	var env struct {
		Data uploadData `json:"data"`
	}
	if st == 200 {
		if err := json.Unmarshal(b, &env); err != nil {
			c.t.Fatalf("upload reply %s: %v", b, err)
		}
	}
	return st, env.Data, b
}

// A user with local files uploads them, raw and as a multipart form, and
// edits them: the gateway takes the upload URLs though they name its own
// loopback address, and the worker reads the images from the blob store
// with private fetching off (a fetch of the gateway's address would be
// refused). What is not an image, or too large, is refused with the
// envelope.
func TestUploadThenEdit(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{env: map[string]string{"EASEL_FETCH_ALLOW_PRIVATE": "false"}})
	c := newClient(t, s.base, s.key)

	st, first, b := c.upload("image/png", pngBytes(t, 640, 360))
	if st != 200 || first.ContentType != "image/png" || first.Width != 640 || first.Height != 360 || !strings.HasPrefix(first.URL, s.base+"/v1/files/uploads/") {
		t.Fatalf("raw upload: %d %s", st, b)
	}
	if d := time.Until(time.Unix(first.ExpiresAt, 0)); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("expires_at %d: want 24 h from now", first.ExpiresAt)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "square.png")
	_, _ = fw.Write(pngBytes(t, 200, 200))
	_ = mw.Close()
	st, second, b := c.upload(mw.FormDataContentType(), form.Bytes())
	if st != 200 || second.Width != 200 || second.Height != 200 {
		t.Fatalf("multipart upload: %d %s", st, b)
	}

	id := c.create(createBody(std, `{"prompt":"make it winter","image_urls":["`+first.URL+`","`+second.URL+`"]}`))
	rec, _, _ := c.poll(id, 60*time.Second)
	if rec.Status != "completed" || len(rec.Results) != 1 {
		t.Fatalf("edit of uploads ended %s: %+v", rec.Status, rec.Error)
	}
	// The ratio comes from the first source, so the worker read it.
	cfg, format, _ := newClient(t, "", "").download(rec.Results[0])
	if format != "png" || cfg.Width != 1344 || cfg.Height != 768 {
		t.Errorf("result %s %dx%d; want png 1344x768 (16:9, from the first upload)", format, cfg.Width, cfg.Height)
	}

	// The private-fetch refusal the uploads got around: the same host,
	// not an upload.
	raw := c.raw()
	if st, _, b := raw.do("POST", "/v1/task/create", createBody(std, `{"prompt":"x","image_urls":["`+s.base+`/openapi.json"]}`), nil); st != 400 {
		t.Errorf("a loopback URL that is not an upload: %d %s; want 400", st, b)
	}
	for _, tt := range []struct {
		name, contentType string
		body              []byte
		status            int
		msg               string
	}{
		{"not an image", "image/png", []byte("this is text, not a picture"), 415, "not a PNG, JPEG, WebP or GIF"},
		{"over 20 MB", "image/png", append(pngBytes(t, 8, 8), make([]byte, 20<<20)...), 413, "20 MB"},
	} {
		st, _, b := c.upload(tt.contentType, tt.body)
		if st != tt.status || !strings.Contains(string(b), tt.msg) || !strings.Contains(string(b), `"data":null`) {
			t.Errorf("%s: %d %s; want %d with %q", tt.name, st, b, tt.status, tt.msg)
		}
	}
}
