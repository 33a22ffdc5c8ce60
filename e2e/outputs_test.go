package e2e

import (
	"context"
	"encoding/json"
	"net/url"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
)

// TestOutputsEndToEnd runs tasks through the real gateway and worker
// asking for formats and several images: each result is a file of the
// format asked (its Content-Type and extension), as many as asked, all
// priced at creation; the record (query and list) shows the accepted
// input, the price and when generation began. A bad output_format,
// output_quality or num_images is a 400 with the envelope, charging
// nothing.
func TestOutputsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 200 * time.Millisecond})
	id, key := s.newAccount(t, account.Spec{Name: "outputs", Credits: 1000, RateLimit: 1000, MaxInflight: 100})
	c := newClient(t, s.base, key)
	src := sourceServer(t)
	ctx := context.Background()
	balance := func() int64 {
		t.Helper()
		a, err := s.accounts.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Credits
	}

	tests := []struct {
		name      string
		body      string
		price     int64
		format    string // as image.DecodeConfig names it
		ext       string
		images    int
		wantInput recordInput
		// bitstream is a WebP's first chunk: "VP8 " lossy, "VP8L"
		// lossless.
		bitstream string
	}{
		{"standard, jpeg at 70, three images", createBody(std, `{"prompt":"  a red fox in snow ","output_format":"jpeg","output_quality":70,"num_images":3}`),
			3 * 4, "jpeg", ".jpg", 3,
			recordInput{Prompt: "a red fox in snow", AspectRatio: "1:1", OutputFormat: "jpeg", OutputQuality: 70, NumImages: 3}, ""},
		// 1K: a WebP encode takes a second a megapixel on a loaded
		// machine.
		{"pro 1K, webp at its default quality, two images", createBody(pro, `{"prompt":"a tall tower","aspect_ratio":"9:16","image_size":"1K","output_format":"webp","num_images":2}`),
			2 * 18, "webp", ".webp", 2,
			recordInput{Prompt: "a tall tower", AspectRatio: "9:16", ImageSize: "1K", OutputFormat: "webp", OutputQuality: 90, NumImages: 2}, "VP8 "},
		{"standard, lossy webp at 40", createBody(std, `{"prompt":"a harbour at noon","output_format":"webp","output_quality":40}`),
			4, "webp", ".webp", 1,
			recordInput{Prompt: "a harbour at noon", AspectRatio: "1:1", OutputFormat: "webp", OutputQuality: 40, NumImages: 1}, "VP8 "},
		{"standard, lossless webp at 100", createBody(std, `{"prompt":"a harbour at noon","output_format":"webp","output_quality":100}`),
			4, "webp", ".webp", 1,
			recordInput{Prompt: "a harbour at noon", AspectRatio: "1:1", OutputFormat: "webp", OutputQuality: 100, NumImages: 1}, "VP8L"},
		{"an edit, by default png and one image", createBody(std, `{"prompt":"make it winter","image_urls":["`+src.URL+`/640x360.png"]}`),
			4, "png", ".png", 1,
			recordInput{Prompt: "make it winter", ImageURLs: []string{src.URL + "/640x360.png"}, OutputFormat: "png", NumImages: 1}, ""},
	}
	ids := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := balance()
			task := c.create(tt.body)
			ids[task] = true
			if got := before - balance(); got != tt.price {
				t.Errorf("charged %d at creation; want %d", got, tt.price)
			}
			rec, _, _ := c.poll(task, 60*time.Second)
			if rec.Status != "completed" || len(rec.Results) != tt.images {
				t.Fatalf("task ended %s with %d results (%+v); want completed with %d", rec.Status, len(rec.Results), rec.Error, tt.images)
			}
			if rec.Price != tt.price || rec.StartTime < rec.CreateTime || rec.StartTime > rec.CompleteTime || rec.StartTime == 0 {
				t.Errorf("price %d, create %d, start %d, complete %d; want price %d and create <= start <= complete", rec.Price, rec.CreateTime, rec.StartTime, rec.CompleteTime, tt.price)
			}
			if rec.Input == nil || !reflect.DeepEqual(*rec.Input, tt.wantInput) {
				t.Errorf("the record shows the input %+v; want %+v", rec.Input, tt.wantInput)
			}
			seen := map[string]bool{}
			for _, r := range rec.Results {
				u, err := url.Parse(r)
				if err != nil || path.Ext(u.Path) != tt.ext {
					t.Errorf("result %s: want the extension %s", r, tt.ext)
				}
				_, format, b := newClient(t, "", "").download(r) // checks Content-Type against the format
				if format != tt.format {
					t.Errorf("result %s is %s; want %s", r, format, tt.format)
				}
				if tt.bitstream != "" && (len(b) < 16 || string(b[12:16]) != tt.bitstream) {
					t.Errorf("result %s is a WebP of the chunk %q; want %q", r, b[12:min(16, len(b))], tt.bitstream)
				}
				seen[string(b)] = true
			}
			if len(seen) != tt.images {
				t.Errorf("%d different images of %d", len(seen), tt.images)
			}
			if got := balance(); got != before-tt.price {
				t.Errorf("balance %d after the task; want %d (nothing refunded)", got, before-tt.price)
			}
		})
	}

	t.Run("the list shows the input too", func(t *testing.T) {
		st, _, body := c.do("GET", "/v1/task/list?limit=10", "", nil)
		var page struct {
			Tasks []taskRecord `json:"tasks"`
		}
		if err := json.Unmarshal(body, &page); st != 200 || err != nil {
			t.Fatalf("list: %d %s", st, body)
		}
		n := 0
		for _, r := range page.Tasks {
			if ids[r.TaskID] {
				n++
				if r.Input == nil || r.Input.Prompt == "" || r.Price == 0 {
					t.Errorf("listed %s with input %+v, price %d", r.TaskID, r.Input, r.Price)
				}
			}
		}
		if n != len(ids) {
			t.Errorf("listed %d of the %d tasks", n, len(ids))
		}
	})

	t.Run("refusals", func(t *testing.T) {
		before := balance()
		for _, tt := range []struct{ input, msg string }{
			{`{"prompt":"p","output_format":"gif"}`, `input.output_format "gif" is not supported; use one of png, jpeg, webp`},
			{`{"prompt":"p","output_format":"jpeg","output_quality":101}`, "input.output_quality must be an integer from 1 to 100"},
			{`{"prompt":"p","num_images":0}`, "input.num_images must be an integer from 1 to 4"},
			{`{"prompt":"p","num_images":5}`, "input.num_images must be an integer from 1 to 4"},
		} {
			st, _, body := c.raw().do("POST", "/v1/task/create", createBody(std, tt.input), map[string]string{"Content-Type": "application/json"})
			var env envelope
			if err := json.Unmarshal(body, &env); st != 400 || err != nil || env.Code != 400 || !strings.Contains(env.Msg, tt.msg) || string(env.Data) != "null" {
				t.Errorf("%s: %d %s; want 400 with %q", tt.input, st, body, tt.msg)
			}
		}
		if got := balance(); got != before {
			t.Errorf("balance %d after refusals; want %d", got, before)
		}
	})
}
