package procedural

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

func models(t testing.TB) (std, pro catalog.Model) {
	t.Helper()
	c, err := catalog.New("lumen")
	if err != nil {
		t.Fatal(err)
	}
	std, _ = c.ByTier(catalog.Standard)
	pro, _ = c.ByTier(catalog.Pro)
	return std, pro
}

func request(t testing.TB, m catalog.Model, prompt, ratio, size string) imagegen.Request {
	t.Helper()
	d, ok := m.Dimensions(ratio, size)
	if !ok {
		t.Fatalf("no size for %s %s %s", m.ID, ratio, size)
	}
	return imagegen.Request{Model: m, Prompt: prompt, AspectRatio: ratio, ImageSize: size, Size: d}
}

func generate(t testing.TB, g *Generator, req imagegen.Request) imagegen.Image {
	t.Helper()
	imgs, err := g.Generate(context.Background(), req, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 {
		t.Fatalf("%d images", len(imgs))
	}
	return imgs[0]
}

func TestExactSizes(t *testing.T) {
	t.Parallel()
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	std, pro := models(t)
	type combo struct {
		m           catalog.Model
		ratio, size string
	}
	var combos []combo
	for _, r := range catalog.AspectRatios {
		combos = append(combos, combo{std, r, "1K"}, combo{pro, r, "1K"})
	}
	combos = append(combos, combo{pro, "16:9", "2K"}, combo{pro, "9:16", "4K"})
	for _, c := range combos {
		t.Run(c.m.ID+" "+c.ratio+" "+c.size, func(t *testing.T) {
			t.Parallel()
			want, _ := c.m.Dimensions(c.ratio, c.size)
			img := generate(t, g, request(t, c.m, "size check "+c.ratio, c.ratio, c.size))
			cfg, format, err := image.DecodeConfig(bytes.NewReader(img.Data))
			if err != nil || format != "png" {
				t.Fatalf("not a PNG: %v %s", err, format)
			}
			if cfg.Width != want.Width || cfg.Height != want.Height || img.Width != want.Width || img.Height != want.Height || img.MIME != "image/png" {
				t.Errorf("got %dx%d (%dx%d reported, %s); want %v", cfg.Width, cfg.Height, img.Width, img.Height, img.MIME, want)
			}
		})
	}
}

func TestDeterministicAndPromptSeeded(t *testing.T) {
	t.Parallel()
	g, _ := New(Options{})
	other, _ := New(Options{}) // its own cache: the second picture is painted again
	std, pro := models(t)
	a1 := generate(t, g, request(t, std, "a red fox", "1:1", "1K"))
	a2 := generate(t, other, request(t, std, "a red fox", "1:1", "1K"))
	if !bytes.Equal(a1.Data, a2.Data) {
		t.Error("same request gave different bytes")
	}
	if a3 := generate(t, g, request(t, std, "a red fox", "1:1", "1K")); !bytes.Equal(a1.Data, a3.Data) {
		t.Error("a cached picture differs")
	}
	for name, req := range map[string]imagegen.Request{
		"other prompt": request(t, std, "a blue whale", "1:1", "1K"),
		"other model":  request(t, pro, "a red fox", "1:1", "1K"),
	} {
		if b := generate(t, g, req); bytes.Equal(a1.Data, b.Data) {
			t.Errorf("%s gave the same bytes", name)
		}
	}
}

// A picture, not noise: it compresses far below its raw size and holds the
// words of the prompt as near-white caption pixels.
func TestLooksLikeAPicture(t *testing.T) {
	t.Parallel()
	g, _ := New(Options{})
	std, _ := models(t)
	img := generate(t, g, request(t, std, "lighthouse at dusk", "1:1", "1K"))
	if raw := 1024 * 1024 * 4; len(img.Data) > raw/8 {
		t.Errorf("PNG is %d bytes, more than 1/8 of raw %d: looks like noise", len(img.Data), raw)
	}
	decoded, err := png.Decode(bytes.NewReader(img.Data))
	if err != nil {
		t.Fatal(err)
	}
	caption := 0
	for y := 0; y < 1024; y++ {
		for x := 0; x < 1024; x++ {
			r, gg, b, _ := decoded.At(x, y).RGBA()
			if r>>8 >= 240 && gg>>8 >= 240 && b>>8 >= 235 {
				caption++
			}
		}
	}
	if caption < 2000 {
		t.Errorf("only %d caption-coloured pixels: the prompt is not drawn", caption)
	}
	blank := generate(t, g, request(t, std, "\u200b", "1:1", "1K")) // no printable words
	if bytes.Equal(blank.Data, img.Data) {
		t.Error("caption does not depend on the prompt")
	}
}

func TestEditComposesSources(t *testing.T) {
	t.Parallel()
	g, _ := New(Options{})
	std, _ := models(t)
	src := image.NewRGBA(image.Rect(0, 0, 320, 180))
	for y := 0; y < 180; y++ {
		for x := 0; x < 320; x++ {
			src.Set(x, y, color.RGBA{uint8(x), uint8(y), 200, 255})
		}
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, src)
	source := imagegen.Source{Data: buf.Bytes(), MIME: "image/png", Width: 320, Height: 180}
	req := request(t, std, "make it sunset", "16:9", "1K")
	req.Sources = []imagegen.Source{source, source}
	edit := generate(t, g, req)
	plain := generate(t, g, request(t, std, "make it sunset", "16:9", "1K"))
	if bytes.Equal(edit.Data, plain.Data) {
		t.Error("edit ignores its sources")
	}
	if cfg, _, _ := image.DecodeConfig(bytes.NewReader(edit.Data)); cfg.Width != 1344 || cfg.Height != 768 {
		t.Errorf("edit is %dx%d", cfg.Width, cfg.Height)
	}
	fresh, _ := New(Options{})
	if again := generate(t, fresh, req); !bytes.Equal(edit.Data, again.Data) {
		t.Error("edit is not deterministic")
	}

	req.Sources = []imagegen.Source{{Index: 3, Data: []byte("\x89PNG\r\n\x1a\nbroken"), MIME: "image/png", Width: 1, Height: 1}}
	_, err := g.Generate(context.Background(), req, func(int) {})
	if e, ok := apperr.As(err); !ok || e.Code != task.InvalidSourceImage || !bytes.Contains([]byte(e.Message), []byte("image_urls[3]")) {
		t.Errorf("broken source: %v", err)
	}
}

func TestProgressAndDelay(t *testing.T) {
	t.Parallel()
	g, _ := New(Options{Delay: 80 * time.Millisecond})
	std, pro := models(t)
	for _, tc := range []struct {
		m    catalog.Model
		want time.Duration
	}{{std, 80 * time.Millisecond}, {pro, 160 * time.Millisecond}} {
		var seen []int
		start := time.Now()
		if _, err := g.Generate(context.Background(), request(t, tc.m, "p", "1:1", "1K"), func(p int) { seen = append(seen, p) }); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < tc.want {
			t.Errorf("%s took %v; want at least %v", tc.m.ID, took, tc.want)
		}
		if len(seen) < 3 {
			t.Fatalf("%d progress reports; want at least 3", len(seen))
		}
		for i, p := range seen {
			if p <= 0 || p >= 100 || (i > 0 && p <= seen[i-1]) {
				t.Fatalf("progress %v: want strictly increasing values in 1..99", seen)
			}
		}
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	g, _ := New(Options{Delay: 10 * time.Second})
	std, _ := models(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := g.Generate(ctx, request(t, std, "p", "1:1", "1K"), func(int) {})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Generate = %v after %v; want a prompt deadline error", err, time.Since(start))
	}
}

// BenchmarkGenerate1K paints a new 1K picture each time (a different prompt
// each time, so the cache never answers).
func BenchmarkGenerate1K(b *testing.B) {
	g, _ := New(Options{})
	std, _ := models(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := request(b, std, "a lighthouse on a cliff at dusk "+strconv.Itoa(i), "1:1", "1K")
		if _, err := g.Generate(context.Background(), req, func(int) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerate1KRepeated asks for the same picture each time: what a
// load test with a fixed prompt costs the generator.
func BenchmarkGenerate1KRepeated(b *testing.B) {
	g, _ := New(Options{})
	std, _ := models(b)
	req := request(b, std, "a lighthouse on a cliff at dusk", "1:1", "1K")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Generate(context.Background(), req, func(int) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// countingFace counts glyph measurements.
type countingFace struct {
	font.Face
	n int
}

func (c *countingFace) GlyphAdvance(r rune) (fixed.Int26_6, bool) {
	c.n++
	return c.Face.GlyphAdvance(r)
}

// The caption's cost grows with the prompt's length, not its square: a
// 10,000-character word once took 2.4 s of CPU per task. Measured in glyph
// measurements, so the test does not depend on the machine's speed.
func TestCaptionLinearInWordLength(t *testing.T) {
	t.Parallel()
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	face, err := opentype.NewFace(g.font, &opentype.FaceOptions{Size: 64, DPI: 72})
	if err != nil {
		t.Fatal(err)
	}
	defer face.Close()
	for _, n := range []int{100, 1_000, 10_000} {
		for name, prompt := range map[string]string{
			"one long word":          strings.Repeat("x", n),
			"a long word after some": "a lighthouse " + strings.Repeat("w", n),
			"many short words":       strings.Repeat("ab ", n/3),
		} {
			cf := &countingFace{Face: face}
			lines := wrap(cf, words(prompt), fixed.I(900), 3)
			if len(lines) == 0 || len(lines) > 3 {
				t.Errorf("%s (%d): %d lines", name, n, len(lines))
			}
			for _, l := range lines {
				if font.MeasureString(face, l) > fixed.I(900) {
					t.Errorf("%s (%d): a line of %d characters is wider than the caption", name, n, len(l))
				}
			}
			if limit := 6*n + 1000; cf.n > limit {
				t.Errorf("%s of %d characters: %d glyph measurements; want at most %d (linear)", name, n, cf.n, limit)
			}
		}
	}
}

// The decoded bytes of the sources all generations hold at once stay within
// the process's budget: a task that would go over waits for the memory,
// taken from the headers before decoding; one that could never fit fails at
// once with invalid_source_image.
func TestDecodeBudget(t *testing.T) {
	t.Parallel()
	std, _ := models(t)
	src := image.NewRGBA(image.Rect(0, 0, 64, 64))
	var buf bytes.Buffer
	_ = png.Encode(&buf, src)
	withSources := func(prompt string, decoded ...int64) imagegen.Request {
		req := request(t, std, prompt, "1:1", "1K")
		for i, d := range decoded {
			req.Sources = append(req.Sources, imagegen.Source{Index: i, Data: buf.Bytes(), MIME: "image/png", Width: 64, Height: 64, DecodedBytes: d})
		}
		return req
	}
	g, _ := New(Options{DecodeBudget: 10 << 20})

	// Never fits: refused before anything is decoded or waited for.
	_, err := g.Generate(context.Background(), withSources("too big", 6<<20, 6<<20), func(int) {})
	if e, ok := apperr.As(err); !ok || e.Code != task.InvalidSourceImage || !strings.Contains(e.Message, "10 MB") {
		t.Fatalf("sources over the budget: %v; want invalid_source_image naming the budget", err)
	}

	// Fits, but not next to memory already held: it waits for it.
	if err := g.budget.Acquire(context.Background(), 8<<20); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Generate(context.Background(), withSources("waits", 3<<20), func(int) {})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("generated (%v) while the budget was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	g.budget.Release(8 << 20)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the budget was released")
	}
	// And gave its share back.
	if !g.budget.TryAcquire(10 << 20) {
		t.Error("the budget was not given back whole")
	}
}
