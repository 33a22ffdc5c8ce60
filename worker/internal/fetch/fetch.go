// Package fetch downloads the source images of editing tasks, safely: every
// connection (redirects included) goes through the egress policy on the
// address actually dialled, bodies are capped per image and in total, the
// content is sniffed, and dimensions are checked before any pixel is decoded.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/imagecheck"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/pkg/upload"
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
	// Uploads, when set, tells the URLs of images uploaded to the gateway
	// (upload.FromURL), which are read from Blobs, never fetched: they
	// count against the same limits.
	Uploads upload.Checker
	Blobs   Opener
	// Tracing, when on, makes a "source.fetch" span of each image fetched
	// within a traced run, and a client span of each request under it
	// (nil: off).
	Tracing *tracing.Tracing
}

// Opener opens stored blobs: the blob store uploads are kept in.
type Opener interface {
	Open(ctx context.Context, key string) (blob.Object, blob.Info, error)
}

// Defaults.
const (
	DefaultMaxBytes      = 20 << 20
	DefaultMaxTotalBytes = 100 << 20
	DefaultMaxPixels     = imagecheck.DefaultMaxPixels
	DefaultMaxDecoded    = 400 << 20
)

// Fetcher fetches source images.
type Fetcher struct {
	opts   Options
	client *http.Client
	tracer trace.Tracer // nil: tracing off
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
	f := &Fetcher{opts: o, client: client}
	if o.Tracing != nil && o.Tracing.Enabled() {
		// The egress transport (its dialer checks every address) stays
		// under the tracing one.
		client.Transport = tracing.ChildTransport(client.Transport, o.Tracing)
		f.tracer = o.Tracing.Provider().Tracer("github.com/easelhq/easel/worker")
	}
	return f
}

// SpanFetch is the span of the fetch of one source image.
const SpanFetch = "source.fetch"

// span starts the "source.fetch" span of image i, within a traced run.
func (f *Fetcher) span(ctx context.Context, i int) (context.Context, trace.Span) {
	if f.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	return f.tracer.Start(ctx, SpanFetch, trace.WithAttributes(attribute.Int("easel.source_index", i)))
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
			ctx, span := f.span(ctx, i)
			s, err := f.fetchOne(ctx, i, u, &total, &decoded)
			if span != nil {
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, apperr.MessageOf(err))
				}
				span.End()
			}
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
	if f.opts.Uploads != nil && f.opts.Blobs != nil {
		key, ok, err := upload.FromURL(f.opts.Uploads, rawURL, time.Time{})
		if err != nil {
			return fail(task.SourceFetchFailed, err, "%s", apperr.MessageOf(err))
		}
		if ok {
			return f.readUpload(ctx, i, key, total, decoded)
		}
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
	return f.check(i, data, decoded)
}

// check holds a source's bytes to the image rules (imagecheck: the
// gateway's rules for uploads too) and the task's decoded budget.
func (f *Fetcher) check(i int, data []byte, decoded *atomic.Int64) (imagegen.Source, error) {
	fail := func(code apperr.Code, err error, format string, args ...any) (imagegen.Source, error) {
		return imagegen.Source{}, apperr.Wrap(err, code, fmt.Sprintf("image_urls[%d] ", i)+fmt.Sprintf(format, args...))
	}
	// The header alone gives the dimensions: refuse a decompression bomb
	// before any pixel is decoded.
	info, err := imagecheck.Check(data, f.opts.MaxPixels)
	var refused *imagecheck.Error
	if errors.As(err, &refused) {
		switch {
		case errors.Is(err, imagecheck.ErrNotImage):
			return fail(task.InvalidSourceImage, nil, "is not a PNG, JPEG, WebP or GIF image (%s)", refused.Detail)
		case errors.Is(err, imagecheck.ErrDamaged):
			return fail(task.InvalidSourceImage, err, "could not be decoded: the file is damaged")
		case errors.Is(err, imagecheck.ErrNoPixels):
			return fail(task.InvalidSourceImage, nil, "has no pixels")
		}
		return fail(task.InvalidSourceImage, nil, "is %s", refused.Detail)
	}
	if err != nil {
		return fail(task.InvalidSourceImage, err, "could not be checked")
	}
	mime, cfg := info.MIME, image.Config{ColorModel: info.Model, Width: info.Width, Height: info.Height}
	// What the pixels will take once decoded, from the header: ten small
	// files can hold gigabytes of 16-bit pixels. The task's images together
	// must fit, before any is decoded.
	size := int64(cfg.Width) * int64(cfg.Height) * bytesPerPixel(cfg.ColorModel)
	var coeffs int64 // a progressive JPEG's DCT coefficients, held while it decodes
	if mime == "image/jpeg" {
		coeffs = jpegCoefficientBytes(data, cfg)
		size += coeffs
	}
	if decoded.Add(size) > f.opts.MaxDecoded {
		if coeffs > 0 {
			return fail(task.InvalidSourceImage, nil, "brings the source images over the %d MB they may take once decoded (this one is %dx%d pixels at %d bytes each, plus %d MB of coefficients to decode it as a progressive JPEG)",
				f.opts.MaxDecoded>>20, cfg.Width, cfg.Height, bytesPerPixel(cfg.ColorModel), (coeffs+1<<20-1)>>20)
		}
		return fail(task.InvalidSourceImage, nil, "brings the source images over the %d MB they may take once decoded (this one is %dx%d pixels at %d bytes each)",
			f.opts.MaxDecoded>>20, cfg.Width, cfg.Height, bytesPerPixel(cfg.ColorModel))
	}
	return imagegen.Source{Index: i, Data: data, MIME: mime, Width: cfg.Width, Height: cfg.Height, DecodedBytes: size}, nil
}

// readUpload reads an uploaded source image from the blob store.
func (f *Fetcher) readUpload(ctx context.Context, i int, key string, total, decoded *atomic.Int64) (imagegen.Source, error) {
	fail := func(code apperr.Code, err error, format string, args ...any) (imagegen.Source, error) {
		return imagegen.Source{}, apperr.Wrap(err, code, fmt.Sprintf("image_urls[%d] ", i)+fmt.Sprintf(format, args...))
	}
	obj, info, err := f.opts.Blobs.Open(ctx, key)
	switch {
	case apperr.CodeOf(err) == apperr.NotFound:
		return fail(task.InvalidSourceImage, err, "is an upload that has expired: upload the image again")
	case err != nil:
		return fail(task.SourceFetchFailed, err, "is an upload that could not be read")
	}
	defer obj.Close()
	if info.Size > f.opts.MaxBytes {
		return fail(task.InvalidSourceImage, nil, "is larger than the %d MB limit", f.opts.MaxBytes>>20)
	}
	data, err := io.ReadAll(&budgetReader{r: io.LimitReader(obj, f.opts.MaxBytes+1), total: total, max: f.opts.MaxTotalBytes})
	switch {
	case errors.Is(err, errOverTotal):
		return fail(task.InvalidSourceImage, nil, "brings the source images over the %d MB total limit", f.opts.MaxTotalBytes>>20)
	case err != nil:
		return fail(task.SourceFetchFailed, err, "is an upload that could not be read")
	case int64(len(data)) > f.opts.MaxBytes:
		return fail(task.InvalidSourceImage, nil, "is larger than the %d MB limit", f.opts.MaxBytes>>20)
	}
	return f.check(i, data, decoded)
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

// jpegCoefficientBytes is the memory Go's image/jpeg holds, besides the
// pixels, while it decodes data, a JPEG whose header image.DecodeConfig has
// read. A sequential (baseline or extended, SOF0 or SOF1) JPEG's blocks go
// straight to the pixels: nothing. A progressive one (SOF2) is sent in
// several scans, so the decoder keeps every component's DCT coefficients
// for the whole image until the last scan: the decoder's progCoeffs field
// ($GOROOT/src/image/jpeg/reader.go), one block of 64 int32 (256 bytes)
// per 8×8 block of the component, allocated in processSOS (scan.go) as
// mxx·myy·h·v blocks, where mxx × myy is the image in MCUs of 8·h0 × 8·v0
// pixels (h0, v0 the first component's sampling factors; 1×1 for a
// single component) and h, v the component's. That is 4 bytes a pixel per
// component at full resolution: 4 for grey, 12 for 4:4:4 YCbCr, 6 for
// 4:2:0, each exactly as allocated (TestProgressiveJPEGEstimateCoversTheDecode
// measures it). They are garbage once the decode returns, but a task's
// sources are charged together, as their pixels are.
//
// The frame is found as image/jpeg finds it (the same markers, extraneous
// bytes and fill bytes skipped); if it cannot be, the bound for any frame
// image/jpeg accepts is charged: four components of MCUs up to 32×32
// pixels.
func jpegCoefficientBytes(data []byte, cfg image.Config) int64 {
	const blockBytes = 64 * 4 // one block of int32 coefficients
	progressive, hv, ok := jpegFrame(data)
	if !ok {
		mx, my := (int64(cfg.Width)+31)/32, (int64(cfg.Height)+31)/32
		return 4 * mx * my * 16 * blockBytes
	}
	if !progressive {
		return 0
	}
	h0, v0 := int64(hv[0]>>4), int64(hv[0]&0x0f)
	if len(hv) == 1 {
		h0, v0 = 1, 1 // image/jpeg's processSOF: one component is never subsampled
	}
	mxx := (int64(cfg.Width) + 8*h0 - 1) / (8 * h0)
	myy := (int64(cfg.Height) + 8*v0 - 1) / (8 * v0)
	var blocks int64
	for _, s := range hv {
		h, v := int64(s>>4), int64(s&0x0f)
		if len(hv) == 1 {
			h, v = 1, 1
		}
		blocks += mxx * myy * h * v
	}
	return blocks * blockBytes
}

// jpegFrame reads a JPEG's segments up to its frame header (SOF0, SOF1 or
// SOF2, the frames image/jpeg decodes), walking them as image/jpeg's
// decoder does, and returns whether it is progressive and each
// component's sampling factors (h<<4 | v). ok is false if no such frame
// comes before the first scan or the end of data.
func jpegFrame(data []byte) (progressive bool, hv []byte, ok bool) {
	if len(data) < 2 || data[0] != 0xff || data[1] != 0xd8 { // SOI
		return false, nil, false
	}
	i := 2
	for {
		// A marker is 0xff and a code; bytes before it are ignored,
		// 0xff 0x00 is data and repeated 0xff are fill.
		for i < len(data) && data[i] != 0xff {
			i++
		}
		if i+1 >= len(data) {
			return false, nil, false
		}
		marker := data[i+1]
		i += 2
		if marker == 0x00 {
			continue
		}
		for marker == 0xff {
			if i >= len(data) {
				return false, nil, false
			}
			marker, i = data[i], i+1
		}
		switch {
		case marker == 0xd9: // EOI
			return false, nil, false
		case 0xd0 <= marker && marker <= 0xd7: // RSTn: no length
			continue
		}
		if i+2 > len(data) {
			return false, nil, false
		}
		n := int(data[i])<<8 | int(data[i+1]) - 2
		i += 2
		if n < 0 || i+n > len(data) {
			return false, nil, false
		}
		seg := data[i : i+n]
		switch marker {
		case 0xc0, 0xc1, 0xc2: // SOF0 baseline, SOF1 extended, SOF2 progressive
			// Precision, height (2), width (2), component count, then
			// for each: identifier, sampling factors, quantization table.
			if len(seg) < 6 || seg[5] < 1 || len(seg) < 6+3*int(seg[5]) {
				return false, nil, false
			}
			for c := 0; c < int(seg[5]); c++ {
				f := seg[6+3*c+1]
				if f>>4 < 1 || f&0x0f < 1 {
					return false, nil, false
				}
				hv = append(hv, f)
			}
			return marker == 0xc2, hv, true
		case 0xda: // SOS before any frame
			return false, nil, false
		}
		i += n
	}
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
