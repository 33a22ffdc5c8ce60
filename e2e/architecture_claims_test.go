package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The claims ARCHITECTURE.md and the README make about the layout that the
// code can check: what pkg/ holds, which packages the document names, and
// the store's calls.

// The programs of the root module: pkg/ holds what more than one of them
// uses.
var programs = []string{
	"./api-gateway/cmd/gateway",
	"./worker/cmd/worker",
	"./tools/cmd/easelctl",
	"./tools/cmd/devstack",
	"./tools/cmd/loadgen",
}

// Every package under pkg/ is used by at least two programs, or is a test
// helper (its name ends in "test") that only tests import.
func TestPkgHoldsWhatProgramsShare(t *testing.T) {
	users := map[string][]string{} // package → programs that link it
	for _, p := range programs {
		cmd := exec.Command("go", "list", "-deps", p)
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", p, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if rest, ok := strings.CutPrefix(dep, modulePath); ok && strings.HasPrefix(rest, "pkg/") {
				users[rest] = append(users[rest], p)
			}
		}
	}
	cmd := exec.Command("go", "list", "./pkg/...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./pkg/...: %v", err)
	}
	files := repoGoFiles(t)
	for _, full := range strings.Fields(string(out)) {
		pkg := strings.TrimPrefix(full, modulePath)
		if strings.HasSuffix(pkg, "test") {
			for _, f := range files {
				if !f.test && slices.Contains(f.imports, full) {
					t.Errorf("%s is a test helper, but %s (not a test) imports it", pkg, f.path)
				}
			}
			continue
		}
		if n := len(users[pkg]); n < 2 {
			t.Errorf("%s is used by %d program(s) %v: pkg/ holds what more than one program uses; move it beside its one user", pkg, n, users[pkg])
		}
	}
}

// Every package of the services and of pkg/ is named in ARCHITECTURE.md,
// so a newcomer finds each part there.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	seen := map[string]bool{}
	for _, f := range repoGoFiles(t) {
		if f.test || f.pkg == "main" {
			continue
		}
		dir := filepath.ToSlash(filepath.Dir(f.path))
		if !under(f.path, "pkg") && !under(f.path, "api-gateway") && !under(f.path, "worker") {
			continue
		}
		if seen[dir] {
			continue
		}
		seen[dir] = true
		// Named by its path from the service or pkg/ ("internal/api",
		// "imagegen/pool", "pkg/store") or, for a package of pkg/, by its
		// path under pkg/ in backquotes ("`store`", "`prom/promtest`").
		rel := dir
		for _, root := range []string{"api-gateway/", "worker/"} {
			rel = strings.TrimPrefix(rel, root)
		}
		short := strings.TrimPrefix(dir, "pkg/")
		if !strings.Contains(text, rel) && !(under(f.path, "pkg") && strings.Contains(text, "`"+short+"`")) {
			if dir == "api-gateway" || dir == "worker" {
				continue // the services' roots: named as the services
			}
			t.Errorf("ARCHITECTURE.md does not name %s", dir)
		}
	}
}

// The store table's "Main calls" are methods of the types it names.
func TestArchitectureStoreTableIsTrue(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string][]string{} // receiver type → methods
	fset := token.NewFileSet()
	pkgs, err := filepath.Glob(filepath.Join(repoRoot, "pkg", "store", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if st, ok := typ.(*ast.StarExpr); ok {
				typ = st.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				methods[id.Name] = append(methods[id.Name], fn.Name.Name)
			}
		}
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Z][A-Za-z]*)` \\| [^|]+ \\| ([^|]+) \\|$")
	name := regexp.MustCompile("`([A-Z][A-Za-z]*)`")
	rows := row.FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 4 {
		t.Fatalf("ARCHITECTURE.md's store table has %d rows", len(rows))
	}
	for _, r := range rows {
		typ := r[1]
		have, ok := methods[typ]
		if !ok {
			t.Errorf("ARCHITECTURE.md's store table names %s, which pkg/store does not declare", typ)
			continue
		}
		for _, m := range name.FindAllStringSubmatch(r[2], -1) {
			if !slices.Contains(have, m[1]) {
				t.Errorf("ARCHITECTURE.md says store.%s has %s; it does not", typ, m[1])
			}
		}
	}
}

// Every path ARCHITECTURE.md names from the repository's root exists.
func TestArchitecturePathsExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	path := regexp.MustCompile("`((?:api-gateway|worker|pkg|tools|e2e|deploy|bench|proto|sdk)/[A-Za-z0-9_./-]+)`")
	found := path.FindAllStringSubmatch(string(doc), -1)
	if len(found) < 20 {
		t.Fatalf("found only %d paths in ARCHITECTURE.md", len(found))
	}
	for _, m := range found {
		p := strings.TrimSuffix(m[1], "/")
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(p))); err != nil {
			t.Errorf("ARCHITECTURE.md names %s, which does not exist", m[1])
		}
	}
}
