package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Cache policies of the pages' responses.
const (
	// CacheRevalidate: a page and its unversioned assets are checked again
	// on every use (a 304 when their ETag still matches), so a new
	// gateway's page is seen at once.
	CacheRevalidate = "no-cache"
	// CacheImmutable: an asset requested with the version the page names
	// (?v=<its content hash>) never changes under that URL.
	CacheImmutable = "public, max-age=31536000, immutable"
)

// Pages serves the gateway's embedded pages (the playground, the
// console): plain HTML, CSS and JavaScript with no build step and nothing
// loaded from elsewhere, under a strict Content-Security-Policy.
type Pages struct {
	csp string
}

// NewPages returns the pages' server. Their policy allows their own
// scripts, styles and images and nothing else; they talk to their own
// origin only (connect-src 'self'). imageSources are where else images
// may come from: result URLs' origin when it is another, any https origin
// when downloads redirect to a bucket's presigned URLs (a browser checks a
// redirected image against img-src too).
func NewPages(imageSources ...string) *Pages {
	img := "'self'"
	for _, s := range imageSources {
		img += " " + s
	}
	return &Pages{csp: "default-src 'none'; script-src 'self'; style-src 'self'; img-src " + img +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}
}

// assetType returns the Content-Type of a page's asset by its name, ""
// for a name that is not one.
func assetType(name string) string {
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

// AssetVersions are the content hashes of a page's assets (the files of
// dir in files), by name: a page asks for "app.js?v=<hash>", so a browser
// may keep each for good.
func AssetVersions(files fs.FS, dir string) (map[string]string, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || assetType(e.Name()) == "" {
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

// Asset serves one of a page's assets, by name (the files of dir in
// files).
func (p *Pages) Asset(c echo.Context, files fs.FS, dir, name string) error {
	ctype := assetType(name)
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
	cache := CacheRevalidate
	if v := c.QueryParam("v"); v != "" && v == contentVersion(b) {
		cache = CacheImmutable
	}
	return p.serve(c, name, ctype, cache, b)
}

// Page renders a page, the template name of t, with data, and serves
// it.
func (p *Pages) Page(c echo.Context, t *template.Template, name string, data any) error {
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, data); err != nil {
		return err
	}
	return p.serve(c, name, "text/html; charset=utf-8", CacheRevalidate, buf.Bytes())
}

// contentVersion is a short hash of an asset's bytes.
func contentVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// serve writes one of a page's files with its security and caching
// headers; an If-None-Match of its ETag is 304.
func (p *Pages) serve(c echo.Context, name, ctype, cache string, b []byte) error {
	sum := sha256.Sum256(b)
	hdr := c.Response().Header()
	hdr.Set(echo.HeaderContentType, ctype)
	hdr.Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
	hdr.Set("Cache-Control", cache)
	hdr.Set("Content-Security-Policy", p.csp)
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
