package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/imagecheck"
	"github.com/easelhq/easel/pkg/upload"
)

// PathUploads takes uploads.
const PathUploads = "/v1/uploads"

// DefaultUploadBytesPerDay is an account's upload budget unless configured
// otherwise: 500 MB a UTC day.
const DefaultUploadBytesPerDay = 500 << 20

// UploadCounter counts an account's upload bytes of a day against a budget
// (store.Uploads).
type UploadCounter interface {
	Count(ctx context.Context, accountID string, size, budget int64, now time.Time) (used int64, ok bool, err error)
}

// UploadBlobs stores uploads.
type UploadBlobs interface {
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
}

// Uploads configures POST /v1/uploads; without a Counter and Blobs the
// route answers 404.
type Uploads struct {
	Counter UploadCounter
	Blobs   UploadBlobs
	// BytesPerDay is an account's budget (0: DefaultUploadBytesPerDay).
	BytesPerDay int64
	// MaxPixels is the workers' pixel limit on a source image (0:
	// imagecheck.DefaultMaxPixels).
	MaxPixels int64
}

// uploadData is the data of an upload's answer.
type uploadData struct {
	URL         string `json:"url"`
	ExpiresAt   int64  `json:"expires_at"`
	ContentType string `json:"content_type"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

// multipartOverhead is what a multipart body may carry besides its file:
// the boundaries, part headers and small fields.
const multipartOverhead = 1 << 20

// putTimeout bounds storing an upload.
const putTimeout = time.Minute

// Upload handles POST /v1/uploads (and the console's uploads, for the
// session's account): an image as the raw body (an image Content-Type) or
// as the file field of a multipart/form-data body. It is held to the rules
// of a source image (imagecheck, the workers' pixel limit), counted
// against the account's bytes of the day, stored, and answered with a
// signed URL of this service that image_urls takes.
func (h *Handlers) Upload(c echo.Context) error {
	if h.Uploads.Counter == nil || h.Uploads.Blobs == nil {
		return apperr.New(apperr.NotFound, "uploads are not enabled on this gateway")
	}
	r := c.Request()
	if r.ContentLength > upload.MaxBytes+multipartOverhead {
		return uploadTooLarge()
	}
	data, err := readUpload(r)
	if err != nil {
		return err
	}
	info, err := imagecheck.Check(data, h.Uploads.MaxPixels)
	if err != nil {
		return uploadRefused(err)
	}
	now := h.s.Now()
	budget := h.Uploads.BytesPerDay
	if budget <= 0 {
		budget = DefaultUploadBytesPerDay
	}
	// The body has been read, however long that took: the Redis call and
	// the write get budgets of their own.
	base := web.BaseContext(c)
	ctx, cancel := context.WithCancel(base)
	if h.s.RequestTimeout > 0 {
		cancel()
		ctx, cancel = context.WithTimeout(base, h.s.RequestTimeout)
	}
	used, ok, err := h.Uploads.Counter.Count(ctx, web.AccountOf(c).ID, int64(len(data)), budget, now)
	cancel()
	if err != nil {
		return err
	}
	if !ok {
		next := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		c.Response().Header().Set("Retry-After", strconv.Itoa(max(web.CeilSeconds(next.Sub(now)), 1)))
		return apperr.Errorf(apperr.LimitExceeded, "this upload (%d bytes) would take the account over its upload budget of %d MB a day (%d bytes used today, UTC); it resets at midnight UTC",
			len(data), budget>>20, used)
	}
	key := upload.Key(now, info.MIME)
	ctx, cancel = context.WithTimeout(base, putTimeout)
	defer cancel()
	if _, err := h.Uploads.Blobs.Put(ctx, key, bytes.NewReader(data)); err != nil {
		return err
	}
	expires := now.Add(upload.TTL)
	c.Response().Header().Set("Cache-Control", "no-store")
	return web.OK(c, uploadData{
		URL:         h.Signer.Sign(upload.Path(key), expires),
		ExpiresAt:   expires.Unix(),
		ContentType: info.MIME,
		Width:       info.Width,
		Height:      info.Height,
	})
}

// readUpload reads the image of an upload request, at most
// upload.MaxBytes.
func readUpload(r *http.Request) ([]byte, error) {
	ct := r.Header.Get(echo.HeaderContentType)
	mt, params, err := mime.ParseMediaType(ct)
	switch {
	case ct == "":
		return nil, wrongUploadType()
	case err != nil:
		return nil, apperr.New(apperr.Invalid, "the Content-Type header could not be parsed")
	case mt == "multipart/form-data":
		if params["boundary"] == "" {
			return nil, apperr.New(apperr.Invalid, "the multipart/form-data body has no boundary")
		}
		body := http.MaxBytesReader(nil, r.Body, upload.MaxBytes+multipartOverhead)
		return readFilePart(multipart.NewReader(body, params["boundary"]))
	case strings.HasPrefix(mt, "image/"):
		data, err := io.ReadAll(io.LimitReader(r.Body, upload.MaxBytes+1))
		if err != nil {
			return nil, apperr.Wrap(err, apperr.Invalid, "could not read the request body")
		}
		if len(data) > upload.MaxBytes {
			return nil, uploadTooLarge()
		}
		if len(data) == 0 {
			return nil, apperr.New(apperr.Invalid, "the request body is empty: send the image")
		}
		return data, nil
	}
	return nil, wrongUploadType()
}

// readFilePart reads the part named file of a multipart body.
func readFilePart(mr *multipart.Reader) ([]byte, error) {
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil, apperr.New(apperr.Invalid, `the multipart/form-data body has no "file" field: send the image in it`)
		}
		if err != nil {
			return nil, multipartError(err)
		}
		if p.FormName() != "file" {
			if _, err := io.Copy(io.Discard, p); err != nil {
				return nil, multipartError(err)
			}
			continue
		}
		data, err := io.ReadAll(io.LimitReader(p, upload.MaxBytes+1))
		if err != nil {
			return nil, multipartError(err)
		}
		if len(data) > upload.MaxBytes {
			return nil, uploadTooLarge()
		}
		if len(data) == 0 {
			return nil, apperr.New(apperr.Invalid, `the "file" field is empty: send the image in it`)
		}
		return data, nil
	}
}

func multipartError(err error) error {
	if errors.As(err, new(*http.MaxBytesError)) {
		return uploadTooLarge()
	}
	return apperr.Wrap(err, apperr.Invalid, "the multipart/form-data body could not be read")
}

func wrongUploadType() error {
	return apperr.New(apperr.UnsupportedMediaType, "Content-Type must be the image's type (image/png, image/jpeg, image/webp or image/gif) or multipart/form-data with the image in a file field")
}

func uploadTooLarge() error {
	return apperr.Errorf(apperr.TooLarge, "the image is larger than the %d MB limit", upload.MaxBytes>>20)
}

// uploadRefused answers an image imagecheck refuses: 413 past the pixel
// limit, else 415 (not an image Easel reads).
func uploadRefused(err error) error {
	var refused *imagecheck.Error
	if !errors.As(err, &refused) {
		return err
	}
	switch {
	case errors.Is(err, imagecheck.ErrTooManyPixels):
		return apperr.Errorf(apperr.TooLarge, "the image is %s", refused.Detail)
	case errors.Is(err, imagecheck.ErrNotImage):
		return apperr.Errorf(apperr.UnsupportedMediaType, "the file is not a PNG, JPEG, WebP or GIF image (%s)", refused.Detail)
	case errors.Is(err, imagecheck.ErrNoPixels):
		return apperr.New(apperr.UnsupportedMediaType, "the image has no pixels")
	}
	return apperr.New(apperr.UnsupportedMediaType, "the image could not be decoded: the file is damaged")
}
