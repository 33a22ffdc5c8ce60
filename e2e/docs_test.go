package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/worker"
)

// TestDocsDocumentConfiguration keeps docs/configuration.md's configuration
// table and the variables the binaries read in step, both ways.
func TestDocsDocumentConfiguration(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(EASEL_[A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	if len(documented) == 0 {
		t.Fatal("docs/configuration.md has no configuration table")
	}
	names := config.Names(&gateway.Config{}, &worker.Config{})
	for _, n := range names {
		if !documented[n] {
			t.Errorf("%s is read by the binaries but missing from docs/configuration.md's table", n)
		}
	}
	devstackOnly := []string{"EASEL_DEV_REDIS_ADDR"}
	for n := range documented {
		if !slices.Contains(names, n) && !slices.Contains(devstackOnly, n) {
			t.Errorf("docs/configuration.md documents %s, which nothing reads", n)
		}
	}
}

// TestReadmeStartsWithTheTwoCommands: a newcomer sees make run and make test
// first, and CI runs the same test command.
func TestReadmeStartsWithTheTwoCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	head := string(b)
	if i := strings.Index(head, "\n## "); i > 0 {
		head = head[:i]
	}
	if !strings.Contains(head, "make run") || !strings.Contains(head, "make test") {
		t.Error("README does not start with make run and make test")
	}
	ci, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil || !strings.Contains(string(ci), "make test") {
		t.Errorf(".ci/run does not run make test: %v", err)
	}
}

// maxReadmeLines bounds README.md: a newcomer's page; reference material
// lives in docs/.
const maxReadmeLines = 250

// TestReadmeIsShort keeps README.md a page a newcomer reads to the end.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move reference material to docs/", n, maxReadmeLines)
	}
}

// TestDocsLinksResolve: every relative link in README.md and docs/*.md
// names a file or directory that exists.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(repoRoot, "README.md"))
	// [text](target) or [text](target "title"); the text may hold code
	// spans but no brackets.
	link := regexp.MustCompile(`\[[^\[\]]*\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	fence := regexp.MustCompile("(?ms)^```.*?^```")
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := fence.ReplaceAllString(string(b), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			path, _, _ := strings.Cut(target, "#")
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), filepath.FromSlash(path))); err != nil {
				rel, _ := filepath.Rel(repoRoot, page)
				t.Errorf("%s links to %s, which does not exist", rel, target)
			}
		}
	}
	if checked == 0 {
		t.Error("found no relative link to check")
	}
}
