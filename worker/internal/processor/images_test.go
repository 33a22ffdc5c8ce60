package processor

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"image/png"
	"strings"
	"sync"
	"testing"

	_ "golang.org/x/image/webp"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// The result files have the format asked: its encoding, its media type
// and its extension; a lossy one at the quality asked.
func TestOutputFormats(t *testing.T) {
	f := newFixture(t, nil)
	sizes := map[string]int64{}
	for _, tt := range []struct {
		id, format   string
		quality      int
		wantDecoded  string
		wantMIME     string
		wantKeySufix string
	}{
		{"task_lumen_png", "png", 0, "png", "image/png", ".png"},
		{"task_lumen_jpeg95", "jpeg", 95, "jpeg", "image/jpeg", ".jpg"},
		{"task_lumen_jpeg10", "jpeg", 10, "jpeg", "image/jpeg", ".jpg"},
		{"task_lumen_webp", "webp", 0, "webp", "image/webp", ".webp"},
	} {
		j := f.job(t, tt.id, std, func(in *task.Input) { in.OutputFormat, in.OutputQuality = tt.format, tt.quality })
		if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
			t.Fatal(err)
		}
		got := f.get(t, tt.id)
		if got.Status != task.Completed || len(got.Results) != 1 {
			t.Fatalf("%s: %s with %d results", tt.id, got.Status, len(got.Results))
		}
		r := got.Results[0]
		if r.ContentType != tt.wantMIME || !strings.HasSuffix(r.Key, tt.wantKeySufix) {
			t.Errorf("%s: result %+v; want %s, %s", tt.id, r, tt.wantMIME, tt.wantKeySufix)
		}
		b := f.blob(t, r.Key)
		cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil || format != tt.wantDecoded || cfg.Width != 1024 || cfg.Height != 1024 {
			t.Errorf("%s: the file decodes as %s %dx%d (%v); want %s 1024x1024", tt.id, format, cfg.Width, cfg.Height, err, tt.wantDecoded)
		}
		sizes[tt.id] = int64(len(b))
	}
	if sizes["task_lumen_jpeg10"] >= sizes["task_lumen_jpeg95"] {
		t.Errorf("a JPEG at quality 10 takes %d bytes, at 95 %d: the quality was not applied", sizes["task_lumen_jpeg10"], sizes["task_lumen_jpeg95"])
	}
}

// An upstream image in another format than asked (a model answering JPEG
// for a PNG task) is encoded again; one in the format asked is kept as it
// came.
func TestUpstreamFormatIsEncodedAgain(t *testing.T) {
	pic := image.NewRGBA(image.Rect(0, 0, 8, 6))
	for i := range pic.Pix {
		pic.Pix[i] = byte(i * 7)
	}
	var jpg bytes.Buffer
	if err := jpeg.Encode(&jpg, pic, nil); err != nil {
		t.Fatal(err)
	}
	gen := genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return []imagegen.Image{{Data: jpg.Bytes(), MIME: "image/jpeg", Width: 8, Height: 6}}, nil
	})
	f := newFixture(t, gen)
	for _, tt := range []struct{ id, format, wantDecoded string }{
		{"task_lumen_topng", "png", "png"},
		{"task_lumen_keptjpeg", "jpeg", "jpeg"},
		{"task_lumen_towebp", "webp", "webp"},
	} {
		j := f.job(t, tt.id, std, func(in *task.Input) { in.OutputFormat = tt.format })
		if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
			t.Fatal(err)
		}
		got := f.get(t, tt.id)
		if got.Status != task.Completed || len(got.Results) != 1 {
			t.Fatalf("%s: %s, %+v", tt.id, got.Status, got.Failure)
		}
		b := f.blob(t, got.Results[0].Key)
		cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil || format != tt.wantDecoded || cfg.Width != 8 || cfg.Height != 6 {
			t.Errorf("%s: decodes as %s %dx%d (%v); want %s 8x6", tt.id, format, cfg.Width, cfg.Height, err, tt.wantDecoded)
		}
		if tt.format == "jpeg" && !bytes.Equal(b, jpg.Bytes()) {
			t.Errorf("%s: a JPEG asked as JPEG was encoded again", tt.id)
		}
	}
}

// A task asked for several images makes each in its own generation (each
// variant its own picture), its progress covering them all; it completes
// with that many results.
func TestSeveralImages(t *testing.T) {
	f := newFixture(t, nil)
	j := f.job(t, "task_lumen_four", std, func(in *task.Input) { in.NumImages = 4 })
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	got := f.get(t, "task_lumen_four")
	if got.Status != task.Completed || len(got.Results) != 4 {
		t.Fatalf("%s with %d results; want completed with 4", got.Status, len(got.Results))
	}
	keys := map[string]bool{}
	for _, r := range got.Results {
		keys[r.Key] = true
	}
	if len(keys) != 4 {
		t.Errorf("results %v: want 4 different images", got.Results)
	}
	if bal, refunds := f.credits(t); bal != startCredits-price || refunds != 0 {
		t.Errorf("balance %d, %d refunds; want %d, none", bal, refunds, startCredits-price)
	}
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	for i, p := range f.store.progress {
		if i > 0 && p < f.store.progress[i-1] {
			t.Fatalf("progress went back: %v", f.store.progress)
		}
	}
}

// An image that cannot be made after its retries is left out and its
// share of the price refunded when the task completes with the others;
// none made fails the task, refunded once.
func TestImagesNotMade(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	blocked := func(variants ...int) genFunc {
		return func(_ context.Context, req imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
			mu.Lock()
			calls[req.TaskID]++
			mu.Unlock()
			for _, v := range variants {
				if req.Variant == v {
					return nil, apperr.New(task.ContentBlocked, "the prompt was blocked by the safety filter")
				}
			}
			return []imagegen.Image{{Data: []byte("\x89PNG" + string(rune('a'+req.Variant))), MIME: "image/png", Width: 1, Height: 1}}, nil
		}
	}
	var good bytes.Buffer
	if err := png.Encode(&good, image.NewGray(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	// The model's second image does not decode: it cannot be made a JPEG.
	unreadable := genFunc(func(_ context.Context, req imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
		if req.Variant == 1 {
			return []imagegen.Image{{Data: []byte("\x89PNG but not one"), MIME: "image/png", Width: 4, Height: 4}}, nil
		}
		return []imagegen.Image{{Data: good.Bytes(), MIME: "image/png", Width: 4, Height: 4}}, nil
	})
	for _, tt := range []struct {
		name        string
		gen         genFunc
		format      string
		wantStatus  task.Status
		wantResults int
		wantBalance int64
	}{
		{"one of two blocked", blocked(1), "png", task.Completed, 1, startCredits - price/2},
		{"both blocked", blocked(0, 1), "png", task.Failed, 0, startCredits},
		{"one of two unreadable", unreadable, "jpeg", task.Completed, 1, startCredits - price/2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.gen)
			j := f.job(t, "task_lumen_two", std, func(in *task.Input) { in.NumImages, in.OutputFormat = 2, tt.format })
			if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
				t.Fatal(err)
			}
			got := f.get(t, "task_lumen_two")
			if got.Status != tt.wantStatus || len(got.Results) != tt.wantResults || !got.Refunded {
				t.Fatalf("%s with %d results, refunded %v; want %s with %d, refunded", got.Status, len(got.Results), got.Refunded, tt.wantStatus, tt.wantResults)
			}
			if got.Input == nil || got.Input.NumImages != 2 {
				t.Errorf("the record shows the input %+v; want num_images 2", got.Input)
			}
			bal, refunds := f.credits(t)
			if bal != tt.wantBalance || refunds != 1 {
				t.Errorf("balance %d, %d refunds; want %d, exactly 1", bal, refunds, tt.wantBalance)
			}
			// The job run again (a duplicate) changes nothing.
			if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
				t.Fatal(err)
			}
			if bal2, refunds2 := f.credits(t); bal2 != bal || refunds2 != 1 {
				t.Errorf("after a duplicate run: balance %d, %d refunds", bal2, refunds2)
			}
		})
	}
}

// blob is the content of a stored result.
func (f *fixture) blob(t *testing.T, key string) []byte {
	t.Helper()
	obj, _, err := f.blobs.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(obj); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
