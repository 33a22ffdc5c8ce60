// Package fetch downloads the source images of editing tasks, safely: every
// connection (redirects included) goes through the egress policy on the
// address actually dialled, bodies are capped per image and in total, the
// content is sniffed, and dimensions are checked before any pixel is decoded.
package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// Options configure a Fetcher. Zero fields take the defaults below.
type Options struct {
	Policy         egress.Policy
	MaxBytes       int64         // per image; default 20 MB
	MaxTotalBytes  int64         // all images of a task; default 100 MB
	MaxPixels      int64         // width×height per image; default 50 megapixels
	MaxDecoded     int64         // decoded bytes of all images of a task; default 400 MB
	ConnectTimeout time.Duration // default 5s
	Timeout        time.Duration // per image, whole exchange; default 30s
	MaxRedirects   int           // default 3
	UserAgent      string
}

// Defaults.
const (
	DefaultMaxBytes      = 20 << 20
	DefaultMaxTotalBytes = 100 << 20
	DefaultMaxPixels     = 50_000_000
	DefaultMaxDecoded    = 400 << 20
)

// Fetcher fetches source images.
type Fetcher struct {
	opts   Options
	client *http.Client
}

// New returns a fetcher.
func New(o Options) *Fetcher {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxTotalBytes <= 0 {
		o.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if o.MaxPixels <= 0 {
		o.MaxPixels = DefaultMaxPixels
	}
	if o.MaxDecoded <= 0 {
		o.MaxDecoded = DefaultMaxDecoded
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = 3
	}
	if o.UserAgent == "" {
		o.UserAgent = "Easel-ImageFetcher/1"
	}
	// Redirects are followed, each hop through the policy like the first.
	client := egress.NewClient(o.Policy, egress.ClientOptions{
		Timeout:        o.Timeout,
		ConnectTimeout: o.ConnectTimeout,
		MaxIdleConns:   64,
		MaxRedirects:   o.MaxRedirects,
	})
	return &Fetcher{opts: o, client: client}
}

// Fetch downloads every URL, in parallel, and checks each is an image within
// the limits. Errors are task.SourceFetchFailed or
// task.InvalidSourceImage, with a message naming the URL's position.
func (f *Fetcher) Fetch(ctx context.Context, urls []string) ([]imagegen.Source, error) {
	out := make([]imagegen.Source, len(urls))
	var total, decoded atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for i, u := range urls {
		g.Go(func() error {
			s, err := f.fetchOne(ctx, i, u, &total, &decoded)
			if err != nil {
				return err
			}
			out[i] = s
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *Fetcher) fetchOne(ctx context.Context, i int, rawURL string, total, decoded *atomic.Int64) (imagegen.Source, error) {
	fail := func(code apperr.Code, err error, format string, args ...any) (imagegen.Source, error) {
		return imagegen.Source{}, apperr.Wrap(err, code, fmt.Sprintf("image_urls[%d] ", i)+fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail(task.SourceFetchFailed, err, "is not an http or https URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fail(task.SourceFetchFailed, err, "is not a valid URL")
	}
	req.Header.Set("User-Agent", f.opts.UserAgent)
	req.Header.Set("Accept", "image/png, image/jpeg, image/webp, image/gif")
	resp, err := f.client.Do(req)
	if err != nil {
		return fail(task.SourceFetchFailed, err, "could not be fetched: %s", describe(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(task.SourceFetchFailed, nil, "could not be fetched: the server answered HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > f.opts.MaxBytes {
		return fail(task.InvalidSourceImage, nil, "is larger than the %d MB limit", f.opts.MaxBytes>>20)
	}
	// Bytes count against the task's total as they arrive, so no image is
	// read past the point where the task as a whole is over its limit.
	data, err := io.ReadAll(&budgetReader{r: io.LimitReader(resp.Body, f.opts.MaxBytes+1), total: total, max: f.opts.MaxTotalBytes})
	switch {
	case errors.Is(err, errOverTotal):
		return fail(task.InvalidSourceImage, nil, "brings the source images over the %d MB total limit", f.opts.MaxTotalBytes>>20)
	case err != nil:
		return fail(task.SourceFetchFailed, err, "could not be fetched: %s", describe(err))
	case int64(len(data)) > f.opts.MaxBytes:
		return fail(task.InvalidSourceImage, nil, "is larger than the %d MB limit", f.opts.MaxBytes>>20)
	}
	mime := http.DetectContentType(data)
	switch mime {
	case "image/png", "image/jpeg", "image/webp", "image/gif":
	default:
		return fail(task.InvalidSourceImage, nil, "is not a PNG, JPEG, WebP or GIF image (got %s)", strings.SplitN(mime, ";", 2)[0])
	}
	// The header alone gives the dimensions: refuse a decompression bomb
	// before any pixel is decoded.
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return fail(task.InvalidSourceImage, err, "could not be decoded: the file is damaged")
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return fail(task.InvalidSourceImage, nil, "has no pixels")
	}
	if int64(cfg.Width)*int64(cfg.Height) > f.opts.MaxPixels {
		return fail(task.InvalidSourceImage, nil, "is %dx%d pixels; the limit is %d megapixels", cfg.Width, cfg.Height, f.opts.MaxPixels/1_000_000)
	}
	// What the pixels will take once decoded, from the header: ten small
	// files can hold gigabytes of 16-bit pixels. The task's images together
	// must fit, before any is decoded.
	size := int64(cfg.Width) * int64(cfg.Height) * bytesPerPixel(cfg.ColorModel)
	if decoded.Add(size) > f.opts.MaxDecoded {
		return fail(task.InvalidSourceImage, nil, "brings the source images over the %d MB they may take once decoded (this one is %dx%d pixels at %d bytes each)",
			f.opts.MaxDecoded>>20, cfg.Width, cfg.Height, bytesPerPixel(cfg.ColorModel))
	}
	return imagegen.Source{Index: i, Data: data, MIME: mime, Width: cfg.Width, Height: cfg.Height, DecodedBytes: size}, nil
}

var errOverTotal = errors.New("over the task's total of source bytes")

// bytesPerPixel is what a decoded pixel of an image with this color model
// takes in memory (Go's image types: 16-bit channels take 8 bytes a pixel,
// paletted and gray images 1, JPEG's YCbCr at most 3).
func bytesPerPixel(m color.Model) int64 {
	switch m {
	case color.RGBA64Model, color.NRGBA64Model:
		return 8
	case color.Gray16Model, color.Alpha16Model:
		return 2
	case color.GrayModel, color.AlphaModel:
		return 1
	case color.YCbCrModel:
		return 3
	}
	if _, ok := m.(color.Palette); ok {
		return 1
	}
	return 4
}

// budgetReader adds what it reads to a task's running total of source
// bytes, shared by the task's fetches, and fails as soon as the total passes
// max.
type budgetReader struct {
	r     io.Reader
	total *atomic.Int64
	max   int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 && b.total.Add(int64(n)) > b.max {
		return n, errOverTotal
	}
	return n, err
}

// describe says why a fetch failed without internal detail.
func describe(err error) string {
	var refused *egress.RefusedError
	var netErr net.Error
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &refused):
		return "its address is not allowed (" + refused.Why + ")"
	case errors.Is(err, egress.ErrTooManyRedirects):
		return "too many redirects"
	case errors.Is(err, egress.ErrRedirectScheme):
		return "it redirects to a URL that is not http or https"
	case errors.As(err, &dnsErr):
		return "its host name could not be resolved"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "the server did not answer in time"
	case errors.Is(err, context.Canceled):
		return "the fetch was cancelled"
	}
	return "the connection failed"
}
