package createreq

import (
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/apperr"
)

// TestLocalNamesRefused: source and callback URLs naming this machine or a
// metadata service are a 400 at create, before any charge, as literal
// loopback addresses are.
func TestLocalNamesRefused(t *testing.T) {
	d := newDecoder(t)
	cases := []struct{ name, body, want string }{
		{"source localhost", `"input":{"prompt":"p","image_urls":["http://localhost/a.png"]}`, "input.image_urls[0] points to this machine (localhost)"},
		{"source subdomain", `"input":{"prompt":"p","image_urls":["https://example.com/a.png","https://x.localhost./a.png"]}`, "input.image_urls[1] points to this machine"},
		{"source metadata", `"input":{"prompt":"p","image_urls":["http://metadata.google.internal/computeMetadata/v1/"]}`, "input.image_urls[0] points to a cloud metadata service"},
		{"callback localhost", `"input":{"prompt":"p"},"callback_url":"https://localhost/hook"`, "callback_url points to this machine"},
		{"callBackUrl metadata", `"input":{"prompt":"p"},"callBackUrl":"http://metadata.goog/x"`, "callBackUrl points to a cloud metadata service"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := d.Decode([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image",` + c.body + `}`))
			e, ok := apperr.As(err)
			if !ok || e.Code != apperr.Invalid || !strings.Contains(e.Message, c.want) {
				t.Fatalf("%v; want a 400 saying %q", err, c.want)
			}
		})
	}
}
