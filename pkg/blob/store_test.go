package blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/tools/testkit/s3test"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url  string
		want Location
		err  string
	}{
		{"file:///var/lib/easel/blobs", Location{Scheme: "file", Dir: "/var/lib/easel/blobs"}, ""},
		{"file:///var/lib/easel/blobs/", Location{Scheme: "file", Dir: "/var/lib/easel/blobs"}, ""},
		{"file://localhost/tmp/x", Location{Scheme: "file", Dir: "/tmp/x"}, ""},
		{"s3://easel-results", Location{Scheme: "s3", Bucket: "easel-results"}, ""},
		{"s3://easel-results/", Location{Scheme: "s3", Bucket: "easel-results"}, ""},
		{"s3://easel-results/prod/results", Location{Scheme: "s3", Bucket: "easel-results", Prefix: "prod/results/"}, ""},
		{"file://relative/path", Location{}, "host"},
		{"file:relative", Location{}, "absolute"},
		{"/var/lib/easel", Location{}, "scheme"},
		{"gs://bucket", Location{}, "scheme"},
		{"s3://", Location{}, "bucket"},
		{"s3://Upper", Location{}, "bucket"},
		{"s3://ab", Location{}, "bucket"},
		{"s3://bucket/../up", Location{}, "prefix"},
		{"s3://bucket/a b", Location{}, "prefix"},
		{"s3://key:secret@bucket/x", Location{}, "no user"},
		{"s3://bucket/x?region=eu", Location{}, "no user"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			got, err := ParseURL(tt.url)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseURL(%q) = %+v, %v; want an error about %q", tt.url, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseURL(%q) = %+v, %v; want %+v", tt.url, got, err, tt.want)
			}
		})
	}
}

// newS3 starts an S3 server, makes bucket there and opens a store on it
// through its URL.
func newS3(t *testing.T, bucket, prefix string) (*S3, *s3test.Server) {
	t.Helper()
	srv := s3test.Start(t)
	return openS3(t, srv, bucket, prefix), srv
}

// openS3 makes bucket on srv if it is not there and opens a store on it,
// under prefix, through its URL.
func openS3(t *testing.T, srv *s3test.Server, bucket, prefix string) *S3 {
	t.Helper()
	ctx := context.Background()
	st, err := Open(ctx, Config{URL: "s3://" + bucket + "/" + prefix, S3: S3Options{
		Endpoint: srv.Endpoint, PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*S3)
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		var owned *types.BucketAlreadyOwnedByYou
		if !errors.As(err, &owned) {
			t.Fatal(err)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// The blob-store contract: what the workers write (Put, Touch), the gateway
// reads back whole or from any offset (Open, Seek) and serves with
// http.ServeContent (ranges, HEAD, conditional requests), and the janitor
// sweeps by age. Every case runs on both stores, opened through Open as the
// services open them: a directory, and a bucket (under a prefix) on a
// private MinIO. Each case has a store of its own: a directory of its own, a
// prefix of its own in one bucket.
var contract = []struct {
	name string
	run  func(t *testing.T, s Store)
}{
	{"missing blob", contractMissing},
	{"put and read back", contractPutRead},
	{"invalid keys", contractInvalidKeys},
	{"a second put replaces", contractReplace},
	{"served over HTTP", contractServe},
	{"touch and sweep by age", contractTouchSweep},
}

func TestStores(t *testing.T) {
	stores := map[string]func(t *testing.T, i int) Store{
		"file": func(t *testing.T, _ int) Store {
			fs, err := Open(context.Background(), Config{URL: "file://" + filepath.Join(t.TempDir(), "blobs")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fs.Close() })
			return fs
		},
	}
	var srv *s3test.Server
	stores["s3"] = func(t *testing.T, i int) Store {
		return openS3(t, srv, "results", fmt.Sprintf("prod/case%d", i))
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			if name == "s3" {
				srv = s3test.Start(t)
			}
			for i, c := range contract {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, open(t, i))
				})
			}
		})
	}
}

const (
	contractKey = "2026112214/a75d6ee8b6feafeb0c3a0b5c1e0f9d21.png"
	contractOld = "2026112213/0123456789abcdef0123456789abcdef.webp"
)

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func contractMissing(t *testing.T, s Store) {
	ctx := context.Background()
	if ok, err := s.Touch(ctx, contractKey); ok || err != nil {
		t.Fatalf("Touch of a missing blob = %v, %v; want false, nil", ok, err)
	}
	if _, _, err := s.Open(ctx, contractKey); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("Open of a missing blob: %v; want not found", err)
	}
	if n, err := s.Sweep(ctx, time.Now().Add(time.Hour)); n != 0 || err != nil {
		t.Fatalf("Sweep of an empty store = %d, %v", n, err)
	}
}

func contractPutRead(t *testing.T, s Store) {
	ctx := context.Background()
	data := randomBytes(300_000)
	before := time.Now().Add(-time.Second)
	// A reader of unknown length, as well as the bytes.Reader the worker
	// passes.
	n, err := s.Put(ctx, contractKey, io.MultiReader(bytes.NewReader(data[:1000]), bytes.NewReader(data[1000:])))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Put = %d, %v", n, err)
	}
	if n, err := s.Put(ctx, contractOld, bytes.NewReader([]byte("webp"))); err != nil || n != 4 {
		t.Fatalf("Put = %d, %v", n, err)
	}
	if got := readAll(t, s, contractOld); string(got) != "webp" {
		t.Errorf("read back %q", got)
	}

	obj, info, err := s.Open(ctx, contractKey)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if info.Size != int64(len(data)) || info.ModTime.Before(before) || info.ModTime.After(time.Now().Add(time.Second)) {
		t.Errorf("info %+v; want size %d, modified now", info, len(data))
	}
	// As ServeContent reads: the size by seeking to the end, back to the
	// start, then ranges anywhere.
	if end, err := obj.Seek(0, io.SeekEnd); err != nil || end != int64(len(data)) {
		t.Fatalf("Seek end = %d, %v", end, err)
	}
	for _, r := range []struct{ off, n int64 }{{0, 10}, {250_000, 50_000}, {5, 100}, {299_990, 10}, {100_000, 1}} {
		if _, err := obj.Seek(r.off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, r.n)
		if _, err := io.ReadFull(obj, got); err != nil {
			t.Fatalf("read %d at %d: %v", r.n, r.off, err)
		}
		if !bytes.Equal(got, data[r.off:r.off+r.n]) {
			t.Fatalf("bytes at %d differ", r.off)
		}
	}
	if _, err := obj.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(all, data) {
		t.Fatalf("whole read: %d bytes, %v", len(all), err)
	}
	if err := obj.Close(); err != nil {
		t.Error(err)
	}
}

func contractInvalidKeys(t *testing.T, s Store) {
	ctx := context.Background()
	for _, bad := range []string{"../etc/passwd", "", "h/", ".tmp", "/abs.png", "a//b.png"} {
		if _, _, err := s.Open(ctx, bad); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("Open(%q) = %v; want not found", bad, err)
		}
		if _, err := s.Put(ctx, bad, strings.NewReader("x")); err == nil {
			t.Errorf("Put(%q) succeeded", bad)
		}
		if ok, err := s.Touch(ctx, bad); ok || err == nil {
			t.Errorf("Touch(%q) = %v, %v; want an error", bad, ok, err)
		}
	}
}

// Identical results share a key: a second Put of it replaces the blob whole,
// never leaving a mix of the two or the first's length.
func contractReplace(t *testing.T, s Store) {
	ctx := context.Background()
	first, second := randomBytes(50_000), randomBytes(20_000)
	for _, b := range [][]byte{first, second} {
		if n, err := s.Put(ctx, contractKey, bytes.NewReader(b)); err != nil || n != int64(len(b)) {
			t.Fatalf("Put = %d, %v", n, err)
		}
	}
	if got := readAll(t, s, contractKey); !bytes.Equal(got, second) {
		t.Errorf("after two Puts: %d bytes; want the second's %d", len(got), len(second))
	}
	_, info, err := s.Open(ctx, contractKey)
	if err != nil || info.Size != int64(len(second)) {
		t.Errorf("Open after two Puts: %+v, %v", info, err)
	}
}

// The gateway serves a blob with http.ServeContent on the Object: every
// request it answers must come out the same from either store.
func contractServe(t *testing.T, s Store) {
	ctx := context.Background()
	data := randomBytes(100_000)
	if _, err := s.Put(ctx, contractKey, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	const etag = `"a75d6ee8b6feafeb0c3a0b5c1e0f9d21"`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		obj, info, err := s.Open(r.Context(), contractKey)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer obj.Close()
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", ContentType(contractKey))
		http.ServeContent(w, r, path.Base(contractKey), info.ModTime, obj)
	}))
	defer srv.Close()
	size := len(data)
	for _, tc := range []struct {
		name, method string
		header       map[string]string
		status       int
		body         []byte // nil: checked by check
		check        func(h http.Header, body []byte) string
	}{
		{"whole", "GET", nil, 200, data, nil},
		{"HEAD", "HEAD", nil, 200, []byte{}, func(h http.Header, _ []byte) string {
			if h.Get("Content-Length") != strconv.Itoa(size) {
				return "Content-Length " + h.Get("Content-Length")
			}
			return ""
		}},
		{"a range", "GET", map[string]string{"Range": "bytes=1000-1999"}, 206, data[1000:2000], func(h http.Header, _ []byte) string {
			if want := fmt.Sprintf("bytes 1000-1999/%d", size); h.Get("Content-Range") != want {
				return "Content-Range " + h.Get("Content-Range")
			}
			return ""
		}},
		{"an open range", "GET", map[string]string{"Range": "bytes=99990-"}, 206, data[99_990:], nil},
		{"a suffix range", "GET", map[string]string{"Range": "bytes=-10"}, 206, data[size-10:], nil},
		{"two ranges", "GET", map[string]string{"Range": "bytes=1-2,50000-50002"}, 206, nil, func(h http.Header, b []byte) string {
			if !strings.HasPrefix(h.Get("Content-Type"), "multipart/byteranges") || !bytes.Contains(b, data[1:3]) || !bytes.Contains(b, data[50_000:50_003]) {
				return "multipart body of " + h.Get("Content-Type")
			}
			return ""
		}},
		{"past the end", "GET", map[string]string{"Range": fmt.Sprintf("bytes=%d-", size)}, 416, nil, func(h http.Header, _ []byte) string {
			if want := fmt.Sprintf("bytes */%d", size); h.Get("Content-Range") != want {
				return "Content-Range " + h.Get("Content-Range")
			}
			return ""
		}},
		{"If-None-Match", "GET", map[string]string{"If-None-Match": etag}, 304, []byte{}, nil},
		{"If-Range of another version", "GET", map[string]string{"Range": "bytes=0-9", "If-Range": `"other"`}, 200, data, nil},
	} {
		req, err := http.NewRequest(tc.method, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d; want %d", tc.name, resp.StatusCode, tc.status)
			continue
		}
		if tc.body != nil && !bytes.Equal(body, tc.body) {
			t.Errorf("%s: %d bytes, not the %d expected", tc.name, len(body), len(tc.body))
		}
		if tc.check != nil {
			if msg := tc.check(resp.Header, body); msg != "" {
				t.Errorf("%s: %s", tc.name, msg)
			}
		}
	}
}

// The janitor goes by age; touching a blob makes it young again.
func contractTouchSweep(t *testing.T, s Store) {
	ctx := context.Background()
	data := randomBytes(10_000)
	if _, err := s.Put(ctx, contractKey, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, contractOld, bytes.NewReader([]byte("webp"))); err != nil {
		t.Fatal(err)
	}
	_, info, err := s.Open(ctx, contractKey)
	if err != nil {
		t.Fatal(err)
	}
	_, old, err := s.Open(ctx, contractOld)
	if err != nil {
		t.Fatal(err)
	}
	// S3 dates have a resolution of a second: a Touch shows once the
	// second has turned, so it is tried until it does (at most 5 s). A
	// file's may be finer than the cutoff's millisecond below: the touch
	// is tried until the cutoff falls after the old blob's date too.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var touched Info
	for deadline := time.Now().Add(5 * time.Second); ; <-tick.C {
		if ok, err := s.Touch(ctx, contractKey); !ok || err != nil {
			t.Fatalf("Touch = %v, %v", ok, err)
		}
		if _, touched, err = s.Open(ctx, contractKey); err != nil {
			t.Fatal(err)
		}
		if touched.ModTime.After(info.ModTime) && touched.ModTime.Add(-time.Millisecond).After(old.ModTime) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("modified %v after Touch; was %v", touched.ModTime, info.ModTime)
		}
	}
	if got := readAll(t, s, contractKey); !bytes.Equal(got, data) {
		t.Error("Touch changed the content")
	}
	cutoff := touched.ModTime.Add(-time.Millisecond)
	removed, err := s.Sweep(ctx, cutoff)
	if err != nil || removed != 1 {
		t.Fatalf("Sweep = %d, %v; want the one untouched blob", removed, err)
	}
	if _, _, err := s.Open(ctx, contractOld); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("the old blob after Sweep: %v", err)
	}
	if got := readAll(t, s, contractKey); !bytes.Equal(got, data) {
		t.Error("the touched blob was swept")
	}
	if removed, err := s.Sweep(ctx, cutoff); err != nil || removed != 0 {
		t.Errorf("a second Sweep = %d, %v; want nothing left to remove", removed, err)
	}
}

func readAll(t *testing.T, s Store, key string) []byte {
	t.Helper()
	obj, _, err := s.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestS3 is what only the bucket store does: keys under its prefix,
// presigned URLs, the lifecycle rule that replaces the janitor, and errors
// that are retryable 503s, never internal details.
func TestS3(t *testing.T) {
	ctx := context.Background()
	s, srv := newS3(t, "easel-results", "prod")
	const key = "2026112214/0123456789abcdef0123456789abcdef.jpg"
	if _, err := s.Put(ctx, key, strings.NewReader("jpeg bytes")); err != nil {
		t.Fatal(err)
	}

	// The object sits under the prefix, with its content type.
	head, err := s.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("easel-results"), Key: aws.String("prod/" + key)})
	if err != nil {
		t.Fatal(err)
	}
	if ct := aws.ToString(head.ContentType); ct != "image/jpeg" {
		t.Errorf("content type %q", ct)
	}
	if _, err := s.Touch(ctx, key); err != nil {
		t.Fatal(err)
	}
	head, _ = s.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("easel-results"), Key: aws.String("prod/" + key)})
	if ct := aws.ToString(head.ContentType); ct != "image/jpeg" {
		t.Errorf("content type %q after Touch", ct)
	}

	// A presigned URL serves the blob to anyone, for its lifetime only.
	u, err := s.Presign(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, srv.Endpoint+"/easel-results/prod/"+key+"?") || !strings.Contains(u, "X-Amz-Expires=60") {
		t.Errorf("presigned URL %s", u)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "jpeg bytes" {
		t.Errorf("presigned GET: %d %q", resp.StatusCode, body)
	}
	resp, err = http.Get(strings.Replace(u, "X-Amz-Expires=60", "X-Amz-Expires=3600", 1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("tampered presigned URL: %d; want 403", resp.StatusCode)
	}

	// The janitor deletes only results: an object of something else in the
	// bucket stays, however old.
	if _, err := s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("easel-results"), Key: aws.String("prod/notes/readme.txt"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("Sweep of everything older than an hour from now = %d, %v; want the one result", n, err)
	}
	if _, err := s.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("easel-results"), Key: aws.String("prod/notes/readme.txt")}); err != nil {
		t.Errorf("Sweep deleted an object that is not a result: %v", err)
	}

	// Lifecycle rules: the janitor is needed unless an enabled expiration
	// rule covers every blob.
	for _, tt := range []struct {
		name  string
		rules []types.LifecycleRule
		want  time.Duration
	}{
		{"none", nil, 0},
		{"whole bucket", []types.LifecycleRule{rule("all", "", 1)}, 24 * time.Hour},
		{"the prefix", []types.LifecycleRule{rule("prod", "prod/", 2)}, 48 * time.Hour},
		{"another prefix", []types.LifecycleRule{rule("staging", "staging/", 1)}, 0},
		{"part of the prefix", []types.LifecycleRule{rule("hour", "prod/2026112214/", 1)}, 0},
		{"the shortest of two", []types.LifecycleRule{rule("a", "", 3), rule("b", "prod", 1)}, 24 * time.Hour},
	} {
		t.Run("expiry/"+tt.name, func(t *testing.T) {
			if tt.rules == nil {
				_, err = s.Client().DeleteBucketLifecycle(ctx, &s3.DeleteBucketLifecycleInput{Bucket: aws.String("easel-results")})
			} else {
				_, err = s.Client().PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{
					Bucket: aws.String("easel-results"), LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: tt.rules}})
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := s.Expiry(ctx)
			if err != nil || got != tt.want || ok != (tt.want > 0) {
				t.Errorf("Expiry = %v, %v, %v; want %v", got, ok, err, tt.want)
			}
		})
	}

	// Failures are the store being unavailable: retryable, 503, with the
	// cause kept for the logs and out of the message.
	wrong, err := OpenS3(ctx, "easel-results", "", S3Options{Endpoint: srv.Endpoint, PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: "wrong-secret"})
	if err != nil {
		t.Fatal(err)
	}
	missing, err := OpenS3(ctx, "no-such-bucket", "", S3Options{Endpoint: srv.Endpoint, PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*S3{"wrong secret": wrong, "no bucket": missing} {
		_, perr := st.Put(ctx, key, strings.NewReader("x"))
		_, _, oerr := st.Open(ctx, key)
		for _, err := range []error{perr, oerr, st.Check(ctx)} {
			if apperr.CodeOf(err) != apperr.Unavailable || !apperr.IsRetryable(err) || strings.Contains(apperr.MessageOf(err), "no-such-bucket") {
				t.Errorf("%s: %v (code %s, message %q); want a retryable unavailable", name, err, apperr.CodeOf(err), apperr.MessageOf(err))
			}
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, key, strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a cancelled context: %v", err)
	}
}

func rule(id, prefix string, days int32) types.LifecycleRule {
	return types.LifecycleRule{
		ID: aws.String(id), Status: types.ExpirationStatusEnabled,
		Filter:     &types.LifecycleRuleFilter{Prefix: aws.String(prefix)},
		Expiration: &types.LifecycleExpiration{Days: aws.Int32(days)},
	}
}
