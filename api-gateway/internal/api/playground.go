package api

import (
	"embed"
	"html/template"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/upload"
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
	// playgroundForm holds the templates of the form every playground
	// shows.
	playgroundForm = "form.html"
	// PlaygroundScript is the script every playground runs, PlaygroundTheme
	// the stylesheet of every page that shows one: assets of the page.
	PlaygroundScript = "playground.js"
	PlaygroundTheme  = "theme.css"
)

// PlaygroundAsset is the URL of one of the playground page's assets,
// versioned by its content: another page that runs the playground (the
// console) loads its script and theme from here, and a browser may keep
// them for good.
func PlaygroundAsset(name string) string {
	versions, err := web.AssetVersions(playgroundFiles, playgroundDir)
	if err != nil {
		panic(err) // embedded: read at build time
	}
	return PathPlayground + "/" + name + "?v=" + versions[name]
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

// PlaygroundForm fills the playground's form (form.html): its
// "playground-request" and "playground-task" templates, which every page
// that runs the playground shows.
type PlaygroundForm struct {
	// Prefix starts the form's element ids: playground.js finds them by it.
	Prefix       string
	Models       []PlaygroundModel
	AspectRatios []string
	ImageSizes   []string
	DefaultRatio string
	// Formats are the output formats, the default first; Counts the
	// numbers of images a task may make.
	Formats []string
	Counts  []int
	// UploadMaxBytes is an upload's limit (upload.MaxBytes), which the
	// page checks before sending a file; UploadMaxMB says it.
	UploadMaxBytes int
	UploadMaxMB    int
}

// PlaygroundModel is a model as the form's select offers it.
type PlaygroundModel struct {
	ID   string
	Tier catalog.Tier
	// ImageSize: the model takes input.image_size.
	ImageSize bool
}

// NewPlaygroundForm is the form for the models of cat (nil: none), its
// element ids starting with prefix.
func NewPlaygroundForm(cat *catalog.Catalog, prefix string) PlaygroundForm {
	f := PlaygroundForm{Prefix: prefix, AspectRatios: catalog.AspectRatios, ImageSizes: catalog.ImageSizes, DefaultRatio: catalog.DefaultAspectRatio,
		Formats: task.Formats, UploadMaxBytes: upload.MaxBytes, UploadMaxMB: upload.MaxBytes >> 20}
	for n := 1; n <= task.MaxImages; n++ {
		f.Counts = append(f.Counts, n)
	}
	if cat != nil {
		for _, m := range cat.Models() {
			f.Models = append(f.Models, PlaygroundModel{ID: m.ID, Tier: m.Tier, ImageSize: m.SupportsImageSize()})
		}
	}
	return f
}

// PlaygroundTemplates are the form's templates, for a page to add itself
// to.
func PlaygroundTemplates() *template.Template {
	return template.Must(template.ParseFS(playgroundFiles, playgroundDir+"/"+playgroundForm))
}

// playgroundData fills index.html.
type playgroundData struct {
	PlaygroundForm
	// Versions are the assets' content hashes, by file name: the page asks
	// for "app.js?v=<hash>", so a browser may keep each for good.
	Versions map[string]string
}

// playgroundPage renders index.html with the catalog's models, ratios and
// sizes.
func (h *Handlers) playgroundPage(c echo.Context) error {
	var cat *catalog.Catalog
	if h.Decoder != nil {
		cat = h.Decoder.Catalog
	}
	data := playgroundData{PlaygroundForm: NewPlaygroundForm(cat, "")}
	var err error
	if data.Versions, err = web.AssetVersions(playgroundFiles, playgroundDir); err != nil {
		return err
	}
	t, err := PlaygroundTemplates().ParseFS(playgroundFiles, playgroundDir+"/"+playgroundIndex)
	if err != nil {
		return err
	}
	return h.Pages.Page(c, t, playgroundIndex, data)
}
