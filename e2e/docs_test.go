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

// TestReadmeDocumentsConfiguration keeps README.md's configuration table and
// the variables the binaries read in step, both ways.
func TestReadmeDocumentsConfiguration(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## Configuration")
	if start < 0 {
		t.Fatal("README has no Configuration section")
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(EASEL_[A-Z0-9_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	names := config.Names(&gateway.Config{}, &worker.Config{})
	for _, n := range names {
		if !documented[n] {
			t.Errorf("%s is read by the binaries but missing from README's configuration table", n)
		}
	}
	devstackOnly := []string{"EASEL_DEV_REDIS_ADDR"}
	for n := range documented {
		if !slices.Contains(names, n) && !slices.Contains(devstackOnly, n) {
			t.Errorf("README documents %s, which nothing reads", n)
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
