package processor

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"io"
	"sync"
	"time"

	"github.com/HugoSmits86/nativewebp"
	libwebp "github.com/gen2brain/webp"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// webpMethod is libwebp's speed/size trade-off for lossy WebP (0 fastest,
// 6 smallest), its own default: see BENCHMARKS.md.
const webpMethod = 4

// encoder encodes results in their output format. An encode is CPU-bound
// and holds the image several times over (a lossy WebP encode runs libwebp
// in a WebAssembly instance of its own, its memory the image's pixels and
// the encoder's buffers), so at most as many run at once as it has slots;
// the others wait.
//
// Lossy WebP is libwebp compiled to WebAssembly (github.com/gen2brain/webp,
// run by wazero: the binaries build without cgo); lossless WebP is
// nativewebp, pure Go. libwebp's module is compiled once a process, on the
// first lossy WebP encode or ahead of it (prepare).
type encoder struct {
	slots chan struct{}
	// memory bounds what the encodes under way hold at once, estimated
	// from their pixels (encodeBytesPerPixel): a 4K lossy WebP runs alone.
	memory *semaphore.Weighted
	// compileWebP compiles libwebp's module, once, and says how long that
	// took.
	compileWebP func() (time.Duration, error)
}

// newEncoder returns an encoder running at most parallel encodes at once
// (at least one); log receives the compilation of libwebp's module.
func newEncoder(parallel int, log *zap.Logger) *encoder {
	if log == nil {
		log = zap.NewNop()
	}
	return &encoder{
		slots:  make(chan struct{}, max(parallel, 1)),
		memory: semaphore.NewWeighted(encodeMemory),
		compileWebP: sync.OnceValues(func() (d time.Duration, err error) {
			start := time.Now()
			defer func() {
				// The library panics when its embedded module cannot be
				// compiled; every lossy WebP encode then fails instead.
				if r := recover(); r != nil {
					err = fmt.Errorf("compile libwebp's WebAssembly module: %v", r)
					log.Error("lossy WebP is unavailable", zap.Error(err))
				}
			}()
			libwebp.Init()
			d = time.Since(start)
			if libwebp.Dynamic() == nil {
				// A dynamically linked binary (not a release's) uses a
				// libwebp.so it finds instead.
				log.Info("lossy WebP uses the system's libwebp.so")
			} else {
				log.Info("compiled libwebp's WebAssembly module for lossy WebP", zap.Duration("took", d))
			}
			return d, nil
		}),
	}
}

// encodeMemory is the most the encodes of a process hold at once, as
// encodeBytesPerPixel estimates it: an encode of more runs alone.
const encodeMemory = 512 << 20

// encodeBytesPerPixel is about what encoding a picture in format at
// quality allocates a pixel (BENCHMARKS.md's "Encoding results": 45 MB a
// megapixel for lossy WebP, 60 for lossless, 4 for JPEG, 2 for PNG), with
// the decoded picture's 4 to 8 bytes.
func encodeBytesPerPixel(format string, quality int) int64 {
	switch {
	case lossyWebP(format, quality):
		return 48
	case format == task.FormatWebP:
		return 64
	case format == task.FormatJPEG:
		return 12
	}
	return 10
}

// lossyWebP reports whether format at quality is encoded by libwebp.
func lossyWebP(format string, quality int) bool {
	return format == task.FormatWebP && quality < task.MaxQuality
}

// prepare starts, in the background, what encoding in format at quality
// needs ready (libwebp's module for lossy WebP), so that it overlaps the
// task's generation instead of delaying its encode.
func (e *encoder) prepare(format string, quality int) {
	if lossyWebP(format, quality) {
		go func() { _, _ = e.compileWebP() }()
	}
}

// encode returns img in the output format (task.FormatPNG, FormatJPEG or
// FormatWebP; "" is PNG), quality being a lossy format's (0: its default,
// task.DefaultQuality; WebP at task.MaxQuality is lossless): as it is when
// it is in that format already, else decoded and encoded again once a slot
// is free.
func (e *encoder) encode(ctx context.Context, img imagegen.Image, format string, quality int) (imagegen.Image, error) {
	if format == "" {
		format = task.FormatPNG
	}
	want := task.FormatMIME(format)
	if want == "" {
		return img, apperr.Errorf(apperr.Internal, "output format %q", format)
	}
	if img.MIME == want {
		return img, nil
	}
	if quality == 0 {
		quality = task.DefaultQuality
	}
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
	case <-ctx.Done():
		return img, ctx.Err()
	}
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(img.Data)); err == nil {
		need := min(int64(cfg.Width)*int64(cfg.Height)*encodeBytesPerPixel(format, quality), encodeMemory)
		if err := e.memory.Acquire(ctx, need); err != nil {
			return img, err
		}
		defer e.memory.Release(need)
	}
	// The decoders of every format a generator answers are registered by
	// package imagegen.
	pic, _, err := image.Decode(bytes.NewReader(img.Data))
	if err != nil {
		return img, apperr.Wrap(fmt.Errorf("decode the model's %s image: %w", img.MIME, err), task.GenerationFailed, "the model returned an image that could not be read")
	}
	var buf bytes.Buffer
	if err := e.write(&buf, pic, format, quality); err != nil {
		return img, apperr.Wrap(fmt.Errorf("encode %s at quality %d: %w", format, quality, err), apperr.Internal, "the result could not be encoded")
	}
	b := pic.Bounds()
	return imagegen.Image{Data: buf.Bytes(), MIME: want, Width: b.Dx(), Height: b.Dy()}, nil
}

// write encodes pic in format (task.FormatPNG, FormatJPEG or FormatWebP)
// at quality, 1 to 100.
func (e *encoder) write(w io.Writer, pic image.Image, format string, quality int) error {
	switch {
	case format == task.FormatPNG:
		return (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(w, pic)
	case format == task.FormatJPEG:
		return jpeg.Encode(w, pic, &jpeg.Options{Quality: quality})
	case lossyWebP(format, quality):
		return e.encodeLossyWebP(w, pic, quality)
	case format == task.FormatWebP:
		return nativewebp.Encode(w, pic, nil)
	}
	return fmt.Errorf("no encoder for %q", format)
}

// encodeLossyWebP writes pic as lossy WebP (VP8, its alpha if any in an
// ALPH chunk) at quality, 1 to 99.
func (e *encoder) encodeLossyWebP(w io.Writer, pic image.Image, quality int) (err error) {
	if _, err := e.compileWebP(); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("libwebp: %v", r)
		}
	}()
	return libwebp.Encode(w, straightRGBA(pic), libwebp.Options{Quality: quality, Method: webpMethod})
}

// straightRGBA returns pic as libwebp reads it: pixels of non-premultiplied
// RGBA from the first byte of Pix, rows packed. The library takes an
// *image.RGBA's bytes as they are (premultiplied: right only when opaque),
// ignores a sub-image's offset and stride, and reads an *image.NYCbCrA's
// planes as one buffer; so all but a packed *image.NRGBA, or a packed
// opaque *image.RGBA, are converted.
func straightRGBA(pic image.Image) image.Image {
	b := pic.Bounds()
	packed := func(stride int, min image.Point) bool { return stride == 4*b.Dx() && min == image.Point{} }
	switch p := pic.(type) {
	case *image.NRGBA:
		if packed(p.Stride, p.Rect.Min) {
			return p
		}
	case *image.RGBA:
		if packed(p.Stride, p.Rect.Min) && p.Opaque() {
			return p
		}
	}
	dst := image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Rect, pic, b.Min, draw.Src)
	return dst
}
