package createreq

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// FuzzDecode checks that no body makes the decoder panic or return anything
// but a 400, and that whatever it accepts obeys every rule. The seed corpus
// is in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"a cat"}}`))
	f.Add([]byte(`{"model":"lumen-3-pro-image-preview","task_type":"image","input":{"prompt":"x","aspect_ratio":"9:16","image_size":"4K","image_urls":["https://example.com/a.png"]}}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p","image_urls":[]}}`))
	f.Add([]byte(`{"input":{"prompt":null}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	d := newDecoder(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := d.Decode(body)
		if err != nil {
			e, ok := apperr.As(err)
			if !ok || e.Code != apperr.Invalid || e.Message == "" {
				t.Fatalf("error %v: want an Invalid apperr with a message", err)
			}
			return
		}
		if _, ok := d.Catalog.Lookup(r.Model.ID); !ok {
			t.Fatalf("accepted unknown model %q", r.Model.ID)
		}
		if r.Prompt == "" || r.Prompt != strings.TrimSpace(r.Prompt) || utf8.RuneCountInString(r.Prompt) > MaxPromptChars {
			t.Fatalf("accepted bad prompt %q", r.Prompt)
		}
		if r.AspectRatio == "" && len(r.ImageURLs) == 0 || r.AspectRatio != "" && !catalog.ValidAspectRatio(r.AspectRatio) {
			t.Fatalf("accepted bad aspect ratio %q (edit=%v)", r.AspectRatio, len(r.ImageURLs) > 0)
		}
		if !catalog.ValidImageSize(r.ImageSize) || (!r.Model.SupportsImageSize() && r.ImageSize != catalog.Size1K) {
			t.Fatalf("accepted image size %q for %s", r.ImageSize, r.Model.ID)
		}
		if len(r.ImageURLs) > MaxImageURLs {
			t.Fatalf("accepted %d urls", len(r.ImageURLs))
		}
		for _, s := range r.ImageURLs {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || len(s) > MaxURLLen {
				t.Fatalf("accepted bad url %q", s)
			}
		}
	})
}
