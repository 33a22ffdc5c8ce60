package processor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	xwebp "golang.org/x/image/webp"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// photo paints a deterministic w×h picture that compresses like a photo
// more than a flat render does: smooth gradients, a disc, light noise;
// alpha, when asked, varies across it.
func photo(w, h int, alpha bool) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	rng := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			fx, fy := float64(x)/float64(w), float64(y)/float64(h)
			r := 128 + 100*math.Sin(6*fx+2*fy)
			g := 128 + 100*math.Cos(5*fy-3*fx*fx)
			b := 128 + 90*math.Sin(9*fx*fy)
			if dx, dy := x-w/2, y-h/3; dx*dx+dy*dy < w*w/25 {
				r, g, b = 230, 200, 60
			}
			noisy := func(v float64) uint8 { return uint8(max(0, min(255, v+float64(rng.IntN(17)-8)))) }
			a := uint8(255)
			if alpha {
				a = uint8(64 + 191*x/w)
			}
			img.SetNRGBA(x, y, color.NRGBA{noisy(r), noisy(g), noisy(b), a})
		}
	}
	return img
}

func pngOf(t testing.TB, pic image.Image) imagegen.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, pic); err != nil {
		t.Fatal(err)
	}
	b := pic.Bounds()
	return imagegen.Image{Data: buf.Bytes(), MIME: "image/png", Width: b.Dx(), Height: b.Dy()}
}

// Encode puts an image in the format asked: lossy WebP at the quality
// asked (90 by default, as JPEG), lossless at 100; JPEG as image/jpeg
// encodes it at that quality.
func TestEncode(t *testing.T) {
	opaque := photo(96, 64, false)
	translucent := photo(96, 64, true)
	enc := newEncoder(2, nil)
	encode := func(t *testing.T, pic image.Image, format string, quality int) []byte {
		t.Helper()
		out, err := enc.encode(context.Background(), pngOf(t, pic), format, quality)
		if err != nil {
			t.Fatalf("encode %s at %d: %v", format, quality, err)
		}
		if out.MIME != task.FormatMIME(format) || out.Width != 96 || out.Height != 64 {
			t.Fatalf("encode %s at %d: %s %dx%d; want %s 96x64", format, quality, out.MIME, out.Width, out.Height, task.FormatMIME(format))
		}
		return out.Data
	}
	decodeWebP := func(t *testing.T, b []byte) image.Image {
		t.Helper()
		pic, err := xwebp.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("decode the WebP: %v", err)
		}
		if got := pic.Bounds(); got != image.Rect(0, 0, 96, 64) {
			t.Fatalf("the WebP is %v; want 96x64", got)
		}
		return pic
	}
	// diff is the mean and the largest difference of a channel between a
	// and b.
	diff := func(a, b image.Image) (mean float64, most int) {
		sum := 0
		for y := range 64 {
			for x := range 96 {
				p, q := color.NRGBAModel.Convert(a.At(x, y)).(color.NRGBA), color.NRGBAModel.Convert(b.At(x, y)).(color.NRGBA)
				for _, c := range [][2]uint8{{p.R, q.R}, {p.G, q.G}, {p.B, q.B}, {p.A, q.A}} {
					d := max(int(c[0])-int(c[1]), int(c[1])-int(c[0]))
					sum, most = sum+d, max(most, d)
				}
			}
		}
		return float64(sum) / (96 * 64 * 4), most
	}

	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"webp at 50 is lossy, smaller than at 95", func(t *testing.T) {
			q50, q95 := encode(t, opaque, task.FormatWebP, 50), encode(t, opaque, task.FormatWebP, 95)
			if len(q50) >= len(q95) {
				t.Errorf("quality 50 takes %d bytes, 95 %d: the quality was not applied", len(q50), len(q95))
			}
			if _, err := xwebp.DecodeConfig(bytes.NewReader(q50)); err != nil {
				t.Fatal(err)
			}
			if mean, most := diff(decodeWebP(t, q50), opaque); most == 0 || mean > 16 {
				t.Errorf("quality 50 differs from the source by %.1f a channel on average, %d at most; want lossy and near", mean, most)
			}
			if !bytes.Contains(q50[:40], []byte("VP8")) || bytes.Contains(q50[:40], []byte("VP8L")) {
				t.Errorf("quality 50 starts %q; want a VP8 (lossy) bitstream", q50[:16])
			}
		}},
		{"webp by default is at 90", func(t *testing.T) {
			if def, q90 := encode(t, opaque, task.FormatWebP, 0), encode(t, opaque, task.FormatWebP, 90); !bytes.Equal(def, q90) {
				t.Errorf("the default quality gives %d bytes, 90 gives %d; want the same file", len(def), len(q90))
			}
		}},
		{"webp at 100 is lossless", func(t *testing.T) {
			for _, pic := range []*image.NRGBA{opaque, translucent} {
				if _, most := diff(decodeWebP(t, encode(t, pic, task.FormatWebP, 100)), pic); most != 0 {
					t.Errorf("a pixel differs by %d; want none", most)
				}
			}
		}},
		{"webp keeps alpha and colours", func(t *testing.T) {
			if mean, _ := diff(decodeWebP(t, encode(t, translucent, task.FormatWebP, 90)), translucent); mean > 12 {
				t.Errorf("a translucent picture differs by %.1f a channel on average at quality 90", mean)
			}
		}},
		{"a WebP the model answers is read by golang.org/x/image/webp", func(t *testing.T) {
			// gen2brain/webp registers a decoder of the same magic; the
			// first registered wins, and the pure-Go one needs no
			// WebAssembly instance.
			pic, _, err := image.Decode(bytes.NewReader(encode(t, opaque, task.FormatWebP, 90)))
			if _, ok := pic.(*image.YCbCr); err != nil || !ok {
				t.Errorf("image.Decode gives %T (%v); want x/image/webp's *image.YCbCr", pic, err)
			}
		}},
		{"jpeg at its quality", func(t *testing.T) {
			var want bytes.Buffer
			if err := jpeg.Encode(&want, opaque, &jpeg.Options{Quality: 80}); err != nil {
				t.Fatal(err)
			}
			if got := encode(t, opaque, task.FormatJPEG, 80); !bytes.Equal(got, want.Bytes()) {
				t.Errorf("jpeg at 80: %d bytes; want image/jpeg's %d", len(got), want.Len())
			}
			if def, q90 := encode(t, opaque, task.FormatJPEG, 0), encode(t, opaque, task.FormatJPEG, 90); !bytes.Equal(def, q90) {
				t.Errorf("jpeg by default: %d bytes; want quality 90's %d", len(def), len(q90))
			}
		}},
		{"an unreadable image fails the generation", func(t *testing.T) {
			_, err := enc.encode(context.Background(), imagegen.Image{Data: []byte("not an image"), MIME: "image/png"}, task.FormatWebP, 80)
			if apperr.CodeOf(err) != task.GenerationFailed {
				t.Errorf("%v; want %s", err, task.GenerationFailed)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.check)
	}
}

// An *image.RGBA is premultiplied: libwebp is given its straight colours,
// and a sub-image its own pixels.
func TestStraightRGBA(t *testing.T) {
	rgba := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for i := 0; i < len(rgba.Pix); i += 4 {
		copy(rgba.Pix[i:], []byte{100, 50, 20, 128})
	}
	opaque := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for i := range opaque.Pix {
		opaque.Pix[i] = 255
	}
	sub := photo(8, 8, false).SubImage(image.Rect(2, 2, 6, 6))
	tests := []struct {
		name string
		in   image.Image
		want color.NRGBA
		same bool // handed over as it is
	}{
		{"translucent RGBA", rgba, color.NRGBA{199, 99, 39, 128}, false},
		{"opaque RGBA", opaque, color.NRGBA{255, 255, 255, 255}, true},
		{"sub-image", sub, color.NRGBAModel.Convert(sub.At(2, 2)).(color.NRGBA), false},
	}
	for _, tt := range tests {
		got := straightRGBA(tt.in)
		if (got == tt.in) != tt.same {
			t.Errorf("%s: passed as it is %v; want %v", tt.name, got == tt.in, tt.same)
		}
		n, ok := got.(*image.NRGBA)
		if !ok && !tt.same {
			t.Fatalf("%s: %T; want *image.NRGBA", tt.name, got)
		}
		if ok && (n.Rect.Min != image.Point{} || n.Stride != 4*n.Rect.Dx()) {
			t.Errorf("%s: rect %v stride %d; want packed from 0,0", tt.name, n.Rect, n.Stride)
		}
		if c := color.NRGBAModel.Convert(got.At(0, 0)); c != tt.want {
			t.Errorf("%s: first pixel %v; want %v", tt.name, c, tt.want)
		}
	}
}

// Encodes run side by side safely, no more at once than the encoder's
// slots; one waiting for a slot gives up with its context.
func TestEncodeConcurrently(t *testing.T) {
	enc := newEncoder(2, nil)
	src := pngOf(t, photo(64, 48, false))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			out, err := enc.encode(context.Background(), src, task.FormatWebP, 40+5*i)
			if err == nil {
				_, err = xwebp.Decode(bytes.NewReader(out.Data))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	enc.slots <- struct{}{}
	enc.slots <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := enc.encode(ctx, src, task.FormatWebP, 90); !errors.Is(err, context.Canceled) {
		t.Errorf("with every slot taken and the context done: %v; want context.Canceled", err)
	}
}

// BenchmarkEncode measures one 1024×1024 picture's encoding in each
// output format (BENCHMARKS.md): go test -run '^$' -bench Encode
// ./worker/internal/processor
func BenchmarkEncode(b *testing.B) {
	pic := photo(1024, 1024, false)
	enc := newEncoder(1, nil)
	if _, err := enc.compileWebP(); err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		format  string
		quality int
	}{
		{task.FormatPNG, 0},
		{task.FormatJPEG, 90},
		{task.FormatWebP, 90},
		{task.FormatWebP, 100},
	} {
		b.Run(fmt.Sprintf("%s_q%d", bb.format, bb.quality), func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := enc.write(&buf, pic, bb.format, bb.quality); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes")
		})
	}
}

// The encodes under way hold at most encodeMemory, estimated from their
// pixels: with a byte of it taken, a picture that fits still encodes at
// once, and one whose estimate is the whole budget waits (here until its
// context ends) rather than running beside another.
func TestEncodeMemoryBound(t *testing.T) {
	t.Parallel()
	flat := func(w, h int) imagegen.Image {
		pic := image.NewNRGBA(image.Rect(0, 0, w, h))
		draw.Draw(pic, pic.Bounds(), image.NewUniform(color.NRGBA{R: 200, G: 100, B: 50, A: 255}), image.Point{}, draw.Src)
		return pngOf(t, pic)
	}
	enc := newEncoder(2, nil)
	if err := enc.memory.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		img     imagegen.Image
		format  string
		quality int
		waits   bool
	}{
		{"a small JPEG", flat(256, 256), task.FormatJPEG, 90, false},
		{"a small lossy WebP", flat(256, 256), task.FormatWebP, 90, false},
		{"a 12-megapixel lossy WebP", flat(4000, 3000), task.FormatWebP, 90, true},
		{"a 12-megapixel lossless WebP", flat(4000, 3000), task.FormatWebP, 100, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := 30 * time.Second
			if tt.waits {
				timeout = 200 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, err := enc.encode(ctx, tt.img, tt.format, tt.quality)
			if waited := errors.Is(err, context.DeadlineExceeded); waited != tt.waits || (!tt.waits && err != nil) {
				t.Errorf("encode = %v; want waiting %v", err, tt.waits)
			}
		})
	}
	enc.memory.Release(1)
	if _, err := enc.encode(context.Background(), flat(4000, 3000), task.FormatJPEG, 90); err != nil {
		t.Errorf("the budget free, a 12-megapixel encode: %v", err)
	}
}
