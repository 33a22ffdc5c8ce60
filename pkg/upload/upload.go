// Package upload owns the contract between the gateway, which stores the
// images clients upload (POST /v1/uploads) and signs their URLs, and the
// workers, which read them as source images straight from the blob store:
// an upload's blob key (Key) and how a URL is told to be one (FromURL).
//
// An upload's URL is a signed download URL of the gateway, as a result's
// is: FilesPrefix, the key, ?expires=&sig=. It is recognized by its path
// (FilesPrefix + "uploads/") and its signature, never by its host, so the
// gateway's address rules for source URLs (no loopback, no private
// ranges) do not apply to it and no one fetches it over the network.
package upload

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
)

// FilesPrefix starts every signed download URL path (taskview.FilesPrefix).
const FilesPrefix = "/v1/files/"

// Dir is the directory of the blob store that holds uploads.
const Dir = "uploads/"

// TTL is how long an upload's URL is valid, as a result's is.
const TTL = 24 * time.Hour

// MaxBytes is the largest upload: the workers' default per-image limit
// for fetched sources.
const MaxBytes = 20 << 20

// Key returns a new blob key for an upload of media type contentType made
// at at: uploads/<UTC hour>/<32 random hex digits><extension>. The name
// has a result key's shape (blob.ContentHash), so the janitors remove
// uploads as they do results.
func Key(at time.Time, contentType string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return Dir + at.UTC().Format("2006010215") + "/" + hex.EncodeToString(b[:]) + blob.Extension(contentType)
}

// Path returns the URL path of an upload's key, the path that is signed.
func Path(key string) string { return FilesPrefix + key }

// Checker checks a URL's signature: *signedurl.Signer.
type Checker interface {
	// Verify checks the signature and the expiry at now.
	Verify(path, expires, sig string, now time.Time) error
	// Signed checks the signature only.
	Signed(path, expires, sig string) error
}

// FromURL tells whether rawURL is the URL of an upload (by its path) and
// returns its blob key. An upload's URL whose signature is wrong, or that
// has expired at now, is apperr.Invalid, with a message to follow the
// field's name; with a zero now the expiry is not checked (a worker: the
// gateway checked it when it took the task). ok is false, with no error,
// for any other URL.
func FromURL(c Checker, rawURL string, now time.Time) (key string, ok bool, err error) {
	u, perr := url.Parse(rawURL)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false, nil
	}
	p := u.EscapedPath()
	if !strings.HasPrefix(p, FilesPrefix+Dir) {
		return "", false, nil
	}
	q, qerr := url.ParseQuery(u.RawQuery)
	if qerr != nil || len(q["expires"]) != 1 || len(q["sig"]) != 1 {
		return "", true, apperr.New(apperr.Invalid, "is an upload URL without a valid signature")
	}
	expires, sig := q.Get("expires"), q.Get("sig")
	if now.IsZero() {
		err = c.Signed(p, expires, sig)
	} else {
		err = c.Verify(p, expires, sig, now)
	}
	switch apperr.CodeOf(err) {
	case "":
	case apperr.Expired:
		return "", true, apperr.New(apperr.Invalid, "is an upload URL that has expired: uploads are valid for 24 hours; upload the image again")
	default:
		return "", true, apperr.New(apperr.Invalid, "is an upload URL without a valid signature")
	}
	key = strings.TrimPrefix(p, FilesPrefix)
	if !blob.ValidKey(key) {
		return "", true, apperr.New(apperr.Invalid, "is an upload URL without a valid signature")
	}
	return key, true, nil
}
