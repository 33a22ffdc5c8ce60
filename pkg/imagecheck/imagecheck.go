// Package imagecheck tells whether bytes are an image Easel takes as a
// source (PNG, JPEG, WebP or GIF) within the pixel limit, from the content
// and the header alone: no pixel is decoded. The gateway checks uploads
// with it and the workers every source image, so both hold an image to the
// same rules.
package imagecheck

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"net/http"
	"strings"

	// The formats a source may be in, for image.DecodeConfig.
	_ "image/gif"
	_ "image/jpeg"
	_ "image/png"

	_ "golang.org/x/image/webp"
)

// DefaultMaxPixels is the largest width×height a source image may have
// unless configured otherwise: 50 megapixels.
const DefaultMaxPixels = 50_000_000

// Info is what the header says about an image.
type Info struct {
	MIME          string // image/png, image/jpeg, image/webp or image/gif
	Width, Height int
	Model         color.Model
}

// Why an image is refused.
var (
	// ErrNotImage: the content is not a PNG, JPEG, WebP or GIF.
	ErrNotImage = errors.New("not a PNG, JPEG, WebP or GIF image")
	// ErrDamaged: the content says it is an image but its header does not decode.
	ErrDamaged = errors.New("the image could not be decoded: the file is damaged")
	// ErrNoPixels: the header gives a zero dimension.
	ErrNoPixels = errors.New("the image has no pixels")
	// ErrTooManyPixels: width×height is over the limit.
	ErrTooManyPixels = errors.New("the image has more pixels than the limit")
)

// Error is a refusal with what was found: Err is one of the errors above.
type Error struct {
	Err    error
	Detail string // for a person: what was found, against which limit
}

func (e *Error) Error() string { return e.Err.Error() + ": " + e.Detail }
func (e *Error) Unwrap() error { return e.Err }

// Check sniffs data and reads its header: it must be a PNG, JPEG, WebP or
// GIF of at most maxPixels (DefaultMaxPixels when maxPixels <= 0) pixels.
// A refusal is an *Error.
func Check(data []byte, maxPixels int64) (Info, error) {
	if maxPixels <= 0 {
		maxPixels = DefaultMaxPixels
	}
	mime := http.DetectContentType(data)
	switch mime {
	case "image/png", "image/jpeg", "image/webp", "image/gif":
	default:
		return Info{}, &Error{Err: ErrNotImage, Detail: "got " + strings.SplitN(mime, ";", 2)[0]}
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return Info{}, &Error{Err: ErrDamaged, Detail: err.Error()}
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return Info{}, &Error{Err: ErrNoPixels, Detail: fmt.Sprintf("%dx%d", cfg.Width, cfg.Height)}
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxPixels {
		return Info{}, &Error{Err: ErrTooManyPixels, Detail: fmt.Sprintf("%dx%d pixels; the limit is %d megapixels", cfg.Width, cfg.Height, maxPixels/1_000_000)}
	}
	return Info{MIME: mime, Width: cfg.Width, Height: cfg.Height, Model: cfg.ColorModel}, nil
}
