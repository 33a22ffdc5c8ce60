package api

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/upload"
)

// Whatever the Content-Type and body, reading an upload answers without
// panicking: the image's bytes (not empty, at most upload.MaxBytes), or a
// refusal coded 400, 413 or 415.
func FuzzReadUpload(f *testing.F) {
	f.Add("image/png", "\x89PNG\r\n\x1a\n")
	f.Add("multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n\r\nabc\r\n--b--\r\n")
	f.Add("multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--b--\r\n")
	f.Add("multipart/form-data", "")
	f.Add("text/plain; charset=\"", "x")
	f.Fuzz(func(t *testing.T, contentType, body string) {
		r := httptest.NewRequest("POST", PathUploads, strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		data, err := readUpload(r)
		if err != nil {
			switch apperr.CodeOf(err) {
			case apperr.Invalid, apperr.TooLarge, apperr.UnsupportedMediaType:
			default:
				t.Fatalf("readUpload(%q): %v", contentType, err)
			}
			return
		}
		if len(data) == 0 || len(data) > upload.MaxBytes || !strings.Contains(body, string(data)) {
			t.Fatalf("readUpload(%q) = %d bytes", contentType, len(data))
		}
	})
}
