// Package procedural is Easel's built-in, offline image generator: it paints a
// deterministic picture seeded by the prompt and parameters (a gradient, a
// palette of translucent shapes and the prompt's words) at exactly the size
// the real model would produce. Editing composes the source images with a
// prompt-seeded duotone. The same request always gives the same bytes.
//
// Its simulated duration (EASEL_SIM_DELAY; twice as long for pro) makes
// progress visible in development; 0 for load tests.
package procedural

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode"

	lru "github.com/hashicorp/golang-lru/v2"
	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker/imagegen"
)

// Generator is the procedural generator.
type Generator struct {
	delay time.Duration
	// budget holds the decoded bytes of source images in use (budgetN at
	// most).
	budget  *semaphore.Weighted
	budgetN int64
	font    *opentype.Font
	encoder png.Encoder
	steps   int
	// renders bounds how many pictures are painted at once: painting is
	// CPU-bound, and a 4K canvas is 64 MB.
	renders chan struct{}
	// cache keeps recent pictures: the same request always gives the same
	// bytes, so a repeated one (a load test's) is painted once.
	cache *lru.Cache[[32]byte, picture]
	// inflight makes concurrent requests for one picture share its render.
	inflight singleflight.Group
}

// picture is an encoded picture and its digest.
type picture struct {
	data []byte
	sum  [32]byte
}

// New returns a generator whose standard-model generations take delay (pro:
// twice that).
func New(o Options) (*Generator, error) {
	if o.DecodeBudget <= 0 {
		o.DecodeBudget = DefaultDecodeBudget
	}
	f, err := opentype.Parse(gobold.TTF)
	if err != nil {
		return nil, fmt.Errorf("procedural: font: %w", err)
	}
	cache, err := lru.New[[32]byte, picture](64)
	if err != nil {
		return nil, err
	}
	return &Generator{
		delay:   o.Delay,
		font:    f,
		encoder: png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: &bufferPool{}},
		steps:   8,
		renders: make(chan struct{}, runtime.NumCPU()),
		cache:   cache,
		budget:  semaphore.NewWeighted(o.DecodeBudget),
		budgetN: o.DecodeBudget,
	}, nil
}

// Options are a generator's settings.
type Options struct {
	// Delay is how long a standard generation takes (a pro one twice
	// that), spread over its progress steps.
	Delay time.Duration
	// DecodeBudget bounds the decoded bytes of the source images all
	// generations of the process hold at once (0: DefaultDecodeBudget).
	DecodeBudget int64
}

// DefaultDecodeBudget is the decoded bytes of source images a generator
// holds at once unless Options.DecodeBudget says otherwise.
const DefaultDecodeBudget = 1 << 30

// Generate paints the image for req. progress receives percentages of the
// generation done (strictly increasing, below 100).
func (g *Generator) Generate(ctx context.Context, req imagegen.Request, progress func(pct int)) ([]imagegen.Image, error) {
	delay := g.delay
	if req.Model.Tier == catalog.Pro {
		delay *= 2
	}
	if req.Size.Width <= 0 || req.Size.Height <= 0 {
		return nil, fmt.Errorf("procedural: no output size for %s %s %s", req.Model.ID, req.AspectRatio, req.ImageSize)
	}
	// Simulated work, in steps, reporting progress after each.
	if delay > 0 {
		step := delay / time.Duration(g.steps)
		t := time.NewTimer(step)
		defer t.Stop()
		for i := 1; i <= g.steps; i++ {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.C:
			}
			progress(i * 100 / (g.steps + 1))
			t.Reset(step)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := identity(req)
	pic, ok := g.cache.Get(key)
	if !ok {
		v, err, _ := g.inflight.Do(string(key[:]), func() (any, error) {
			if pic, ok := g.cache.Get(key); ok {
				return pic, nil
			}
			// Shared by every caller: one caller's deadline must not fail
			// the others.
			pic, err := g.paint(context.WithoutCancel(ctx), req)
			if err != nil {
				return nil, err
			}
			g.cache.Add(key, pic)
			return pic, nil
		})
		if err != nil {
			return nil, err
		}
		pic = v.(picture)
	}
	return []imagegen.Image{{Data: pic.data, MIME: "image/png", Width: req.Size.Width, Height: req.Size.Height, SHA256: &pic.sum}}, nil
}

// paint decodes the sources, renders and encodes, at most NumCPU at once.
// Decoding happens inside the render slot, so decoded sources (bounded per
// task by the fetcher) are held by at most NumCPU tasks at a time.
func (g *Generator) paint(ctx context.Context, req imagegen.Request) (picture, error) {
	select {
	case g.renders <- struct{}{}:
	case <-ctx.Done():
		return picture{}, ctx.Err()
	}
	defer func() { <-g.renders }()
	// The decoded sources' memory is taken from the process's budget,
	// from their headers, before any is decoded. A task that could never
	// fit fails at once; one that must wait for others waits.
	var need int64
	for _, s := range req.Sources {
		need += s.DecodedBytes
	}
	if need > g.budgetN {
		return picture{}, apperr.New(task.InvalidSourceImage, fmt.Sprintf(
			"the source images decode to %d MB, more than the %d MB a worker decodes at once: send smaller or fewer images", need>>20, g.budgetN>>20))
	}
	if need > 0 {
		if err := g.budget.Acquire(ctx, need); err != nil {
			return picture{}, err
		}
		defer g.budget.Release(need)
	}
	var sources []image.Image
	for _, s := range req.Sources {
		img, err := s.Decode()
		if err != nil {
			return picture{}, err
		}
		sources = append(sources, img)
	}
	var buf bytes.Buffer
	if err := g.encoder.Encode(&buf, g.Render(req, sources)); err != nil {
		return picture{}, fmt.Errorf("procedural: encode: %w", err)
	}
	return picture{data: buf.Bytes(), sum: sha256.Sum256(buf.Bytes())}, nil
}

// identity is a digest of everything that defines the picture.
func identity(req imagegen.Request) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%dx%d\x00", req.Model.Tier, req.Prompt, req.AspectRatio, req.ImageSize, req.Size.Width, req.Size.Height)
	if req.Variant > 0 {
		// The first variant is the picture a request made before there
		// were variants.
		fmt.Fprintf(h, "variant %d\x00", req.Variant)
	}
	for _, s := range req.Sources {
		sum := sha256.Sum256(s.Data)
		h.Write(sum[:])
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// seed derives the picture's randomness from everything that defines it.
func seed(req imagegen.Request) *rand.Rand {
	sum := identity(req)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[0:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

// Render paints the picture for req (sources are its decoded source images).
func (g *Generator) Render(req imagegen.Request, sources []image.Image) *image.RGBA {
	rng := seed(req)
	w, h := req.Size.Width, req.Size.Height
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	pal := newPalette(rng)

	if len(sources) == 0 {
		gradient(dst, pal[0], pal[1], rng.Float64()*2*math.Pi)
		shapes(dst, rng, pal, 8+rng.IntN(8), 1.0)
	} else {
		compose(dst, sources, pal, rng)
		shapes(dst, rng, pal, 3+rng.IntN(4), 0.5)
	}
	g.caption(dst, req.Prompt, pal)
	return dst
}

// palette: five colours around a seeded hue.
type palette [5]color.RGBA

func newPalette(rng *rand.Rand) palette {
	base := rng.Float64()
	spread := 0.08 + rng.Float64()*0.25
	var p palette
	for i := range p {
		hue := math.Mod(base+float64(i)*spread, 1)
		sat := 0.45 + rng.Float64()*0.45
		light := 0.25 + rng.Float64()*0.5
		p[i] = hsl(hue, sat, light)
	}
	return p
}

func hsl(h, s, l float64) color.RGBA {
	c := (1 - math.Abs(2*l-1)) * s
	x := c * (1 - math.Abs(math.Mod(h*6, 2)-1))
	m := l - c/2
	var r, g, b float64
	switch int(h * 6) {
	case 0:
		r, g, b = c, x, 0
	case 1:
		r, g, b = x, c, 0
	case 2:
		r, g, b = 0, c, x
	case 3:
		r, g, b = 0, x, c
	case 4:
		r, g, b = x, 0, c
	default:
		r, g, b = c, 0, x
	}
	to8 := func(v float64) uint8 { return uint8(math.Round(math.Max(0, math.Min(1, v+m)) * 255)) }
	return color.RGBA{to8(r), to8(g), to8(b), 255}
}

// gradient fills dst with a linear gradient from a to b along angle.
func gradient(dst *image.RGBA, a, b color.RGBA, angle float64) {
	w, h := dst.Rect.Dx(), dst.Rect.Dy()
	cos, sin := math.Cos(angle), math.Sin(angle)
	// Project the corners to normalise t to 0..1.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range [][2]float64{{0, 0}, {float64(w), 0}, {0, float64(h)}, {float64(w), float64(h)}} {
		v := c[0]*cos + c[1]*sin
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	scale := 1 / (hi - lo)
	for y := 0; y < h; y++ {
		row := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
		t0 := (float64(y)*sin - lo) * scale
		dt := cos * scale
		for x := 0; x < w; x++ {
			t := t0 + float64(x)*dt
			row[4*x+0] = lerp8(a.R, b.R, t)
			row[4*x+1] = lerp8(a.G, b.G, t)
			row[4*x+2] = lerp8(a.B, b.B, t)
			row[4*x+3] = 255
		}
	}
}

func lerp8(a, b uint8, t float64) uint8 {
	return uint8(float64(a) + (float64(b)-float64(a))*t + 0.5)
}

// shapes draws n translucent circles, rings and triangles.
func shapes(dst *image.RGBA, rng *rand.Rand, pal palette, n int, scale float64) {
	w, h := float64(dst.Rect.Dx()), float64(dst.Rect.Dy())
	unit := math.Min(w, h)
	var z vector.Rasterizer
	for i := 0; i < n; i++ {
		c := pal[2+rng.IntN(3)]
		c.A = uint8(90 + rng.IntN(120))
		cx, cy := rng.Float64()*w, rng.Float64()*h
		r := unit * (0.05 + rng.Float64()*0.22) * scale
		x0, y0 := int(math.Floor(cx-r))-1, int(math.Floor(cy-r))-1
		box := image.Rect(x0, y0, int(math.Ceil(cx+r))+1, int(math.Ceil(cy+r))+1).Intersect(dst.Rect)
		if box.Empty() {
			continue
		}
		z.Reset(box.Dx(), box.Dy())
		ox, oy := cx-float64(box.Min.X), cy-float64(box.Min.Y)
		switch rng.IntN(3) {
		case 0: // disc
			circle(&z, ox, oy, r, false)
		case 1: // ring: outer circle, inner circle the other way round
			circle(&z, ox, oy, r, false)
			circle(&z, ox, oy, r*0.7, true)
		default: // triangle
			a := rng.Float64() * 2 * math.Pi
			z.MoveTo(float32(ox+r*math.Cos(a)), float32(oy+r*math.Sin(a)))
			for k := 1; k < 3; k++ {
				t := a + float64(k)*2*math.Pi/3
				z.LineTo(float32(ox+r*math.Cos(t)), float32(oy+r*math.Sin(t)))
			}
			z.ClosePath()
		}
		z.Draw(dst, box, image.NewUniform(premultiply(c)), image.Point{})
	}
}

// circle adds a circle of four cubic Béziers to z; reverse winds it the other
// way, to cut a hole.
func circle(z *vector.Rasterizer, cx, cy, r float64, reverse bool) {
	const k = 0.5522847498 // control-point distance for a quarter circle
	pts := [4][2]float64{{1, 0}, {0, 1}, {-1, 0}, {0, -1}}
	if reverse {
		pts = [4][2]float64{{1, 0}, {0, -1}, {-1, 0}, {0, 1}}
	}
	z.MoveTo(float32(cx+r*pts[0][0]), float32(cy+r*pts[0][1]))
	for i := 0; i < 4; i++ {
		p, q := pts[i], pts[(i+1)%4]
		z.CubeTo(
			float32(cx+r*(p[0]+k*q[0])), float32(cy+r*(p[1]+k*q[1])),
			float32(cx+r*(q[0]+k*p[0])), float32(cy+r*(q[1]+k*p[1])),
			float32(cx+r*q[0]), float32(cy+r*q[1]),
		)
	}
	z.ClosePath()
}

func premultiply(c color.RGBA) color.RGBA {
	a := uint32(c.A)
	return color.RGBA{uint8(uint32(c.R) * a / 255), uint8(uint32(c.G) * a / 255), uint8(uint32(c.B) * a / 255), c.A}
}

// compose paints the edit: the first source scaled to cover the canvas with
// a seeded duotone blended over it, the other sources as framed tiles along
// the top edge.
func compose(dst *image.RGBA, sources []image.Image, pal palette, rng *rand.Rand) {
	w, h := dst.Rect.Dx(), dst.Rect.Dy()
	coverDraw(dst, dst.Rect, sources[0])
	dark, light := pal[0], pal[4]
	if luma(dark) > luma(light) {
		dark, light = light, dark
	}
	strength := 0.35 + rng.Float64()*0.3
	mirror := rng.IntN(2) == 0
	for y := 0; y < h; y++ {
		row := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
		for x := 0; x < w; x++ {
			p := row[4*x : 4*x+4 : 4*x+4]
			l := (0.299*float64(p[0]) + 0.587*float64(p[1]) + 0.114*float64(p[2])) / 255
			p[0] = mix(p[0], lerp8(dark.R, light.R, l), strength)
			p[1] = mix(p[1], lerp8(dark.G, light.G, l), strength)
			p[2] = mix(p[2], lerp8(dark.B, light.B, l), strength)
			p[3] = 255
		}
		if mirror {
			for i, j := 0, w-1; i < j; i, j = i+1, j-1 {
				a, b := row[4*i:4*i+4], row[4*j:4*j+4]
				var tmp [4]byte
				copy(tmp[:], a)
				copy(a, b)
				copy(b, tmp[:])
			}
		}
	}
	if len(sources) == 1 {
		return
	}
	tile := min(w, h) / 5
	margin := tile / 8
	x := margin
	for _, src := range sources[1:] {
		if x+tile > w-margin {
			break
		}
		frame := image.Rect(x-margin/3, margin-margin/3, x+tile+margin/3, margin+tile+margin/3)
		xdraw.Draw(dst, frame, image.NewUniform(light), image.Point{}, xdraw.Src)
		coverDraw(dst, image.Rect(x, margin, x+tile, margin+tile), src)
		x += tile + margin
	}
}

func mix(a, b uint8, t float64) uint8 { return uint8(float64(a)*(1-t) + float64(b)*t + 0.5) }

func luma(c color.RGBA) float64 { return 0.299*float64(c.R) + 0.587*float64(c.G) + 0.114*float64(c.B) }

// coverDraw scales src to cover r, cropping the overflow, centred.
func coverDraw(dst *image.RGBA, r image.Rectangle, src image.Image) {
	sb := src.Bounds()
	sw, sh := float64(sb.Dx()), float64(sb.Dy())
	scale := math.Max(float64(r.Dx())/sw, float64(r.Dy())/sh)
	cw, ch := float64(r.Dx())/scale, float64(r.Dy())/scale
	crop := image.Rect(
		sb.Min.X+int((sw-cw)/2), sb.Min.Y+int((sh-ch)/2),
		sb.Min.X+int((sw+cw)/2), sb.Min.Y+int((sh+ch)/2),
	).Intersect(sb)
	xdraw.ApproxBiLinear.Scale(dst, r, src, crop, xdraw.Src, nil)
}

// caption writes the prompt's words on a translucent band at the bottom.
func (g *Generator) caption(dst *image.RGBA, prompt string, pal palette) {
	w, h := dst.Rect.Dx(), dst.Rect.Dy()
	size := float64(min(w, h)) / 16
	face, err := opentype.NewFace(g.font, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		return
	}
	defer face.Close()
	lines := wrap(face, words(prompt), fixed.I(w*88/100), 3)
	if len(lines) == 0 {
		return
	}
	m := face.Metrics()
	lineH := (m.Ascent + m.Descent).Ceil() * 12 / 10
	pad := int(size / 2)
	bandH := lineH*len(lines) + 2*pad
	top := h*92/100 - bandH
	band := image.Rect(0, top, w, top+bandH)
	shade := pal[0]
	shade.R, shade.G, shade.B = shade.R/4, shade.G/4, shade.B/4
	shade.A = 150
	xdraw.Draw(dst, band, image.NewUniform(premultiply(shade)), image.Point{}, xdraw.Over)
	d := font.Drawer{Dst: dst, Src: image.NewUniform(color.RGBA{250, 250, 245, 255}), Face: face}
	for i, line := range lines {
		width := font.MeasureString(face, line)
		d.Dot = fixed.Point26_6{
			X: (fixed.I(w) - width) / 2,
			Y: fixed.I(top + pad + i*lineH + m.Ascent.Ceil()),
		}
		d.DrawString(line)
	}
}

// words keeps the printable words of the prompt.
func words(prompt string) []string {
	return strings.FieldsFunc(prompt, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) })
}

// wrap lays words out in at most maxLines lines of at most width, ending with
// an ellipsis when they do not fit.
func wrap(face font.Face, ws []string, width fixed.Int26_6, maxLines int) []string {
	var lines []string
	cur := ""
	for _, word := range ws {
		if cur != "" {
			if next := cur + " " + word; font.MeasureString(face, next) <= width {
				cur = next
				continue
			}
			lines = append(lines, cur)
			if len(lines) == maxLines {
				lines[maxLines-1] = truncate(face, lines[maxLines-1]+" …", width)
				return lines
			}
		}
		// A word starts the line; one too wide for it is cut.
		cur = truncate(face, word, width)
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

// truncate shortens s to fit width, ending with an ellipsis.
func truncate(face font.Face, s string, width fixed.Int26_6) string {
	if font.MeasureString(face, s) <= width {
		return s
	}
	// One pass, adding up advances as font.MeasureString does, and cut at
	// the first rune that would leave no room for the ellipsis: linear in
	// the length of s, however long one word is.
	room := width - font.MeasureString(face, "…")
	var adv fixed.Int26_6
	prev := rune(-1)
	for i, r := range s {
		if prev >= 0 {
			adv += face.Kern(prev, r)
		}
		a, _ := face.GlyphAdvance(r)
		if adv+a > room {
			return strings.TrimSpace(s[:i]) + "…"
		}
		adv += a
		prev = r
	}
	return s
}

// bufferPool reuses the PNG encoder's buffers across generations.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() *png.EncoderBuffer {
	if v, ok := b.p.Get().(*png.EncoderBuffer); ok {
		return v
	}
	return nil
}

func (b *bufferPool) Put(e *png.EncoderBuffer) { b.p.Put(e) }
