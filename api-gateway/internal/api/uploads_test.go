package api_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"mime/multipart"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// pngOf encodes a w×h image.
func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i)
	}
	img.Set(0, 0, color.NRGBA{R: 255, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pngHeader is a PNG whose header says w×h pixels and that holds none: a
// decompression bomb's first bytes.
func pngHeader(w, h uint32) []byte {
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	out := []byte("\x89PNG\r\n\x1a\n")
	out = binary.BigEndian.AppendUint32(out, 13)
	chunk := append([]byte("IHDR"), ihdr...)
	out = append(out, chunk...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(chunk))
}

// multipartBody puts data in a field named field.
func multipartBody(t *testing.T, field string, data []byte) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("note", "ignored")
	fw, err := mw.CreateFormFile(field, "cat.png")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(data)
	_ = mw.Close()
	return buf.String(), mw.FormDataContentType()
}

type uploaded struct {
	URL         string `json:"url"`
	ExpiresAt   int64  `json:"expires_at"`
	ContentType string `json:"content_type"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

func (e *env) upload(key, contentType string, body []byte) reply {
	e.T.Helper()
	hdr := map[string]string{"Content-Type": contentType}
	if key != "" {
		hdr["Authorization"] = "Bearer " + key
	}
	return e.Do("POST", "/v1/uploads", hdr, string(body))
}

func decodeUpload(t *testing.T, r reply) uploaded {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	var env struct {
		Code int      `json:"code"`
		Msg  string   `json:"msg"`
		Data uploaded `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &env); err != nil || env.Code != 200 || env.Msg != "success" {
		t.Fatalf("upload reply %s (%v)", r.Body, err)
	}
	return env.Data
}

// An image sent as the body or as a multipart file field is stored and
// answered with a signed URL of the gateway, valid 24 hours, that
// downloads the same bytes and that a create takes in image_urls, though
// its host is a loopback address no other source URL may name.
func TestUploadGivesAURLACreateTakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	img := pngOf(t, 30, 20)
	mp, mpType := multipartBody(t, "file", img)
	for _, tt := range []struct {
		name, contentType string
		body              []byte
	}{
		{"raw body", "image/png", img},
		{"raw body under another image type", "image/jpeg", img},
		{"multipart file field", mpType, []byte(mp)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := decodeUpload(t, e.upload(e.KeyA, tt.contentType, tt.body))
			if up.ContentType != "image/png" || up.Width != 30 || up.Height != 20 {
				t.Errorf("upload data %+v; want image/png 30x20", up)
			}
			if want := e.Now.Add(24 * time.Hour).Unix(); up.ExpiresAt != want {
				t.Errorf("expires_at %d; want %d", up.ExpiresAt, want)
			}
			u, err := url.Parse(up.URL)
			if err != nil || !strings.HasPrefix(up.URL, e.Srv.URL+"/v1/files/uploads/") || u.Query().Get("expires") != strconv.FormatInt(up.ExpiresAt, 10) {
				t.Fatalf("url %q: want a signed URL of the gateway under /v1/files/uploads/", up.URL)
			}
			got := e.Do("GET", u.RequestURI(), nil, "")
			if got.Status != 200 || !bytes.Equal(got.Body, img) || got.Header.Get("Content-Type") != "image/png" {
				t.Errorf("download: %d %s, %d bytes; want the upload", got.Status, got.Header.Get("Content-Type"), len(got.Body))
			}
			r := e.Create(e.KeyA, `{"model":"`+std+`","task_type":"image","input":{"prompt":"edit","image_urls":["`+up.URL+`"]}}`)
			if r.Status != 200 {
				t.Errorf("create with the upload's URL: %d %s", r.Status, r.Body)
			}
		})
	}
	// The same host, not an upload: refused by the address rules.
	r := e.Create(e.KeyA, `{"model":"`+std+`","task_type":"image","input":{"prompt":"edit","image_urls":["`+e.Srv.URL+`/cat.png"]}}`)
	assertEnvelope(t, r, 400, "image_urls[0]")
}

// An upload URL whose signature does not hold, or that has expired, is
// refused by a create with the field named.
func TestCreateRefusesABadUploadURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	up := decodeUpload(t, e.upload(e.KeyA, "image/png", pngOf(t, 4, 4)))
	body := func(u string) string {
		return `{"model":"` + std + `","task_type":"image","input":{"prompt":"edit","image_urls":["` + u + `"]}}`
	}
	u, _ := url.Parse(up.URL)
	q := u.Query()
	q.Set("expires", strconv.FormatInt(up.ExpiresAt+3600, 10))
	longer := *u
	longer.RawQuery = q.Encode()
	other := strings.Replace(up.URL, "/uploads/", "/uploads/x", 1)
	for _, tt := range []struct{ name, url, msg string }{
		{"expiry extended", longer.String(), "without a valid signature"},
		{"another key", other, "without a valid signature"},
		{"no signature", strings.Split(up.URL, "?")[0], "without a valid signature"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assertEnvelope(t, e.Create(e.KeyA, body(tt.url)), 400, "input.image_urls[0] is an upload URL "+tt.msg)
		})
	}
	t.Run("expired", func(t *testing.T) {
		e.Now = e.Now.Add(24 * time.Hour)
		assertEnvelope(t, e.Create(e.KeyA, body(up.URL)), 400, "has expired")
	})
}

// What is not an image, too large, over the pixel limit or a bad
// multipart body is refused with the envelope, and nothing is counted.
func TestUploadErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	img := pngOf(t, 8, 8)
	noFile, noFileType := multipartBody(t, "image", img)
	big := append(append([]byte{}, img...), make([]byte, 20<<20)...)
	bigMP, bigMPType := multipartBody(t, "file", big)
	tests := []struct {
		name, key, contentType string
		body                   []byte
		status                 int
		msgPart                string
	}{
		{"no key", "", "image/png", img, 401, "missing Authorization"},
		{"no content type", e.KeyA, "", img, 415, "Content-Type must be the image's type"},
		{"text content type", e.KeyA, "text/plain", img, 415, "Content-Type must be the image's type"},
		{"JSON", e.KeyA, "application/json", []byte(`{"url":"x"}`), 415, "Content-Type"},
		{"text under an image type", e.KeyA, "image/png", []byte("hello, not an image at all"), 415, "not a PNG, JPEG, WebP or GIF image"},
		{"damaged PNG", e.KeyA, "image/png", img[:20], 415, "damaged"},
		{"empty body", e.KeyA, "image/png", nil, 400, "empty"},
		{"over 20 MB", e.KeyA, "image/png", big, 413, "20 MB"},
		{"over 20 MB in a multipart body", e.KeyA, bigMPType, []byte(bigMP), 413, "20 MB"},
		{"over the pixel limit", e.KeyA, "image/png", pngHeader(10_000, 10_000), 413, "10000x10000 pixels; the limit is 50 megapixels"},
		{"multipart without boundary", e.KeyA, "multipart/form-data", []byte("x"), 400, "boundary"},
		{"multipart without file field", e.KeyA, noFileType, []byte(noFile), 400, `no "file" field`},
		{"malformed multipart", e.KeyA, "multipart/form-data; boundary=zzz", []byte("--zzz\r\nbroken"), 400, "multipart/form-data body could not be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertEnvelope(t, e.upload(tt.key, tt.contentType, tt.body), tt.status, tt.msgPart)
		})
	}
	if keys, _ := e.RDB.Keys(t.Context(), "*upb:*").Result(); len(keys) != 0 {
		t.Errorf("refused uploads were counted: %v", keys)
	}
}

// An account's uploads of a day stop at its budget, 429 with Retry-After
// until midnight UTC; another account's budget is its own.
func TestUploadBudgetPerAccountAndDay(t *testing.T) {
	t.Parallel()
	img := pngOf(t, 16, 16)
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) { d.Uploads.BytesPerDay = int64(2*len(img) + 10) })
	// 23:00 UTC tomorrow: the day's counter expires after Redis's clock,
	// whatever day the test runs.
	tomorrow := time.Now().UTC().AddDate(0, 0, 1)
	e.Now = time.Date(tomorrow.Year(), tomorrow.Month(), tomorrow.Day(), 23, 0, 0, 0, time.UTC)
	for i := range 2 {
		if r := e.upload(e.KeyA, "image/png", img); r.Status != 200 {
			t.Fatalf("upload %d within the budget: %d %s", i, r.Status, r.Body)
		}
	}
	r := e.upload(e.KeyA, "image/png", img)
	assertEnvelope(t, r, 429, "upload budget")
	if got := r.Header.Get("Retry-After"); got != "3600" {
		t.Errorf("Retry-After %q; want 3600 (midnight UTC)", got)
	}
	if r := e.upload(e.KeyB, "image/png", img); r.Status != 200 {
		t.Errorf("another account's upload: %d %s", r.Status, r.Body)
	}
	e.Now = e.Now.Add(time.Hour)
	if r := e.upload(e.KeyA, "image/png", img); r.Status != 200 {
		t.Errorf("the next day's upload: %d %s", r.Status, r.Body)
	}
}
