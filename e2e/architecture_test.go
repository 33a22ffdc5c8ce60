package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layout's rules (ARCHITECTURE.md), checked on every Go file of the
// repository: what may import what, where Redis keys are named, and what
// pkg/ holds.

const modulePath = "github.com/easelhq/easel/"

type goFile struct {
	path    string // slash-separated, relative to the repository root
	pkg     string
	test    bool
	imports []string
	strs    []string // string literals
}

func repoGoFiles(t *testing.T) []goFile {
	t.Helper()
	var out []goFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		gf := goFile{path: filepath.ToSlash(rel), pkg: f.Name.Name, test: strings.HasSuffix(p, "_test.go")}
		for _, im := range f.Imports {
			v, _ := strconv.Unquote(im.Path.Value)
			gf.imports = append(gf.imports, v)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					gf.strs = append(gf.strs, v)
				}
			}
			return true
		})
		out = append(out, gf)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("found only %d Go files under %s", len(out), repoRoot)
	}
	return out
}

func under(path, dir string) bool { return strings.HasPrefix(path, dir+"/") }

// httpEdge are the gateway's HTTP packages: the public API, the admin API,
// the console, and what the three share.
var httpEdge = []string{
	"api-gateway/internal/api",
	"api-gateway/internal/admin",
	"api-gateway/internal/console",
	"api-gateway/internal/web",
}

func isEcho(imp string) bool { return strings.HasPrefix(imp, "github.com/labstack/echo") }

func TestArchitecture(t *testing.T) {
	files := repoGoFiles(t)
	rules := []struct {
		name    string
		applies func(f goFile) bool
		refuse  func(imp string) bool
	}{
		{"the gateway never imports the worker", func(f goFile) bool { return under(f.path, "api-gateway") },
			func(imp string) bool { return strings.HasPrefix(imp, modulePath+"worker") }},
		{"the worker never imports the gateway", func(f goFile) bool { return under(f.path, "worker") },
			func(imp string) bool { return strings.HasPrefix(imp, modulePath+"api-gateway") }},
		{"the services use the job contract (pkg/jobs), never its wire format", func(f goFile) bool {
			return under(f.path, "api-gateway") || under(f.path, "worker")
		}, func(imp string) bool { return strings.HasPrefix(imp, modulePath+"proto") }},
		{"only pkg/jobs knows the wire format", func(f goFile) bool { return under(f.path, "pkg") && !under(f.path, "pkg/jobs") },
			func(imp string) bool { return strings.HasPrefix(imp, modulePath+"proto") }},
		{"pkg/ is shared by both services and imports neither, nor the tools", func(f goFile) bool { return under(f.path, "pkg") && !f.test },
			func(imp string) bool {
				return strings.HasPrefix(imp, modulePath+"api-gateway") || strings.HasPrefix(imp, modulePath+"worker") || strings.HasPrefix(imp, modulePath+"tools")
			}},
		{"pkg/ uses no HTTP framework", func(f goFile) bool { return under(f.path, "pkg") },
			func(imp string) bool { return strings.HasPrefix(imp, "github.com/labstack/echo") }},
		{"Asynq stays at the edges: pkg/jobs and the worker's Run", func(f goFile) bool {
			return !f.test && (under(f.path, "pkg") && !under(f.path, "pkg/jobs") ||
				under(f.path, "api-gateway") ||
				under(f.path, "worker") && f.path != "worker/worker.go")
		}, func(imp string) bool { return strings.HasPrefix(imp, "github.com/hibiken/asynq") }},
		{"Echo stays in the gateway's HTTP edge: its three applications and what they share", func(f goFile) bool {
			return !f.test && under(f.path, "api-gateway") && !slices.ContainsFunc(httpEdge, func(dir string) bool { return under(f.path, dir) })
		}, isEcho},
		{"the upstreams and the quota keep their own keys, beside the store, not in it", func(f goFile) bool {
			return !f.test && (under(f.path, "pkg/upstream") || under(f.path, "pkg/quota"))
		}, func(imp string) bool { return imp == modulePath+"pkg/store" }},
		{"the services' code never imports the tools (tests may use tools/testkit)", func(f goFile) bool {
			return !f.test && (under(f.path, "api-gateway") || under(f.path, "worker"))
		}, func(imp string) bool { return strings.HasPrefix(imp, modulePath+"tools") }},
	}
	for _, r := range rules {
		for _, f := range files {
			if !r.applies(f) {
				continue
			}
			for _, imp := range f.imports {
				if r.refuse(imp) {
					t.Errorf("%s: %s imports %s", r.name, f.path, imp)
				}
			}
		}
	}

	// A package of the gateway that serves HTTP (imports Echo) declares
	// the small interfaces it uses in domain types: it never names a
	// store type, which gateway.go passes it.
	echoDirs := map[string]bool{}
	for _, f := range files {
		if !f.test && under(f.path, "api-gateway/internal") && slices.ContainsFunc(f.imports, isEcho) {
			echoDirs[path.Dir(f.path)] = true
		}
	}
	for _, f := range files {
		if f.test || !echoDirs[path.Dir(f.path)] {
			continue
		}
		for _, imp := range f.imports {
			if imp == modulePath+"pkg/store" || strings.HasPrefix(imp, modulePath+"pkg/store/") {
				t.Errorf("the HTTP packages import no store type: %s imports %s", f.path, imp)
			}
		}
	}
	if len(echoDirs) < 4 {
		t.Errorf("found only %d HTTP packages under api-gateway/internal (%v): the rule above checks nothing", len(echoDirs), echoDirs)
	}

	for _, f := range files {
		if under(f.path, "pkg") && f.pkg == "main" {
			t.Errorf("pkg/ holds no commands, but %s is package main", f.path)
		}
		if under(f.path, "pkg/store") || f.path == "e2e/architecture_test.go" {
			continue
		}
		// Easel's Redis keys all start with "easel:" (package store); the
		// rate limiter's with "rate:easel:". A message of package easel
		// (the SDK: "easel: no API key") is "easel: " and a space, which no
		// key holds. Package upstream names its own keys, apart from every
		// account's: "easel:up:{<upstream>}:...", "easel:upstreams" and
		// "easel:upstreams:..." (the file's state).
		upstreamKeys := under(f.path, "pkg/upstream") && !f.test
		for _, s := range f.strs {
			key := strings.HasPrefix(s, "easel"+":") && !strings.HasPrefix(s, "easel"+": ")
			if upstreamKeys && (strings.HasPrefix(s, "easel"+":up:{") || s == "easel"+":upstreams" || strings.HasPrefix(s, "easel"+":upstreams:")) {
				continue
			}
			if key || strings.HasPrefix(s, "rate:easel") || strings.Contains(s, "{a"+":") {
				t.Errorf("%s names a Redis key (%q): only package store does, and package upstream its own", f.path, s)
			}
		}
	}
}
