package fetch

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/task"
)

// webp1x1 is a 1x1 lossless WebP (Go cannot encode WebP).
var webp1x1 = []byte{
	0x52, 0x49, 0x46, 0x46, 0x1a, 0x00, 0x00, 0x00, 0x57, 0x45, 0x42, 0x50, 0x56, 0x50, 0x38, 0x4c,
	0x0d, 0x00, 0x00, 0x00, 0x2f, 0x00, 0x00, 0x00, 0x10, 0x07, 0x10, 0x11, 0x11, 0x88, 0x88, 0xfe,
	0x07, 0x00,
}

func encoded(t *testing.T, format string, w, h int) []byte {
	t.Helper()
	img := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.Black, color.White})
	var buf bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&buf, img)
	case "jpeg":
		err = jpeg.Encode(&buf, img, nil)
	case "gif":
		err = gif.Encode(&buf, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bomb is a tiny PNG whose header claims width x height pixels.
func bomb(t *testing.T, width, height uint32) []byte {
	t.Helper()
	b := encoded(t, "png", 1, 1)
	// IHDR data starts after the 8-byte signature, 4-byte length and 4-byte type.
	binary.BigEndian.PutUint32(b[16:20], width)
	binary.BigEndian.PutUint32(b[20:24], height)
	binary.BigEndian.PutUint32(b[29:33], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// server serves the given files by path; "/redirect/N" redirects N times
// then serves /ok.png; "/slow" never answers in time.
func server(t *testing.T, files map[string][]byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/redirect/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/redirect/"))
			if n <= 1 {
				http.Redirect(w, r, "/ok.png", http.StatusFound)
				return
			}
			http.Redirect(w, r, fmt.Sprintf("/redirect/%d", n-1), http.StatusFound)
			return
		case r.URL.Path == "/to-ftp":
			http.Redirect(w, r, "ftp://example.com/a.png", http.StatusFound)
			return
		case r.URL.Path == "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
			return
		case r.URL.Path == "/chunked-big":
			f := w.(http.Flusher)
			for i := 0; i < 4; i++ {
				_, _ = w.Write(bytes.Repeat([]byte{0x89}, 1024))
				f.Flush()
			}
			return
		}
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func open() Options { return Options{Policy: egress.Policy{AllowPrivate: true}} }

func TestFetchFormats(t *testing.T) {
	srv := server(t, map[string][]byte{
		"/a.png":  encoded(t, "png", 30, 20),
		"/b.jpg":  encoded(t, "jpeg", 16, 48),
		"/c.gif":  encoded(t, "gif", 7, 9),
		"/d.webp": webp1x1,
	})
	f := New(open())
	srcs, err := f.Fetch(context.Background(), []string{srv.URL + "/a.png", srv.URL + "/b.jpg", srv.URL + "/c.gif", srv.URL + "/d.webp"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		mime string
		w, h int
	}{{"image/png", 30, 20}, {"image/jpeg", 16, 48}, {"image/gif", 7, 9}, {"image/webp", 1, 1}}
	for i, w := range want {
		s := srcs[i]
		if s.Index != i || s.MIME != w.mime || s.Width != w.w || s.Height != w.h {
			t.Errorf("source %d: %+v; want %+v", i, s, w)
		}
		img, err := s.Decode()
		if err != nil || img.Bounds().Dx() != w.w {
			t.Errorf("source %d decode: %v", i, err)
		}
	}
}

func TestFetchFailures(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3<<10)
	srv := server(t, map[string][]byte{
		"/ok.png":    encoded(t, "png", 4, 4),
		"/page.html": []byte("<!doctype html><html><body>not an image</body></html>"),
		"/big.png":   append(encoded(t, "png", 2, 2), big...),
		"/bomb.png":  bomb(t, 100_000, 100_000),
		"/wide.png":  encoded(t, "png", 3000, 3000),
		"/broken":    []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR garbage"),
		"/svg":       []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`),
	})
	small := open()
	small.MaxBytes = 1 << 10
	tests := []struct {
		name string
		opts Options
		urls []string
		code apperr.Code
		msg  string
	}{
		{"loopback refused by default", Options{}, []string{srv.URL + "/ok.png"}, task.SourceFetchFailed, "image_urls[0] could not be fetched: its address is not allowed"},
		{"html", open(), []string{srv.URL + "/page.html"}, task.InvalidSourceImage, "not a PNG, JPEG, WebP or GIF image (got text/html)"},
		{"svg", open(), []string{srv.URL + "/svg"}, task.InvalidSourceImage, "not a PNG, JPEG, WebP or GIF"},
		{"oversized with Content-Length", small, []string{srv.URL + "/big.png"}, task.InvalidSourceImage, "larger than the"},
		{"oversized, chunked", small, []string{srv.URL + "/chunked-big"}, task.InvalidSourceImage, "larger than the"},
		{"decompression bomb", open(), []string{srv.URL + "/bomb.png"}, task.InvalidSourceImage, "100000x100000 pixels; the limit is 50 megapixels"},
		{"over the megapixel cap", Options{Policy: egress.Policy{AllowPrivate: true}, MaxPixels: 1_000_000}, []string{srv.URL + "/wide.png"}, task.InvalidSourceImage, "3000x3000"},
		{"damaged", open(), []string{srv.URL + "/broken"}, task.InvalidSourceImage, "could not be decoded"},
		{"404 names its position", open(), []string{srv.URL + "/ok.png", srv.URL + "/missing.png"}, task.SourceFetchFailed, "image_urls[1] could not be fetched: the server answered HTTP 404"},
		{"three redirects are fine", open(), []string{srv.URL + "/redirect/3"}, "", ""},
		{"four are too many", open(), []string{srv.URL + "/redirect/4"}, task.SourceFetchFailed, "too many redirects"},
		{"redirect to ftp", open(), []string{srv.URL + "/to-ftp"}, task.SourceFetchFailed, "not http or https"},
		{"timeout", Options{Policy: egress.Policy{AllowPrivate: true}, Timeout: 200 * time.Millisecond}, []string{srv.URL + "/slow"}, task.SourceFetchFailed, "did not answer in time"},
		{"total cap", Options{Policy: egress.Policy{AllowPrivate: true}, MaxTotalBytes: 4 << 10}, []string{srv.URL + "/big.png", srv.URL + "/big.png"}, task.InvalidSourceImage, "total limit"},
		{"unresolvable host", open(), []string{"http://no-such-host.invalid/a.png"}, task.SourceFetchFailed, "could not be resolved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts).Fetch(context.Background(), tt.urls)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				return
			}
			e, ok := apperr.As(err)
			if !ok || e.Code != tt.code || !strings.Contains(e.Message, tt.msg) {
				t.Fatalf("Fetch = %v; want %s with %q", err, tt.code, tt.msg)
			}
			if strings.Contains(e.Message, "127.0.0.1") {
				t.Errorf("message %q leaks the address", e.Message)
			}
		})
	}
}

// TestRedirectToARefusedAddress: the first hop is on an allowed address, the
// redirect points at one the policy refuses; the connection to it is never
// made. (Both are loopback addresses on this machine; the policy allows only
// the first.)
func TestRedirectToARefusedAddress(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 unavailable: %v", err)
	}
	reached := make(chan struct{}, 1)
	innerSrv := &httptest.Server{Listener: inner, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		_, _ = w.Write(encoded(t, "png", 2, 2))
	})}}
	innerSrv.Start()
	defer innerSrv.Close()
	outer := httptest.NewServer(http.RedirectHandler(innerSrv.URL+"/secret.png", http.StatusFound))
	defer outer.Close()

	outerPort := outer.Listener.Addr().(*net.TCPAddr).Port
	innerPort := inner.Addr().(*net.TCPAddr).Port
	policy := egress.Policy{Ports: []int{outerPort, innerPort}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	_, err = New(Options{Policy: policy}).Fetch(context.Background(), []string{outer.URL + "/a.png"})
	e, ok := apperr.As(err)
	if !ok || e.Code != task.SourceFetchFailed || !strings.Contains(e.Message, "address is not allowed") {
		t.Fatalf("Fetch = %v; want the redirect refused", err)
	}
	select {
	case <-reached:
		t.Error("the refused server was reached")
	default:
	}
	// With the second address allowed too, the same fetch succeeds.
	policy.Allow = append(policy.Allow, netip.MustParsePrefix("127.0.0.2/32"))
	if _, err := New(Options{Policy: policy}).Fetch(context.Background(), []string{outer.URL + "/a.png"}); err != nil {
		t.Errorf("allowed redirect: %v", err)
	}
}

// TestAllowPrivateKeepsTheContentRules: lifting the address rules never
// lifts the size, type and pixel checks.
func TestAllowPrivateKeepsTheContentRules(t *testing.T) {
	srv := server(t, map[string][]byte{"/bomb.png": bomb(t, 50_000, 50_000), "/page.html": []byte("<html></html>")})
	for _, p := range []string{"/bomb.png", "/page.html"} {
		if _, err := New(open()).Fetch(context.Background(), []string{srv.URL + p}); apperr.CodeOf(err) != task.InvalidSourceImage {
			t.Errorf("%s with AllowPrivate: %v", p, err)
		}
	}
}

func TestOrderIsKept(t *testing.T) {
	files := map[string][]byte{}
	var urls []string
	srv := server(t, files)
	for i := 0; i < 10; i++ {
		p := fmt.Sprintf("/%d.png", i)
		files[p] = encoded(t, "png", i+1, 1)
		urls = append(urls, srv.URL+p)
	}
	srcs, err := New(open()).Fetch(context.Background(), urls)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range srcs {
		if s.Index != i || s.Width != i+1 {
			t.Errorf("source %d: index %d width %d", i, s.Index, s.Width)
		}
	}
}

// The total of a task's source bytes is counted as they arrive: once it is
// over the limit every download stops, instead of each being read to its end
// before the total is checked (ten 20 MB images were read in full against a
// 100 MB total).
func TestTotalStopsDownloadsEarly(t *testing.T) {
	const chunks, chunkSize = 40, 32 << 10 // 1.25 MB an image, 2 s to serve
	var mu sync.Mutex
	finished := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		chunk := append(encoded(t, "png", 1, 1), make([]byte, chunkSize)...)[:chunkSize]
		for i := 0; i < chunks; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(50 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		mu.Lock()
		finished++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	opts := open()
	opts.MaxTotalBytes = 1 << 20 // less than one image
	urls := []string{srv.URL + "/a.png", srv.URL + "/b.png", srv.URL + "/c.png"}
	_, err := New(opts).Fetch(context.Background(), urls)
	if e, ok := apperr.As(err); !ok || e.Code != task.InvalidSourceImage || !strings.Contains(e.Message, "total limit") {
		t.Fatalf("Fetch = %v; want the total limit", err)
	}
	srv.CloseClientConnections()
	time.Sleep(100 * time.Millisecond) // let the handlers see the closed connections
	mu.Lock()
	defer mu.Unlock()
	if finished != 0 {
		t.Errorf("%d of 3 images were served to the end; the fetch should have stopped reading at the total", finished)
	}
}

// bomb16 is a tiny 16-bit RGBA PNG whose header claims width x height: 8
// bytes a pixel once decoded.
func bomb16(t *testing.T, width, height uint32) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewNRGBA64(image.Rect(0, 0, 1, 1))); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if b[24] != 16 || b[25] != 6 {
		t.Fatalf("not a 16-bit RGBA PNG: depth %d, color type %d", b[24], b[25])
	}
	binary.BigEndian.PutUint32(b[16:20], width)
	binary.BigEndian.PutUint32(b[20:24], height)
	binary.BigEndian.PutUint32(b[29:33], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// What a task's source images take once decoded is bounded, from their
// headers, before any is decoded: ten 393 KB 16-bit PNGs of 7071x7071 once
// took a worker to 4 GB. Each image here is under the megapixel cap.
func TestDecodedSizeBound(t *testing.T) {
	srv := server(t, map[string][]byte{
		"/16bit.png": bomb16(t, 3000, 3000), // 72 MB decoded
		"/small.png": encoded(t, "png", 100, 100),
	})
	urls := func(n int, path string) []string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, srv.URL+path)
		}
		return out
	}
	tests := []struct {
		name string
		urls []string
		max  int64
		ok   bool
	}{
		{"ten 16-bit 9 MP images: 720 MB", urls(10, "/16bit.png"), 0, false},
		{"five of them: 360 MB", urls(5, "/16bit.png"), 0, true},
		{"a tighter bound", urls(2, "/16bit.png"), 100 << 20, false},
		{"small images", urls(10, "/small.png"), 1 << 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := open()
			o.MaxDecoded = tt.max
			got, err := New(o).Fetch(context.Background(), tt.urls)
			if tt.ok {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if got[0].DecodedBytes <= 0 {
					t.Errorf("decoded size not reported: %+v", got[0].DecodedBytes)
				}
				return
			}
			e, ok := apperr.As(err)
			if !ok || e.Code != task.InvalidSourceImage || !strings.Contains(e.Message, "once decoded") {
				t.Fatalf("Fetch = %v; want invalid_source_image over the decoded bound", err)
			}
		})
	}
}

// flatJPEG is a real JPEG of one flat grey, w×h pixels, built by hand (Go's
// encoder writes only baseline JPEGs, and the repository holds no binary
// files): one component per sampling byte of hv (0x11 for 1×1, 0x22 for
// 2×2), all coefficients zero. A progressive one (SOF2) has a single DC
// scan of every component, which is enough for image/jpeg to allocate the
// coefficients of every component; a baseline one (SOF0) has one
// sequential scan. Before the frame come extra, then a DQT.
func flatJPEG(t *testing.T, w, h int, hv []byte, progressive bool, extra ...[]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	seg := func(marker byte, payload ...byte) {
		b.Write([]byte{0xff, marker, byte((len(payload) + 2) >> 8), byte(len(payload) + 2)})
		b.Write(payload)
	}
	b.Write([]byte{0xff, 0xd8}) // SOI
	for _, e := range extra {
		b.Write(e)
	}
	seg(0xdb, append([]byte{0}, bytes.Repeat([]byte{1}, 64)...)...) // DQT 0: all ones
	sof := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(len(hv))}
	for i, s := range hv {
		sof = append(sof, byte(i+1), s, 0)
	}
	marker := byte(0xc0)
	if progressive {
		marker = 0xc2
	}
	seg(marker, sof...)
	// Huffman tables of one code each ("0"): DC difference 0, AC end of block.
	oneCode := func(class byte) []byte { return append(append([]byte{class, 1}, make([]byte, 15)...), 0) }
	seg(0xc4, oneCode(0x00)...)
	if !progressive {
		seg(0xc4, oneCode(0x10)...)
	}
	sos := []byte{byte(len(hv))}
	for i := range hv {
		sos = append(sos, byte(i+1), 0)
	}
	if progressive {
		sos = append(sos, 0, 0, 0) // DC only, no successive approximation
	} else {
		sos = append(sos, 0, 63, 0)
	}
	seg(0xda, sos...)
	// One bit a block (a DC difference of 0), two in a baseline scan (and
	// an end of block), over the interleaved scan's MCUs.
	bits := 0
	for _, u := range jpegBlocks(w, h, hv) {
		bits += u
	}
	if !progressive {
		bits *= 2
	}
	data := make([]byte, (bits+7)/8)
	if r := bits % 8; r != 0 {
		data[len(data)-1] = byte(0xff >> r) // pad with ones
	}
	b.Write(data)
	b.Write([]byte{0xff, 0xd9}) // EOI
	return b.Bytes()
}

// jpegBlocks is the 8×8 blocks of each component image/jpeg allocates for
// a frame of w×h with these sampling factors: the image in MCUs (8·h0 ×
// 8·v0 pixels, h0 and v0 the first component's; 1×1 when there is one
// component), h×v blocks of each component in each.
func jpegBlocks(w, h int, hv []byte) []int {
	h0, v0 := int(hv[0]>>4), int(hv[0]&15)
	if len(hv) == 1 {
		h0, v0 = 1, 1
	}
	mxx, myy := (w+8*h0-1)/(8*h0), (h+8*v0-1)/(8*v0)
	var out []int
	for _, s := range hv {
		ch, cv := int(s>>4), int(s&15)
		if len(hv) == 1 {
			ch, cv = 1, 1
		}
		out = append(out, mxx*myy*ch*cv)
	}
	return out
}

var (
	grey   = []byte{0x11}
	yuv444 = []byte{0x11, 0x11, 0x11}
	yuv420 = []byte{0x22, 0x11, 0x11}
)

// A progressive JPEG's decode holds every component's DCT coefficients for
// the whole image besides its pixels (image/jpeg's progCoeffs: 64 int32 an
// 8×8 block): ten 6400×6400 progressive JPEGs once peaked at 1.28 GB
// against 444 MB for the same pixels as baseline JPEGs. Its estimate is the
// baseline twin's plus exactly those coefficients.
func TestProgressiveJPEGEstimate(t *testing.T) {
	for _, tt := range []struct {
		name string
		w, h int
		hv   []byte
	}{
		{"grey", 1000, 600, grey},
		{"4:4:4", 1001, 599, yuv444},
		{"4:2:0", 1001, 599, yuv420},
		{"grey with odd sampling factors", 17, 9, []byte{0x21}}, // image/jpeg takes one component as 1×1
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, prog := flatJPEG(t, tt.w, tt.h, tt.hv, false), flatJPEG(t, tt.w, tt.h, tt.hv, true)
			srv := server(t, map[string][]byte{"/base.jpg": base, "/prog.jpg": prog})
			srcs, err := New(open()).Fetch(context.Background(), []string{srv.URL + "/base.jpg", srv.URL + "/prog.jpg"})
			if err != nil {
				t.Fatal(err)
			}
			var coeffs int64
			for _, n := range jpegBlocks(tt.w, tt.h, tt.hv) {
				coeffs += int64(n) * 64 * 4
			}
			if got := srcs[1].DecodedBytes - srcs[0].DecodedBytes; got != coeffs {
				t.Errorf("progressive estimate %d - baseline %d = %d; want the coefficients, %d", srcs[1].DecodedBytes, srcs[0].DecodedBytes, got, coeffs)
			}
			for i, s := range srcs {
				if _, err := s.Decode(); err != nil {
					t.Errorf("source %d does not decode: %v", i, err)
				}
			}
		})
	}
}

// The estimate covers what image/jpeg really allocates decoding a
// progressive JPEG (measured on this process's heap), where the pixels
// alone were a fifth of it for grey.
func TestProgressiveJPEGEstimateCoversTheDecode(t *testing.T) {
	for _, tt := range []struct {
		name string
		hv   []byte
	}{{"grey", grey}, {"4:4:4", yuv444}, {"4:2:0", yuv420}} {
		t.Run(tt.name, func(t *testing.T) {
			srv := server(t, map[string][]byte{"/p.jpg": flatJPEG(t, 1500, 1500, tt.hv, true)})
			srcs, err := New(open()).Fetch(context.Background(), []string{srv.URL + "/p.jpg"})
			if err != nil {
				t.Fatal(err)
			}
			srv.Close()
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			img, err := srcs[0].Decode()
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			runtime.KeepAlive(img)
			// The decoder's own state (its Huffman tables, its reader) is a
			// few tens of KB beyond the estimate; other goroutines may
			// allocate meanwhile.
			allocated := int64(after.TotalAlloc - before.TotalAlloc)
			if est := srcs[0].DecodedBytes; est < allocated*98/100 {
				t.Errorf("estimated %d bytes; decoding allocated %d (%.1f bytes a pixel)", est, allocated, float64(allocated)/1500/1500)
			}
		})
	}
}

// A task's progressive JPEGs are refused over the decoded bound where the
// same pixels as baseline JPEGs fit.
func TestProgressiveJPEGOverTheBound(t *testing.T) {
	srv := server(t, map[string][]byte{
		"/base.jpg": flatJPEG(t, 1000, 1000, grey, false), // 1 MB of pixels
		"/prog.jpg": flatJPEG(t, 1000, 1000, grey, true),  // and 4 MB of coefficients
		// Extraneous bytes and fill bytes before the frame, which image/jpeg
		// skips: the frame is still found.
		"/junk.jpg": flatJPEG(t, 1000, 1000, grey, true, []byte{0xff, 0xe0, 0, 4, 'h', 'i'}, []byte{1, 2, 3}, []byte{0xff, 0xff}),
	})
	ten := func(p string) []string {
		var out []string
		for i := 0; i < 10; i++ {
			out = append(out, srv.URL+p)
		}
		return out
	}
	o := open()
	o.MaxDecoded = 16 << 20
	if _, err := New(o).Fetch(context.Background(), ten("/base.jpg")); err != nil {
		t.Fatalf("ten baseline JPEGs, 10 MB decoded: %v", err)
	}
	for _, p := range []string{"/prog.jpg", "/junk.jpg"} {
		_, err := New(o).Fetch(context.Background(), ten(p))
		e, ok := apperr.As(err)
		if !ok || e.Code != task.InvalidSourceImage || !strings.Contains(e.Message, "once decoded") || !strings.Contains(e.Message, "progressive") {
			t.Errorf("ten progressive JPEGs (%s), 50 MB decoded: %v; want invalid_source_image over the decoded bound, saying why", p, err)
		}
	}
}

// Where the frame cannot be read, a progressive JPEG is assumed, with the
// largest coefficients of any frame image/jpeg accepts.
func TestJPEGCoefficientBound(t *testing.T) {
	const w, h = 1001, 599
	bound := jpegCoefficientBytes([]byte{0xff, 0xd8, 0xff}, image.Config{Width: w, Height: h})
	for _, hv := range [][]byte{grey, yuv444, yuv420, {0x22, 0x11, 0x11, 0x22}, {0x11, 0x11, 0x11, 0x11}, {0x42, 0x11, 0x11}, {0x41, 0x11, 0x11}, {0x12, 0x11, 0x11}} {
		prog := flatJPEG(t, w, h, hv, true)
		if _, err := jpeg.DecodeConfig(bytes.NewReader(prog)); err != nil { // the frame is one image/jpeg accepts
			t.Fatalf("sampling %x: %v", hv, err)
		}
		if exact := jpegCoefficientBytes(prog, image.Config{Width: w, Height: h}); exact <= 0 || exact > bound {
			t.Errorf("sampling %x: %d bytes of coefficients; the bound is %d", hv, exact, bound)
		}
	}
}
