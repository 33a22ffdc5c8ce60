package api_test

import (
	"context"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// putDownload stores data under key and returns the path of a URL signed for
// it.
func (e *env) putDownload(key string, data []byte) string {
	e.T.Helper()
	if data != nil {
		if _, err := e.Blobs.Put(context.Background(), key, strings.NewReader(string(data))); err != nil {
			e.T.Fatal(err)
		}
	}
	signed, err := url.Parse(e.Signer.Sign("/v1/files/"+key, e.Now.Add(time.Hour)))
	if err != nil {
		e.T.Fatal(err)
	}
	return signed.RequestURI()
}

// ranges returns a Range header naming n one-byte ranges, two bytes apart.
func ranges(n int) string {
	specs := make([]string, n)
	for i := range specs {
		specs[i] = strconv.Itoa(2*i) + "-" + strconv.Itoa(2*i)
	}
	return "bytes=" + strings.Join(specs, ",")
}

type part struct {
	contentRange string
	body         string
}

// parts reads a multipart/byteranges reply.
func parts(t *testing.T, r reply) []part {
	t.Helper()
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" {
		t.Fatalf("Content-Type %q; want multipart/byteranges", r.Header.Get("Content-Type"))
	}
	var ps []part
	mr := multipart.NewReader(strings.NewReader(string(r.Body)), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return ps
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, part{p.Header.Get("Content-Range"), string(b)})
	}
}

func TestDownloadRanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// Large enough that 16,000 one-byte ranges two bytes apart fit in it (so
	// net/http does not fall back to the whole file on its own).
	data := []byte("\x89PNG\r\n\x1a\n" + strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz", 1000))
	size := strconv.Itoa(len(data))
	key := "2026112214/0123456789abcdef0123456789abcdef.png"
	path := e.putDownload(key, data)
	const tag = `"0123456789abcdef0123456789abcdef"`

	tests := []struct {
		name   string
		method string
		hdr    map[string]string
		status int
		// body is the whole reply body, checked when parts is nil and the
		// reply is not an error envelope.
		body         string
		contentRange string
		parts        []part
	}{
		{name: "no Range", status: 200, body: string(data)},
		{name: "one range", hdr: map[string]string{"Range": "bytes=8-17"}, status: 206, body: "0123456789", contentRange: "bytes 8-17/" + size},
		{name: "two ranges", hdr: map[string]string{"Range": "bytes=0-3,8-9"}, status: 206, parts: []part{
			{"bytes 0-3/" + size, "\x89PNG"}, {"bytes 8-9/" + size, "01"},
		}},
		{name: "empty list elements are not ranges", hdr: map[string]string{"Range": "bytes=0-3,,,,,,,,,,,,8-9"}, status: 206, parts: []part{
			{"bytes 0-3/" + size, "\x89PNG"}, {"bytes 8-9/" + size, "01"},
		}},
		{name: "eight ranges, the most served", hdr: map[string]string{"Range": ranges(8)}, status: 206, parts: []part{
			{"bytes 0-0/" + size, "\x89"}, {"bytes 2-2/" + size, "N"}, {"bytes 4-4/" + size, "\r"}, {"bytes 6-6/" + size, "\x1a"},
			{"bytes 8-8/" + size, "0"}, {"bytes 10-10/" + size, "2"}, {"bytes 12-12/" + size, "4"}, {"bytes 14-14/" + size, "6"},
		}},
		{name: "nine ranges: the whole file", hdr: map[string]string{"Range": ranges(9)}, status: 200, body: string(data)},
		{name: "16000 ranges: the whole file", hdr: map[string]string{"Range": ranges(16000)}, status: 200, body: string(data)},
		{name: "HEAD with nine ranges", method: "HEAD", hdr: map[string]string{"Range": ranges(9)}, status: 200},
		{name: "If-None-Match wins over nine ranges", hdr: map[string]string{"Range": ranges(9), "If-None-Match": tag}, status: 304},
		{name: "zero-length suffix", hdr: map[string]string{"Range": "bytes=-0"}, status: 416, contentRange: "bytes */" + size},
		{name: "zero-length suffixes only", hdr: map[string]string{"Range": "bytes=-0, -00"}, status: 416, contentRange: "bytes */" + size},
		{name: "zero-length suffix and a range past the end", hdr: map[string]string{"Range": "bytes=-0,99999-"}, status: 416, contentRange: "bytes */" + size},
		{name: "HEAD with a zero-length suffix", method: "HEAD", hdr: map[string]string{"Range": "bytes=-0"}, status: 416, contentRange: "bytes */" + size},
		{name: "zero-length suffix dropped before a range", hdr: map[string]string{"Range": "bytes=-0,0-3"}, status: 206, body: "\x89PNG", contentRange: "bytes 0-3/" + size},
		{name: "zero-length suffix dropped after a range", hdr: map[string]string{"Range": "bytes=0-3, -0"}, status: 206, body: "\x89PNG", contentRange: "bytes 0-3/" + size},
		{name: "zero-length suffix dropped from two ranges", hdr: map[string]string{"Range": "bytes=0-3,-0,8-9"}, status: 206, parts: []part{
			{"bytes 0-3/" + size, "\x89PNG"}, {"bytes 8-9/" + size, "01"},
		}},
		{name: "non-zero suffix", hdr: map[string]string{"Range": "bytes=-3"}, status: 206, body: "xyz", contentRange: "bytes " + strconv.Itoa(len(data)-3) + "-" + strconv.Itoa(len(data)-1) + "/" + size},
		{name: "If-None-Match wins over a zero-length suffix", hdr: map[string]string{"Range": "bytes=-0", "If-None-Match": tag}, status: 304},
		{name: "failed If-Range ignores a zero-length suffix", hdr: map[string]string{"Range": "bytes=-0", "If-Range": `"other"`}, status: 200, body: string(data)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = "GET"
			}
			r := e.Do(method, path, tt.hdr, "")
			if r.Status >= 400 {
				msg := ""
				if method == "GET" {
					msg = "range"
					assertEnvelope(t, r, tt.status, msg)
				} else if r.Status != tt.status || len(r.Body) != 0 {
					t.Fatalf("%s: %d with %d bytes; want %d and no body", method, r.Status, len(r.Body), tt.status)
				}
			} else if r.Status != tt.status {
				t.Fatalf("status %d; want %d (Content-Range %q)", r.Status, tt.status, r.Header.Get("Content-Range"))
			}
			if got := r.Header.Get("Content-Range"); got != tt.contentRange {
				t.Errorf("Content-Range %q; want %q", got, tt.contentRange)
			}
			if r.Status < 300 && r.Header.Get("ETag") != tag {
				t.Errorf("ETag %q; want %s", r.Header.Get("ETag"), tag)
			}
			switch {
			case tt.parts != nil:
				got := parts(t, r)
				if len(got) != len(tt.parts) {
					t.Fatalf("%d parts; want %d", len(got), len(tt.parts))
				}
				for i := range got {
					if got[i] != tt.parts[i] {
						t.Errorf("part %d = %q; want %q", i, got[i], tt.parts[i])
					}
				}
			case method == "HEAD":
				if len(r.Body) != 0 {
					t.Errorf("HEAD body of %d bytes", len(r.Body))
				}
				if tt.status == 200 && r.Header.Get("Content-Length") != size {
					t.Errorf("HEAD Content-Length %q; want %s", r.Header.Get("Content-Length"), size)
				}
			case r.Status < 400:
				if string(r.Body) != tt.body {
					t.Errorf("body of %d bytes %.40q; want %d bytes %.40q", len(r.Body), r.Body, len(tt.body), tt.body)
				}
				if r.Status != 304 && r.Header.Get("Content-Length") != strconv.Itoa(len(tt.body)) {
					t.Errorf("Content-Length %q; want %d", r.Header.Get("Content-Length"), len(tt.body))
				}
			}
		})
	}
}

// A symlink in the blob directory is never a blob: whatever it points at,
// its key is 404, like a missing blob.
func TestDownloadSymlink(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	dir := e.Blobs.Dir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.png"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	real := e.putDownload("2026112214/real.png", []byte("\x89PNG real"))
	if r := e.Do("GET", real, nil, ""); r.Status != 200 {
		t.Fatalf("GET of a regular blob: %d %s", r.Status, r.Body)
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, filepath.FromSlash(name))); err != nil {
			t.Skip("symlinks unsupported:", err)
		}
	}
	link(filepath.Join(outside, "secret.png"), "2026112214/out.png")
	link("real.png", "2026112214/in.png")
	link("2026112214", "linkdir")
	link(outside, "outdir")

	for _, key := range []string{
		"2026112214/out.png", // a file outside the directory
		"2026112214/in.png",  // a blob inside it
		"linkdir/real.png",   // through a directory inside it
		"outdir/secret.png",  // through a directory outside it
	} {
		t.Run(key, func(t *testing.T) {
			assertEnvelope(t, e.Do("GET", e.putDownload(key, nil), nil, ""), 404, "not found")
		})
	}
}

// A result has one URL: the one the gateway signed. Spellings a URL parser
// reads as the same URL (an escaped path, a padded or re-signed expiry,
// another last character of the signature that decodes to the same MAC,
// escaped or repeated parameters) are refused with 403, not served.
func TestDownloadCanonicalURLOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const dir, file = "2026112214", "0123456789abcdef0123456789abcdef.png"
	signed := e.putDownload(dir+"/"+file, []byte("\x89PNG canonical"))
	u, err := url.Parse(signed)
	if err != nil {
		t.Fatal(err)
	}
	exp, sig := u.Query().Get("expires"), u.Query().Get("sig")
	if signed != "/v1/files/"+dir+"/"+file+"?expires="+exp+"&sig="+sig {
		t.Fatalf("signed URL %s is not in the form this test varies", signed)
	}
	for _, method := range []string{"GET", "HEAD"} {
		if r := e.Do(method, signed, nil, ""); r.Status != 200 {
			t.Fatalf("%s of the signed URL: %d %s", method, r.Status, r.Body)
		}
	}

	at := func(path string) string { return path + "?expires=" + exp + "&sig=" + sig }
	with := func(expires, sig string) string {
		return "/v1/files/" + dir + "/" + file + "?expires=" + expires + "&sig=" + sig
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	tests := []struct{ name, url string }{
		{"%2F for the slash", at("/v1/files/" + dir + "%2F" + file)},
		{"%2f for the slash", at("/v1/files/" + dir + "%2f" + file)},
		{"an escaped digit", at("/v1/files/%32" + dir[1:] + "/" + file)},
		{"an escaped dot", at("/v1/files/" + dir + "/" + strings.Replace(file, ".png", "%2Epng", 1))},
		{"expires with a plus sign, escaped", with("%2B"+exp, sig)},
		{"expires with a plus sign", with("+"+exp, sig)},
		{"expires with a leading zero", with("0"+exp, sig)},
		{"expires with leading zeros", with("000"+exp, sig)},
		{"expires escaped", with("%3"+exp, sig)},
		{"sig escaped", with(exp, "%"+strconv.FormatInt(int64(sig[0]), 16)+sig[1:])},
		{"sig padded", with(exp, sig+"=")},
		{"sig repeated", with(exp, sig) + "&sig=" + sig},
		{"expires repeated", with(exp, sig) + "&expires=" + exp},
		{"sig repeated, a wrong one first", with(exp, strings.Repeat("A", len(sig))) + "&sig=" + sig},
	}
	for v := last &^ 3; v < last&^3+4; v++ {
		if v != last {
			tests = append(tests, struct{ name, url string }{"sig ending in " + alphabet[v:v+1] + ", the same MAC", with(exp, sig[:len(sig)-1]+alphabet[v:v+1])})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.url == signed {
				t.Fatal("not a variant")
			}
			assertEnvelope(t, e.Do("GET", tt.url, nil, ""), 403, "signature")
		})
	}
}
