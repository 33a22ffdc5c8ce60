// Package imagegen is the contract of an image generator: the Generator
// interface and what it takes and returns. A generator is one package under
// imagegen/ implementing Generator, and one case in the worker's
// EASEL_GENERATOR switch. It classifies its errors with apperr and the task
// failure codes of package task (apperr.Transient for retryable ones), and
// the worker's retries, deadlines and refunds apply unchanged.
package imagegen

import (
	"bytes"
	"context"
	"errors"
	"image"
	"strconv"

	// Decoders for every accepted source format.
	_ "image/gif"
	_ "image/jpeg"
	_ "image/png"

	_ "golang.org/x/image/webp"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
)

// Generator makes images. progress receives the percentage of the
// generation done so far (rising, below 100).
type Generator interface {
	Generate(ctx context.Context, req Request, progress func(pct int)) ([]Image, error)
}

// Request is one generation.
type Request struct {
	TaskID string
	Model  catalog.Model
	Prompt string
	// AspectRatio is always set: for an edit that named none, the worker
	// has already chosen the ratio nearest the first source.
	AspectRatio string
	ImageSize   string
	// Size is the output size the model produces for AspectRatio and
	// ImageSize.
	Size catalog.Dimensions
	// Sources are the images to edit, in image_urls order; empty for
	// text-to-image.
	Sources []Source
	// Variant is which of the task's images this generation makes (0 for
	// the first, up to its num_images - 1): a generator that paints the
	// same request the same way makes each variant its own image.
	Variant int
}

// ErrThrottled is in the chain of a generator's error when the upstream
// refused the call for its rate limit (HTTP 429): the worker then slows
// every worker's calls to that model down (package quota), not only its own.
var ErrThrottled = errors.New("the upstream is limiting its request rate")

// ErrRefused is in the chain of a generator's error when the upstream
// refused its credential (401, 403, an invalid key): no call with it will
// work until an operator changes it.
var ErrRefused = errors.New("the upstream refused the credential")

// ErrUpstreamFault is in the chain of a generator's error that the
// upstream, not the caller's request, is behind although it is not
// retryable as such (a model the upstream lacks, a region it refuses, an
// answer that is not the API's): one call failed, but another upstream may
// serve the same request (package pool moves it there).
var ErrUpstreamFault = errors.New("the upstream failed the request")

// Source is a fetched source image whose format and dimensions have been
// checked, but whose pixels have not been decoded yet.
type Source struct {
	Index  int    // position in image_urls
	Data   []byte // the bytes as fetched
	MIME   string // image/png, image/jpeg, image/webp or image/gif
	Width  int
	Height int
	// DecodedBytes is the memory the decoded pixels take, from the header:
	// width × height × the bytes a pixel of its format takes.
	DecodedBytes int64
}

// Decode decodes the source's pixels; a corrupt image is
// task.InvalidSourceImage.
func (s Source) Decode() (image.Image, error) {
	img, _, err := image.Decode(bytes.NewReader(s.Data))
	if err != nil {
		return nil, apperr.Wrap(err, task.InvalidSourceImage,
			"image_urls["+strconv.Itoa(s.Index)+"] could not be decoded: the file is damaged or not a PNG, JPEG, WebP or GIF image")
	}
	return img, nil
}

// Image is one generated image.
type Image struct {
	Data   []byte
	MIME   string // image/png, image/jpeg or image/webp
	Width  int
	Height int
	// SHA256 of Data, when the generator already knows it (the worker
	// computes it otherwise).
	SHA256 *[32]byte
}
