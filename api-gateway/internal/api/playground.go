package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/pkg/catalog"
)

// playgroundFiles are the playground page's files: plain HTML, CSS and
// JavaScript, with no build step and nothing loaded from elsewhere.
//
//go:embed playground
var playgroundFiles embed.FS

// Playground paths.
const (
	PathPlayground = "/playground"
	// playgroundDir is the directory of playgroundFiles holding the page.
	playgroundDir = "playground"
	// playgroundIndex is the page itself, an html/template.
	playgroundIndex = "index.html"
)

// Cache policies of the playground's responses.
const (
	// cacheRevalidate: the page and unversioned assets are checked again on
	// every use (a 304 when their ETag still matches), so a new gateway's
	// page is seen at once.
	cacheRevalidate = "no-cache"
	// cacheImmutable: an asset requested with the version the page names
	// (?v=<its content hash>) never changes under that URL.
	cacheImmutable = "public, max-age=31536000, immutable"
)

// playgroundAssetType returns the Content-Type of an asset of the page by
// its name, "" for a name that is not one.
func playgroundAssetType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return ""
}

// playground handles GET /playground and GET /playground/*: the playground
// page, a form that calls the public API from the browser (create, then
// the task's stream). /playground redirects to /playground/, which serves
// the page; the page's assets are beside it.
func (h *handlers) playground(c echo.Context) error {
	if c.Path() == PathPlayground {
		return c.Redirect(http.StatusMovedPermanently, PathPlayground+"/")
	}
	name := c.Param("*")
	if name == "" || name == playgroundIndex {
		return h.playgroundPage(c)
	}
	return h.pageAsset(c, playgroundFiles, playgroundDir, name)
}

// playgroundModel is a model as the page's select offers it.
type playgroundModel struct {
	ID   string
	Tier catalog.Tier
	// ImageSize: the model takes input.image_size.
	ImageSize bool
}

// playgroundData fills index.html.
type playgroundData struct {
	Models       []playgroundModel
	AspectRatios []string
	ImageSizes   []string
	DefaultRatio string
	// Versions are the assets' content hashes, by file name: the page asks
	// for "app.js?v=<hash>", so a browser may keep each for good.
	Versions map[string]string
}

// playgroundPage renders index.html with the catalog's models, ratios and
// sizes.
func (h *handlers) playgroundPage(c echo.Context) error {
	tmpl, err := template.ParseFS(playgroundFiles, playgroundDir+"/"+playgroundIndex)
	if err != nil {
		return err
	}
	data := playgroundData{
		AspectRatios: catalog.AspectRatios,
		ImageSizes:   catalog.ImageSizes,
		DefaultRatio: catalog.DefaultAspectRatio,
		Versions:     map[string]string{},
	}
	if h.Decoder != nil && h.Decoder.Catalog != nil {
		for _, m := range h.Decoder.Catalog.Models() {
			data.Models = append(data.Models, playgroundModel{ID: m.ID, Tier: m.Tier, ImageSize: m.SupportsImageSize()})
		}
	}
	if data.Versions, err = assetVersions(playgroundFiles, playgroundDir); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return err
	}
	return h.servePage(c, playgroundIndex, "text/html; charset=utf-8", cacheRevalidate, buf.Bytes())
}

// assetVersions are the content hashes of a page's assets, by name.
func assetVersions(files fs.FS, dir string) (map[string]string, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || playgroundAssetType(e.Name()) == "" {
			continue
		}
		b, err := fs.ReadFile(files, dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		out[e.Name()] = contentVersion(b)
	}
	return out, nil
}

// pageAsset serves one of an embedded page's assets, by name.
func (h *handlers) pageAsset(c echo.Context, files fs.FS, dir, name string) error {
	ctype := playgroundAssetType(name)
	if ctype == "" || strings.Contains(name, "/") {
		return echo.ErrNotFound
	}
	b, err := fs.ReadFile(files, dir+"/"+name)
	if errors.Is(err, fs.ErrNotExist) {
		return echo.ErrNotFound
	}
	if err != nil {
		return err
	}
	cache := cacheRevalidate
	if v := c.QueryParam("v"); v != "" && v == contentVersion(b) {
		cache = cacheImmutable
	}
	return h.servePage(c, name, ctype, cache, b)
}

// contentVersion is a short hash of an asset's bytes.
func contentVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// servePage writes one of a page's files (the playground's, the
// console's) with its security and caching headers; an If-None-Match of
// its ETag is 304.
func (h *handlers) servePage(c echo.Context, name, ctype, cache string, b []byte) error {
	sum := sha256.Sum256(b)
	hdr := c.Response().Header()
	hdr.Set(echo.HeaderContentType, ctype)
	hdr.Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
	hdr.Set("Cache-Control", cache)
	hdr.Set("Content-Security-Policy", h.playgroundCSP())
	hdr.Set("X-Content-Type-Options", "nosniff")
	// The page holds an API key or a session and shows signed URLs: no
	// referrer leaves it.
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
	hdr.Set("Cross-Origin-Resource-Policy", "same-origin")
	http.ServeContent(c.Response(), c.Request(), name, time.Time{}, bytes.NewReader(b))
	return nil
}

// playgroundCSP is the page's Content-Security-Policy: its own scripts,
// styles and images and nothing else; it talks to its own origin only
// (connect-src 'self'). Images may also come from the origin of result
// URLs (EASEL_PUBLIC_URL) when that is another, and from any https origin
// when downloads redirect to the bucket's own presigned URLs
// (EASEL_BLOB_REDIRECT): a browser checks a redirected image against
// img-src too.
func (h *handlers) playgroundCSP() string {
	img := "'self'"
	if o := h.resultsOrigin(); o != "" {
		img += " " + o
	}
	if h.Redirect != nil {
		img += " https:"
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src " + img +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// resultsOrigin is the scheme://host[:port] of result URLs, "" when it
// cannot be told.
func (h *handlers) resultsOrigin() string {
	if h.Signer == nil {
		return ""
	}
	u, err := url.Parse(h.Signer.Sign(FilesPrefix, h.Now()))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(u.Host, " ;,'\"") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
