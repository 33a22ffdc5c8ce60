package processor

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"

	"github.com/HugoSmits86/nativewebp"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// Encode returns img in the output format (task.FormatPNG, FormatJPEG or
// FormatWebP; "" is PNG), quality being a lossy format's (0: its
// default): as it is when it is in that format already, else decoded and
// encoded again. WebP results are lossless (VP8L, a pure-Go encoder:
// the binaries build without cgo).
func Encode(img imagegen.Image, format string, quality int) (imagegen.Image, error) {
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
	// The decoders of every format a generator answers are registered by
	// package imagegen.
	pic, _, err := image.Decode(bytes.NewReader(img.Data))
	if err != nil {
		return img, apperr.Wrap(fmt.Errorf("decode the model's %s image: %w", img.MIME, err), task.GenerationFailed, "the model returned an image that could not be read")
	}
	var buf bytes.Buffer
	switch format {
	case task.FormatPNG:
		err = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, pic)
	case task.FormatJPEG:
		if quality == 0 {
			quality = task.DefaultQuality
		}
		err = jpeg.Encode(&buf, pic, &jpeg.Options{Quality: quality})
	case task.FormatWebP:
		err = nativewebp.Encode(&buf, pic, nil)
	}
	if err != nil {
		return img, apperr.Wrap(fmt.Errorf("encode %s: %w", format, err), apperr.Internal, "the result could not be encoded")
	}
	b := pic.Bounds()
	return imagegen.Image{Data: buf.Bytes(), MIME: want, Width: b.Dx(), Height: b.Dy()}, nil
}
