// Package blob stores result images. FS keeps them in a directory shared by
// the gateway (which serves them) and the workers (which write them); its
// janitor removes blobs past their retention.
//
// Keys are relative slash-separated paths of letters, digits, '.', '-' and
// '_' ("task_lumen_123/0-1a2b3c4d5e6f7a8b.png"); all file access goes through
// an os.Root, so no key can reach outside the directory.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
)

// Object is an open blob.
type Object interface {
	io.ReadSeekCloser
}

// Info describes a stored blob.
type Info struct {
	Size    int64
	ModTime time.Time
}

// FS is a filesystem blob store.
type FS struct {
	root *os.Root
	dir  string
}

// OpenFS opens (creating it if needed) a blob directory.
func OpenFS(dir string) (*FS, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("blob dir %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("blob dir %s: %w", dir, err)
	}
	return &FS{root: root, dir: dir}, nil
}

// Close releases the directory.
func (s *FS) Close() error { return s.root.Close() }

// Dir returns the directory.
func (s *FS) Dir() string { return s.dir }

// ValidKey reports whether key is a well-formed blob key.
func ValidKey(key string) bool {
	if key == "" || len(key) > 512 || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return false
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Put stores the bytes of r under key, atomically: readers see the whole blob
// or none. It returns the number of bytes written.
func (s *FS) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if !ValidKey(key) {
		return 0, fmt.Errorf("blob: invalid key %q", key)
	}
	if dir := path.Dir(key); dir != "." {
		if err := s.root.MkdirAll(dir, 0o755); err != nil {
			return 0, fmt.Errorf("blob: %w", err)
		}
	}
	tmp := path.Join(path.Dir(key), fmt.Sprintf(".tmp-%s-%d", path.Base(key), time.Now().UnixNano()))
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fmt.Errorf("blob: %w", err)
	}
	n, err := io.Copy(f, ctxReader{ctx, r})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.root.Rename(tmp, key)
	}
	if err != nil {
		_ = s.root.Remove(tmp)
		return 0, fmt.Errorf("blob: put %s: %w", key, err)
	}
	return n, nil
}

// Touch marks an existing blob as fresh (so the janitor keeps it another
// retention period) and reports whether it exists: a writer of
// content-addressed blobs skips writing bytes already stored.
func (s *FS) Touch(_ context.Context, key string) (bool, error) {
	if !ValidKey(key) {
		return false, fmt.Errorf("blob: invalid key %q", key)
	}
	now := time.Now()
	err := s.root.Chtimes(key, now, now)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("blob: touch %s: %w", key, err)
}

// Open opens a blob for reading. A missing blob is apperr.NotFound.
func (s *FS) Open(_ context.Context, key string) (Object, Info, error) {
	if !ValidKey(key) {
		return nil, Info{}, apperr.New(apperr.NotFound, "file not found")
	}
	f, err := s.root.Open(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, apperr.New(apperr.NotFound, "file not found")
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("blob: open %s: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, Info{}, apperr.Wrap(err, apperr.NotFound, "file not found")
	}
	return f, Info{Size: st.Size(), ModTime: st.ModTime()}, nil
}

// Sweep removes blobs (and leftover temporary files) last modified before
// cutoff, then empty directories that have not changed since cutoff either (so
// a directory a writer has just made is never pulled from under it). It
// returns how many files it removed.
func (s *FS) Sweep(ctx context.Context, cutoff time.Time) (int, error) {
	removed := 0
	var dirs []string
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by another janitor meanwhile
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		info, err := d.Info()
		if err != nil {
			return nil // vanished meanwhile
		}
		if d.IsDir() {
			// A directory untouched since cutoff: no writer is using it.
			if p != "." && info.ModTime().Before(cutoff) {
				dirs = append(dirs, p)
			}
			return nil
		}
		if info.ModTime().Before(cutoff) {
			if err := s.root.Remove(p); err == nil {
				removed++
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	})
	// Deepest first; Remove fails (harmlessly) on a directory that is not empty.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = s.root.Remove(dirs[i])
	}
	return removed, err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
