package imagecheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"testing"
)

func encode(t testing.TB, f func(*bytes.Buffer, image.Image) error, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f(&buf, image.NewNRGBA(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pngHeader is a PNG whose header says w×h and that holds no pixels.
func pngHeader(w, h uint32) []byte {
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6
	out := binary.BigEndian.AppendUint32([]byte("\x89PNG\r\n\x1a\n"), 13)
	chunk := append([]byte("IHDR"), ihdr...)
	return binary.BigEndian.AppendUint32(append(out, chunk...), crc32.ChecksumIEEE(chunk))
}

func TestCheck(t *testing.T) {
	pngf := func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) }
	jpegf := func(b *bytes.Buffer, m image.Image) error { return jpeg.Encode(b, m, nil) }
	giff := func(b *bytes.Buffer, m image.Image) error { return gif.Encode(b, m, nil) }
	tests := []struct {
		name      string
		data      []byte
		maxPixels int64
		mime      string
		w, h      int
		err       error
	}{
		{"png", encode(t, pngf, 30, 20), 0, "image/png", 30, 20, nil},
		{"jpeg", encode(t, jpegf, 16, 9), 0, "image/jpeg", 16, 9, nil},
		{"gif", encode(t, giff, 5, 7), 0, "image/gif", 5, 7, nil},
		{"exactly the limit", encode(t, pngf, 10, 10), 100, "image/png", 10, 10, nil},
		{"one pixel over a limit", encode(t, pngf, 10, 11), 100, "", 0, 0, ErrTooManyPixels},
		{"a bomb's header over the default", pngHeader(10_000, 10_000), 0, "", 0, 0, ErrTooManyPixels},
		{"text", []byte("hello, world"), 0, "", 0, 0, ErrNotImage},
		{"empty", nil, 0, "", 0, 0, ErrNotImage},
		{"damaged", encode(t, pngf, 4, 4)[:12], 0, "", 0, 0, ErrDamaged},
		{"no pixels", pngHeader(0, 5), 0, "", 0, 0, ErrDamaged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := Check(tt.data, tt.maxPixels)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Check: %v; want %v", err, tt.err)
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Detail == "" {
					t.Errorf("%v is not an *Error with a detail", err)
				}
				return
			}
			if info.MIME != tt.mime || info.Width != tt.w || info.Height != tt.h {
				t.Errorf("Check = %+v; want %s %dx%d", info, tt.mime, tt.w, tt.h)
			}
		})
	}
}

// Whatever the bytes, Check answers without panicking, and what it
// accepts has pixels within the limit.
func FuzzCheck(f *testing.F) {
	f.Add(pngHeader(3, 3))
	f.Add(encode(f, func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) }, 2, 2))
	f.Add([]byte("GIF89a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Check(data, 1_000_000)
		if err != nil {
			return
		}
		if info.Width <= 0 || info.Height <= 0 || int64(info.Width)*int64(info.Height) > 1_000_000 || info.MIME == "" {
			t.Fatalf("accepted %+v", info)
		}
	})
}
