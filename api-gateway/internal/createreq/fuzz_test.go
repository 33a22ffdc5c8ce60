package createreq

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
)

// FuzzDecode checks that no body makes the decoder panic or return anything
// but a 400, and that whatever it accepts obeys every rule. The seed corpus
// is in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"a cat"}}`))
	f.Add([]byte(`{"model":"lumen-3-pro-image-preview","task_type":"image","input":{"prompt":"x","aspect_ratio":"9:16","image_size":"4K","image_urls":["https://example.com/a.png"]}}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p","image_urls":[]}}`))
	f.Add([]byte(`{"input":{"prompt":null}}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"},"callback_url":"https://hooks.example.com/x","callback_events":["task.progress","task.completed"]}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"},"callBackUrl":"http://127.0.0.1/x","callback_events":[]}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"},"callback_url":"https://a.example/","callBackUrl":"https://b.example/","callback_events":["task.failed","task.failed"]}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"\ud83d\udc08 \u00e9"}}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p","output_format":"jpeg","output_quality":75,"num_images":4}}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p","output_format":"webp","output_quality":1e3,"num_images":0}}`))
	f.Add([]byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p","output_format":"GIF","num_images":"2"}}`))
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
		if r.Prompt == "" || r.Prompt != strings.TrimSpace(r.Prompt) || utf8.RuneCountInString(r.Prompt) > MaxPromptChars ||
			!utf8.ValidString(r.Prompt) || strings.ContainsRune(r.Prompt, 0) {
			t.Fatalf("accepted bad prompt %q", r.Prompt)
		}
		if r.AspectRatio == "" && len(r.ImageURLs) == 0 || r.AspectRatio != "" && !catalog.ValidAspectRatio(r.AspectRatio) {
			t.Fatalf("accepted bad aspect ratio %q (edit=%v)", r.AspectRatio, len(r.ImageURLs) > 0)
		}
		if !catalog.ValidImageSize(r.ImageSize) || (!r.Model.SupportsImageSize() && r.ImageSize != catalog.Size1K) {
			t.Fatalf("accepted image size %q for %s", r.ImageSize, r.Model.ID)
		}
		if !slices.Contains(task.Formats, r.OutputFormat) || r.NumImages < 1 || r.NumImages > task.MaxImages {
			t.Fatalf("accepted format %q, %d images", r.OutputFormat, r.NumImages)
		}
		if task.Lossy(r.OutputFormat) != (r.OutputQuality != 0) || r.OutputQuality != 0 && (r.OutputQuality < task.MinQuality || r.OutputQuality > task.MaxQuality) {
			t.Fatalf("accepted quality %d for %s", r.OutputQuality, r.OutputFormat)
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
		cb := r.Callback
		if cb.URL == "" {
			if len(cb.Events) != 0 {
				t.Fatalf("accepted callback events %v without a callback URL", cb.Events)
			}
			return
		}
		u, err := url.Parse(cb.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || len(cb.URL) > MaxURLLen || d.Egress.CheckURL(u) != "" {
			t.Fatalf("accepted bad callback url %q", cb.URL)
		}
		if len(cb.Events) == 0 {
			t.Fatal("accepted a callback without events")
		}
		for i, ev := range cb.Events {
			if !slices.Contains(task.Events, ev) || slices.Contains(cb.Events[:i], ev) {
				t.Fatalf("accepted callback events %v", cb.Events)
			}
		}
	})
}

// FuzzEndpoint checks that no body makes the account endpoint's decoder
// panic or return anything but a 400, and that what it accepts is a URL
// the callback rules take, with distinct known events.
func FuzzEndpoint(f *testing.F) {
	f.Add([]byte(`{"callback_url":"https://hooks.example.com/x"}`))
	f.Add([]byte(`{"callback_url":"https://hooks.example.com/x","callback_events":["task.progress","task.completed"]}`))
	f.Add([]byte(`{"callback_url":"http://127.0.0.1/x"}`))
	f.Add([]byte(`{"callback_events":["task.failed"]}`))
	f.Add([]byte(`{"callback_url":"https://a.example/","callback_events":["task.failed","task.failed"]}`))
	f.Add([]byte(`{"callback_url":"https://a.example/","callback_events":[]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	d := newDecoder(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		cb, err := d.Endpoint(body)
		if err != nil {
			e, ok := apperr.As(err)
			if !ok || e.Code != apperr.Invalid || e.Message == "" {
				t.Fatalf("error %v: want an Invalid apperr with a message", err)
			}
			return
		}
		u, err := url.Parse(cb.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || len(cb.URL) > MaxURLLen || d.Egress.CheckURL(u) != "" {
			t.Fatalf("accepted bad url %q", cb.URL)
		}
		if len(cb.Events) == 0 {
			t.Fatalf("accepted %q with no events", cb.URL)
		}
		for i, ev := range cb.Events {
			if !slices.Contains(task.Events, ev) || slices.Contains(cb.Events[:i], ev) {
				t.Fatalf("accepted events %q", cb.Events)
			}
		}
	})
}
