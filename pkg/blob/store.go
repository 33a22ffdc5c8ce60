package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Store is where results are kept: a directory (FS) or an S3 bucket (S3).
// The gateway opens blobs, the workers put and touch them, and the workers'
// janitor sweeps them.
type Store interface {
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	Touch(ctx context.Context, key string) (bool, error)
	Open(ctx context.Context, key string) (Object, Info, error)
	Sweep(ctx context.Context, cutoff time.Time) (int, error)
	Close() error
	// String says where the store is, without credentials, for logs.
	String() string
}

// Config names a store: EASEL_BLOB_URL and, for S3, how to reach it.
type Config struct {
	// URL is file:///absolute/path (a directory every gateway and worker
	// shares) or s3://bucket/prefix.
	URL string
	S3  S3Options
}

// URLForms says which URLs EASEL_BLOB_URL takes.
const URLForms = "file:///absolute/path (a directory the gateway and workers share) or s3://bucket[/prefix] (an S3-compatible bucket)"

// Location is a parsed store URL.
type Location struct {
	Scheme string // "file" or "s3"
	Dir    string // file: the directory
	Bucket string // s3
	Prefix string // s3: "" or ending in "/"
}

// ParseURL reads a store URL (URLForms).
func ParseURL(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("want %s", URLForms)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Location{}, fmt.Errorf("no user, query or fragment: credentials and options have variables of their own; want %s", URLForms)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("file URL with host %q: want file:///absolute/path", u.Host)
		}
		if !filepath.IsAbs(u.Path) {
			return Location{}, fmt.Errorf("file URL: want an absolute path, file:///absolute/path")
		}
		return Location{Scheme: "file", Dir: filepath.Clean(u.Path)}, nil
	case "s3":
		if !validBucket(u.Host) {
			return Location{}, fmt.Errorf("s3 bucket %q: want 3 to 63 lowercase letters, digits, '.' and '-'", u.Host)
		}
		prefix := strings.Trim(u.Path, "/")
		if prefix != "" {
			if !ValidKey(prefix) {
				return Location{}, fmt.Errorf("s3 prefix %q: want letters, digits, '.', '-', '_' and '/'", prefix)
			}
			prefix += "/"
		}
		return Location{Scheme: "s3", Bucket: u.Host, Prefix: prefix}, nil
	}
	return Location{}, fmt.Errorf("scheme %q: want %s", u.Scheme, URLForms)
}

// validBucket reports whether name is a bucket name S3 accepts.
func validBucket(name string) bool {
	if len(name) < 3 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	first, last := name[0], name[len(name)-1]
	return first != '.' && first != '-' && last != '.' && last != '-'
}

// Open opens the store c names. It does not contact an S3 service.
func Open(ctx context.Context, c Config) (Store, error) {
	loc, err := ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	switch loc.Scheme {
	case "file":
		return OpenFS(loc.Dir)
	case "s3":
		return OpenS3(ctx, loc.Bucket, loc.Prefix, c.S3)
	}
	return nil, errors.New("blob store: unreachable")
}
