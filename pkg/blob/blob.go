// Package blob stores result images, and owns the contract between the
// workers, which write them, and the gateway, which serves them: the key of
// a result (ResultKey) and what a key says about its content (ContentType,
// ContentHash).
//
// Two stores hold them (Store, opened from EASEL_BLOB_URL by Open): FS keeps
// blobs in a directory shared by the gateway and the workers, S3 in an
// S3-compatible bucket; the workers' janitor removes blobs past their
// retention (on S3, a bucket lifecycle rule may do it instead). Keys are relative
// slash-separated paths of letters, digits, '.', '-' and '_'; all file access
// goes through an os.Root, so no key can reach outside the directory, and Open
// serves regular files only (never a FIFO, socket, device or directory),
// never through a symlink.
package blob

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
)

// Result keys are content addressed, in a directory per hour:
//
//	<UTC hour, YYYYMMDDHH>/<first 16 bytes of the image's SHA-256, hex><extension>
//	2026112214/a75d6ee8b6feafeb0c3a0b5c1e0f9d21.png
//
// Identical images made in the same hour share one blob; the hour directory
// lets the janitor drop old results a directory at a time.

// formats maps the media types of result images to their extensions; the
// first extension of a type is the one written.
var formats = []struct{ mime, ext string }{
	{"image/png", ".png"},
	{"image/jpeg", ".jpg"},
	{"image/jpeg", ".jpeg"},
	{"image/webp", ".webp"},
	{"image/gif", ".gif"},
}

// ResultKey returns the key of a result image made at at, with content hash
// sum and media type contentType (PNG when it is not one we know).
func ResultKey(at time.Time, sum [32]byte, contentType string) string {
	return at.UTC().Format("2006010215") + "/" + hex.EncodeToString(sum[:16]) + Extension(contentType)
}

// Extension returns the file extension of a result's media type.
func Extension(contentType string) string {
	for _, f := range formats {
		if f.mime == contentType {
			return f.ext
		}
	}
	return ".png"
}

// ContentType returns the media type of a blob by its key's extension.
func ContentType(key string) string {
	ext := path.Ext(key)
	for _, f := range formats {
		if f.ext == ext {
			return f.mime
		}
	}
	return "application/octet-stream"
}

// ContentHash returns the content hash a result key is named by (32 hex
// digits), and false for a key not made by ResultKey.
func ContentHash(key string) (string, bool) {
	base := strings.TrimSuffix(path.Base(key), path.Ext(key))
	if len(base) == 32 && strings.Trim(base, "0123456789abcdef") == "" {
		return base, true
	}
	return "", false
}

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

// String names the store for logs: file:///dir.
func (s *FS) String() string { return "file://" + filepath.ToSlash(s.dir) }

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

// Open opens a blob for reading. A missing blob is *apperr.NotFoundError, and
// so is a symlink, or anything else that is not a regular file (a FIFO, a
// socket, a device, a directory): Easel writes blobs as regular files only,
// so a key that is a symlink, or reaches its file through a directory that
// is one, names no blob, wherever the link points. The error then carries
// the cause, for the logs. Open never waits: a FIFO is opened non-blocking
// (where opening it for reading would wait for a writer) and refused.
func (s *FS) Open(_ context.Context, key string) (Object, Info, error) {
	if !ValidKey(key) {
		return nil, Info{}, errNotFound
	}
	f, err := s.root.OpenFile(key, openFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, errNotFound
	}
	// os.Root follows a symlink that stays in the directory and refuses one
	// that leads out of it with an error of its own (not ErrNotExist): look
	// for one either way. os.Root confines the open itself, so should the
	// path change between the open and this check, what was opened is still
	// a file in the directory.
	link, last, lerr := s.symlinkOnPath(key)
	if link != "" {
		if f != nil {
			_ = f.Close()
		}
		if err != nil {
			return nil, Info{}, fmt.Errorf("%w: %s is a symlink: %v", errNotFound, link, err)
		}
		return nil, Info{}, fmt.Errorf("%w: %s is a symlink", errNotFound, link)
	}
	if lerr == nil && !last.Mode().IsRegular() {
		// Whether the open failed (a socket cannot be opened) or not (a
		// FIFO, a directory), this is no blob.
		if f != nil {
			_ = f.Close()
		}
		return nil, Info{}, fmt.Errorf("%w: %s is not a regular file (%v)", errNotFound, key, last.Mode().Type())
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("blob: open %s: %w", key, err)
	}
	if lerr != nil {
		_ = f.Close()
		if errors.Is(lerr, fs.ErrNotExist) { // removed by the janitor meanwhile
			return nil, Info{}, fmt.Errorf("%w: %v", errNotFound, lerr)
		}
		return nil, Info{}, fmt.Errorf("blob: open %s: %w", key, lerr)
	}
	// What was opened is what is served: the path may have changed since
	// the Lstat above, so the open file itself must be a regular one.
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, Info{}, errNotFound
	}
	return f, Info{Size: st.Size(), ModTime: st.ModTime()}, nil
}

// symlinkOnPath returns the first of key's directories, or key itself, that
// is a symlink, or "" when none is; with "", also what Lstat says of key.
func (s *FS) symlinkOnPath(key string) (string, fs.FileInfo, error) {
	for i := 0; ; {
		p, end := key, true
		if j := strings.IndexByte(key[i:], '/'); j >= 0 {
			p, end = key[:i+j], false
			i += j + 1
		}
		st, err := s.root.Lstat(p)
		if err != nil {
			return "", nil, err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return p, nil, nil
		}
		if end {
			return "", st, nil
		}
	}
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

var errNotFound = &apperr.NotFoundError{Kind: "file"}

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
