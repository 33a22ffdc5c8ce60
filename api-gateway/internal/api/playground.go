package api

import (
	"embed"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/catalog"
)

// playgroundFiles are the playground page's files: plain HTML, CSS and
// JavaScript, with no build step and nothing loaded from elsewhere.
// playground.js is the playground itself (the form, the create, following
// the task, the result), which the console's playground runs too.
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
	// playgroundModule is the script both playgrounds run.
	playgroundModule = "playground.js"
)

// PlaygroundModule is the URL of the playground's script, versioned by
// its content: a page that runs the playground (the console's) loads it
// from here, and a browser may keep it for good.
func PlaygroundModule() string {
	versions, err := web.AssetVersions(playgroundFiles, playgroundDir)
	if err != nil {
		panic(err) // embedded: read at build time
	}
	return PathPlayground + "/" + playgroundModule + "?v=" + versions[playgroundModule]
}

// playground handles GET /playground and GET /playground/*: the playground
// page, a form that calls the public API from the browser (create, then
// the task's stream). /playground redirects to /playground/, which serves
// the page; the page's assets are beside it.
func (h *Handlers) playground(c echo.Context) error {
	if c.Path() == PathPlayground {
		return c.Redirect(http.StatusMovedPermanently, PathPlayground+"/")
	}
	name := c.Param("*")
	if name == "" || name == playgroundIndex {
		return h.playgroundPage(c)
	}
	return h.Pages.Asset(c, playgroundFiles, playgroundDir, name)
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
func (h *Handlers) playgroundPage(c echo.Context) error {
	data := playgroundData{
		AspectRatios: catalog.AspectRatios,
		ImageSizes:   catalog.ImageSizes,
		DefaultRatio: catalog.DefaultAspectRatio,
	}
	if h.Decoder != nil && h.Decoder.Catalog != nil {
		for _, m := range h.Decoder.Catalog.Models() {
			data.Models = append(data.Models, playgroundModel{ID: m.ID, Tier: m.Tier, ImageSize: m.SupportsImageSize()})
		}
	}
	var err error
	if data.Versions, err = web.AssetVersions(playgroundFiles, playgroundDir); err != nil {
		return err
	}
	return h.Pages.Page(c, playgroundFiles, playgroundDir, playgroundIndex, data)
}
