package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedFile bounds a tracked file: the repository holds source, docs
// and small fixtures, never build outputs or data dumps.
const maxTrackedFile = 1 << 20

// TestRepositoryIsLean fails when a tracked file is a binary (a NUL byte in
// its first 8000 bytes, git's own test) or larger than 1 MB: a committed
// build output costs every clone forever.
func TestRepositoryIsLean(t *testing.T) {
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	files := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files listed only %d files", len(files))
	}
	for _, f := range files {
		p := filepath.Join(repoRoot, f)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		if fi.Size() > maxTrackedFile {
			t.Errorf("%s is %d bytes: tracked files stay under %d (build outputs are ignored, data is generated)", f, fi.Size(), maxTrackedFile)
		}
		if binary(t, p) {
			t.Errorf("%s is a binary file: build outputs are never committed (.gitignore)", f)
		}
	}
}

// binary reports whether a file's first 8000 bytes hold a NUL byte.
func binary(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 8000)
	n, _ := f.Read(buf)
	return bytes.IndexByte(buf[:n], 0) >= 0
}
