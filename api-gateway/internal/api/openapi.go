package api

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// openapiJSON is the OpenAPI 3.1 document of the public API, written by
// hand; openapi_test.go checks it against the routes and its own schemas,
// and the end-to-end suite checks every request and response against it.
//
//go:embed openapi.json
var openapiJSON []byte

// openapiCacheControl lets clients and proxies keep the document a few
// minutes; after that they revalidate it with its ETag.
const openapiCacheControl = "public, max-age=300"

// openapi handles GET /openapi.json: the OpenAPI document of the public API.
func (h *Handlers) openapi(c echo.Context) error {
	sum := sha256.Sum256(openapiJSON)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	hdr := c.Response().Header()
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", openapiCacheControl)
	if etagMatches(c.Request().Header.Get("If-None-Match"), etag) {
		return c.NoContent(http.StatusNotModified)
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapiJSON)
}

// etagMatches reports whether an If-None-Match header names etag: "*", or
// etag in its list, compared weakly (RFC 9110 §13.1.2).
func etagMatches(ifNoneMatch, etag string) bool {
	for tag := range strings.SplitSeq(ifNoneMatch, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
			return true
		}
	}
	return false
}
