package easel

import (
	"context"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"
)

func TestUpload(t *testing.T) {
	image := []byte("\x89PNG\r\n\x1a\nnot really the rest")
	tests := []struct {
		name    string
		replies []reply
		want    Upload
		kind    error
		calls   int
	}{
		{"stored", []reply{{status: 200, body: `{"code":200,"msg":"success","data":{"url":"https://api.example/v1/files/uploads/2026112214/ab.png?expires=1795446000&sig=x","expires_at":1795446000,"content_type":"image/png","width":640,"height":360}}`}},
			Upload{URL: "https://api.example/v1/files/uploads/2026112214/ab.png?expires=1795446000&sig=x", ExpiresAt: 1795446000, ContentType: "image/png", Width: 640, Height: 360}, nil, 1},
		{"not an image", []reply{{status: 415, body: `{"code":415,"msg":"the file is not a PNG, JPEG, WebP or GIF image (got text/plain)","data":null}`}}, Upload{}, ErrUnsupportedMediaType, 1},
		{"too large", []reply{{status: 413, body: `{"code":413,"msg":"the image is larger than the 20 MB limit","data":null}`}}, Upload{}, ErrTooLarge, 1},
		{"over the day's budget, not waited for until midnight", []reply{{status: 429, header: map[string]string{"Retry-After": "30000"}, body: `{"code":429,"msg":"this upload would take the account over its upload budget","data":null}`}}, Upload{}, ErrRateLimited, 1},
		{"a dropped connection is not repeated", []reply{{hangup: true}}, Upload{}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: tt.replies}
			c, _ := newTestClient(t, srv)
			got, err := c.Upload(context.Background(), "/tmp/photos/cat.png", image)
			switch {
			case tt.kind != nil:
				if !errors.Is(err, tt.kind) {
					t.Fatalf("error %v; want %v", err, tt.kind)
				}
			case tt.replies[0].hangup:
				if err == nil {
					t.Fatal("no error on a dropped connection")
				}
			case err != nil || *got != tt.want:
				t.Fatalf("Upload: %+v %v; want %+v", got, err, tt.want)
			}
			reqs := srv.requests()
			if len(reqs) != tt.calls {
				t.Fatalf("%d requests; want %d", len(reqs), tt.calls)
			}
			r := reqs[0]
			mt, params, err := mime.ParseMediaType(r.header.Get("Content-Type"))
			if r.method != "POST" || r.path != "/v1/uploads" || err != nil || mt != "multipart/form-data" || r.header.Get("Authorization") != "Bearer esk_test" {
				t.Fatalf("request %s %s, Content-Type %q", r.method, r.path, r.header.Get("Content-Type"))
			}
			p, err := multipart.NewReader(strings.NewReader(r.body), params["boundary"]).NextPart()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(p)
			if p.FormName() != "file" || p.FileName() != "cat.png" || string(b) != string(image) {
				t.Errorf("part %q (%q): %q", p.FormName(), p.FileName(), b)
			}
		})
	}
	t.Run("over 20 MB is refused unsent", func(t *testing.T) {
		srv := &scripted{replies: []reply{{status: 200}}}
		c, _ := newTestClient(t, srv)
		if _, err := c.Upload(context.Background(), "big.png", make([]byte, MaxUploadBytes+1)); err == nil || !strings.Contains(err.Error(), "20 MB") {
			t.Errorf("error %v; want the 20 MB limit", err)
		}
		if n := len(srv.requests()); n != 0 {
			t.Errorf("%d requests sent", n)
		}
	})
}
