// Package imagegen holds what every image generator takes and returns. A
// generator is one package under imagegen/ with a type that has
//
//	Generate(ctx context.Context, req imagegen.Request, progress func(pct int)) ([]imagegen.Image, error)
//
// and one case in the worker's EASEL_GENERATOR switch.
package imagegen

import (
	"bytes"
	"image"
	"strconv"

	// Decoders for every accepted source format.
	_ "image/gif"
	_ "image/jpeg"
	_ "image/png"

	_ "golang.org/x/image/webp"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

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
}

// Source is a fetched source image whose format and dimensions have been
// checked, but whose pixels have not been decoded yet.
type Source struct {
	Index  int    // position in image_urls
	Data   []byte // the bytes as fetched
	MIME   string // image/png, image/jpeg, image/webp or image/gif
	Width  int
	Height int
}

// Decode decodes the source's pixels; a corrupt image is
// apperr.InvalidSourceImage.
func (s Source) Decode() (image.Image, error) {
	img, _, err := image.Decode(bytes.NewReader(s.Data))
	if err != nil {
		return nil, apperr.Wrap(err, apperr.InvalidSourceImage,
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
