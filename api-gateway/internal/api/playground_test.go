package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/signedurl"
)

// playgroundFile reads one of the page's files from the source tree.
func playgroundFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("playground", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func version(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

const wantCSPTail = "; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func TestPlaygroundPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)

	t.Run("/playground redirects to /playground/", func(t *testing.T) {
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noFollow.Get(e.Srv.URL + "/playground")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 301 || resp.Header.Get("Location") != "/playground/" {
			t.Errorf("status %d, Location %q; want 301 to /playground/", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	for _, path := range []string{"/playground/", "/playground/index.html"} {
		t.Run(path, func(t *testing.T) {
			r := e.Do("GET", path, nil, "")
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			h := r.Header
			for k, want := range map[string]string{
				"Content-Type":            "text/html; charset=utf-8",
				"Cache-Control":           "no-cache",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
				"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' " + e.Srv.URL + wantCSPTail,
			} {
				if got := h.Get(k); got != want {
					t.Errorf("%s: %q; want %q", k, got, want)
				}
			}
			if !regexp.MustCompile(`^"[0-9a-f]{32}"$`).MatchString(h.Get("ETag")) {
				t.Errorf("ETag %q", h.Get("ETag"))
			}
			page := string(r.Body)
			wants := []string{
				`<option value="` + std + `" data-tier="standard" selected>` + std + ` (standard)</option>`,
				`<option value="` + pro + `" data-tier="pro" data-image-size="true">` + pro + ` (pro)</option>`,
				`<option value="" selected>Default</option>`,
				`<option value="1K" selected>1K</option>`,
				`<option value="4K">4K</option>`,
				`src="app.js?v=` + version(playgroundFile(t, "app.js")) + `"`,
				`href="style.css?v=` + version(playgroundFile(t, "style.css")) + `"`,
				`href="icon.svg?v=` + version(playgroundFile(t, "icon.svg")) + `"`,
				`<label for="api-key">`, `<label for="model">`, `<label for="prompt">`, `<label for="aspect-ratio">`,
				`<label for="image-size">`, `<label for="image-urls">`, `<label for="image-files">`, `<label for="progress">`,
				`data-max-bytes="20971520"`, `up to 20 MB each`,
				`name="viewport" content="width=device-width, initial-scale=1"`,
			}
			for _, ratio := range catalog.AspectRatios {
				wants = append(wants, `<option value="`+ratio+`">`+ratio+`</option>`)
			}
			for _, w := range wants {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %s", w)
				}
			}
			if strings.Contains(page, "{{") {
				t.Error("page has an unexpanded template action")
			}
		})
	}

	t.Run("assets", func(t *testing.T) {
		for _, tc := range []struct{ name, ctype string }{
			{"app.js", "text/javascript; charset=utf-8"},
			{"style.css", "text/css; charset=utf-8"},
			{"icon.svg", "image/svg+xml"},
		} {
			want := playgroundFile(t, tc.name)
			for _, v := range []struct{ query, cache string }{
				{"", "no-cache"},
				{"?v=" + version(want), "public, max-age=31536000, immutable"},
				{"?v=0123456789abcdef", "no-cache"}, // a page of another version
			} {
				r := e.Do("GET", "/playground/"+tc.name+v.query, nil, "")
				if r.Status != 200 || string(r.Body) != string(want) {
					t.Errorf("%s%s: status %d, %d bytes; want 200 and the file's %d", tc.name, v.query, r.Status, len(r.Body), len(want))
					continue
				}
				if got := r.Header.Get("Content-Type"); got != tc.ctype {
					t.Errorf("%s: Content-Type %q; want %q", tc.name, got, tc.ctype)
				}
				if got := r.Header.Get("Cache-Control"); got != v.cache {
					t.Errorf("%s%s: Cache-Control %q; want %q", tc.name, v.query, got, v.cache)
				}
				if r.Header.Get("Content-Security-Policy") == "" || r.Header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s: security headers %v", tc.name, r.Header)
				}
			}
			etag := e.Do("GET", "/playground/"+tc.name, nil, "").Header.Get("ETag")
			if r := e.Do("GET", "/playground/"+tc.name, map[string]string{"If-None-Match": etag}, ""); r.Status != 304 || len(r.Body) != 0 {
				t.Errorf("%s with If-None-Match %s: %d, %d bytes; want 304", tc.name, etag, r.Status, len(r.Body))
			}
		}
		etag := e.Do("GET", "/playground/", nil, "").Header.Get("ETag")
		if r := e.Do("GET", "/playground/", map[string]string{"If-None-Match": etag}, ""); r.Status != 304 {
			t.Errorf("page with If-None-Match: %d; want 304", r.Status)
		}
	})

	t.Run("not found", func(t *testing.T) {
		for _, p := range []string{
			"/playground/nothing.js", "/playground/index.htm", "/playground/playground.go",
			"/playground/sub/app.js", "/playground/..%2fplayground.go", "/playground/%2e%2e/api.go", "/playground/app.js/",
		} {
			assertEnvelope(t, e.Do("GET", p, nil, ""), 404, "no such endpoint")
		}
	})
}

// The page offers the catalog's models: another family word, other ids.
func TestPlaygroundModelsFromCatalog(t *testing.T) {
	t.Parallel()
	cat, err := catalog.New("pixel")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) { d.Decoder = &createreq.Decoder{Catalog: cat} })
	page := string(e.Do("GET", "/playground/", nil, "").Body)
	for _, m := range cat.Models() {
		if !strings.Contains(page, `<option value="`+m.ID+`" data-tier="`+string(m.Tier)+`"`) {
			t.Errorf("page lacks model %s", m.ID)
		}
	}
	if strings.Contains(page, "lumen-") {
		t.Error("page names a lumen model under the pixel family")
	}
}

type presigner struct{}

func (presigner) Presign(context.Context, string, time.Duration) (string, error) {
	return "https://bucket.example.com/x", nil
}

func TestPlaygroundCSP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*deps)
		img  string // want img-src, "" for 'self' and the test server
	}{
		{"results on the page's origin", nil, ""},
		{"results on another public URL", func(d *deps) {
			d.Signer = signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "https://images.example.com:8443")
		}, "'self' https://images.example.com:8443"},
		{"downloads redirect to the bucket", func(d *deps) {
			d.Signer = signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "https://images.example.com")
			d.Redirect = presigner{}
		}, "'self' https://images.example.com https:"},
		{"a public URL that could break the policy is left out", func(d *deps) {
			d.Signer = signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "https://x.example.com;script-src")
		}, "'self'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnvWith(t, nil, zap.NewNop(), tt.edit)
			img := tt.img
			if img == "" {
				img = "'self' " + e.Srv.URL
			}
			want := "default-src 'none'; script-src 'self'; style-src 'self'; img-src " + img + wantCSPTail
			for _, p := range []string{"/playground/", "/playground/app.js"} {
				if got := e.Do("GET", p, nil, "").Header.Get("Content-Security-Policy"); got != want {
					t.Errorf("%s: CSP %q; want %q", p, got, want)
				}
			}
		})
	}
}

// The page works offline: it loads nothing from another origin and needs
// no inline script or style (which the policy refuses).
func TestPlaygroundSelfContained(t *testing.T) {
	t.Parallel()
	index := string(playgroundFile(t, "index.html"))
	for _, re := range []string{
		`(?i)(src|href)\s*=\s*"(https?:)?//`, // a resource elsewhere
		`(?i)<script(\s[^>]*)?>\s*[^<\s]`,    // an inline script
		`(?i)<style`, `(?i)\sstyle\s*=`,      // inline styles
		`(?i)\son[a-z]+\s*=`, // inline event handlers
	} {
		if m := regexp.MustCompile(re).FindString(index); m != "" {
			t.Errorf("index.html: %q matches %s", m, re)
		}
	}
	css := string(playgroundFile(t, "style.css"))
	for _, bad := range []string{"@import", "url("} {
		if strings.Contains(css, bad) {
			t.Errorf("style.css uses %s", bad)
		}
	}
	page := string(playgroundFile(t, "app.js"))
	module := string(playgroundFile(t, "playground.js"))
	for name, js := range map[string]string{"app.js": page, "playground.js": module} {
		for _, re := range []string{`(?i)fetch\(\s*['"` + "`" + `]https?:`, `\bimport\s*\(`, `\beval\(`, `new Function`, `innerHTML`, `new EventSource`} {
			if m := regexp.MustCompile(re).FindString(js); m != "" {
				t.Errorf("%s: %q matches %s", name, m, re)
			}
		}
	}
	// It calls the public routes only, on its own origin: playground.js
	// fetches in one place, sending to the task routes under the base its
	// page gives and to the uploads route it gives; this page gives the
	// public API's.
	if fetches := regexp.MustCompile(`fetch\(\s*([^,]+?),`).FindAllStringSubmatch(module, -1); len(fetches) != 1 || fetches[0][1] != "url" {
		t.Errorf("playground.js fetches %q; want one fetch, in send", fetches)
	}
	sends := regexp.MustCompile(`(?:return|await) send\('?(\w+)'?,\s*([^,]+?),`).FindAllStringSubmatch(module, -1)
	if len(sends) != 2 || sends[0][2] != "opts.base + path" || sends[1][1] != "POST" || sends[1][2] != "opts.uploads" {
		t.Errorf("playground.js sends %q; want the task routes under opts.base and POST to opts.uploads", sends)
	}
	if strings.Contains(page, "fetch(") || !strings.Contains(page, "base: '/v1/task',") || !strings.Contains(page, "uploads: '/v1/uploads',") {
		t.Error("app.js fetches on its own, or does not run the playground on /v1/task and /v1/uploads")
	}
	calls := regexp.MustCompile(`call\('(GET|POST)',\s*([^,]+?),`).FindAllStringSubmatch(module, -1)
	if len(calls) != 4 {
		t.Errorf("playground.js calls %d routes; want create, stream, query and cancel: %q", len(calls), calls)
	}
	for _, call := range calls {
		switch route := call[1] + " " + call[2]; route {
		case "POST '/create'", "GET `/stream?task_id=${encodeURIComponent(id)}`", "GET `/query?task_id=${encodeURIComponent(id)}&wait=${QUERY_WAIT_S}`", "POST '/cancel'":
		default:
			t.Errorf("playground.js calls %s", route)
		}
	}
}
