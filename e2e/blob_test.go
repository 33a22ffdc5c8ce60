package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/tools/testkit/s3proc"
	"github.com/easelhq/easel/tools/testkit/s3test"
)

// The suite's result store: a directory, or with EASEL_E2E_BLOB=s3 a bucket
// on a private MinIO. make test runs the suite on directories; the stores
// themselves are held to one contract in pkg/blob (TestStores, both stores),
// and TestDownloadRedirect runs a whole flow on S3. One MinIO serves the
// test process; each stack gets a bucket of its own.
var (
	minioOnce sync.Once
	minio     *s3proc.Proc
	minioErr  error
	minioDir  string
	buckets   atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	binaries.Remove()
	if minio != nil {
		minio.Stop()
		_ = os.RemoveAll(minioDir)
	}
	os.Exit(code)
}

// blobEnv is the environment that gives a stack its own result store.
func blobEnv(t *testing.T) map[string]string {
	t.Helper()
	switch kind := os.Getenv("EASEL_E2E_BLOB"); kind {
	case "", "file":
		return map[string]string{"EASEL_BLOB_URL": "file://" + t.TempDir()}
	case "s3":
		return s3Env(t)
	default:
		t.Fatalf("EASEL_E2E_BLOB=%q: want file or s3", kind)
	}
	return nil
}

// s3Env makes a bucket on the suite's MinIO and returns the settings that
// name it.
func s3Env(t *testing.T) map[string]string {
	t.Helper()
	s3test.SkipShortUnbuilt(t)
	minioOnce.Do(func() {
		if minioDir, minioErr = os.MkdirTemp("", "easel-e2e-minio-"); minioErr == nil {
			minio, minioErr = s3proc.Start(context.Background(), minioDir)
		}
	})
	if minioErr != nil {
		t.Fatalf("start the S3 server: %v", minioErr)
	}
	bucket := fmt.Sprintf("e2e-%d", buckets.Add(1))
	opts := blob.S3Options{Endpoint: minio.Endpoint, PathStyle: true, AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey}
	st, err := blob.OpenS3(context.Background(), bucket, "", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"EASEL_BLOB_URL":             "s3://" + bucket + "/results",
		"EASEL_S3_ENDPOINT":          minio.Endpoint,
		"EASEL_S3_PATH_STYLE":        "true",
		"EASEL_S3_ACCESS_KEY_ID":     minio.AccessKey,
		"EASEL_S3_SECRET_ACCESS_KEY": minio.SecretKey,
	}
}

// With EASEL_BLOB_REDIRECT a verified download is a 302 to a presigned URL
// of the bucket, good until the result URL expires; what fails verification
// is refused by the gateway as before, and never redirected.
func TestDownloadRedirect(t *testing.T) {
	t.Parallel()
	env := s3Env(t)
	env["EASEL_BLOB_REDIRECT"] = "true"
	s := startStack(t, stackOptions{env: env})
	c := newClient(t, s.base, s.key)
	id := c.create(createBody(std, `{"prompt":"a lighthouse"}`))
	rec, _, _ := c.poll(id, 30*time.Second)
	if rec.Status != "completed" || len(rec.Results) != 1 {
		t.Fatalf("task %+v", rec)
	}
	u, err := url.Parse(rec.Results[0])
	if err != nil {
		t.Fatal(err)
	}
	noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(rec.Results[0])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, env["EASEL_S3_ENDPOINT"]+"/") {
		t.Fatalf("download: %d, Location %q; want 302 to the bucket", resp.StatusCode, loc)
	}
	exp, _ := strconv.ParseInt(u.Query().Get("expires"), 10, 64)
	if left := time.Until(time.Unix(exp, 0)); !strings.Contains(loc, "X-Amz-Expires=") || left < 23*time.Hour {
		t.Errorf("presigned %s for a result URL with %v left", loc, left)
	}
	// The bucket serves the image, ranges too.
	_, format, whole := newClient(t, "", "").download(loc)
	if format != "png" || len(whole) < 100 {
		t.Fatalf("image behind the redirect: %s, %d bytes", format, len(whole))
	}
	st, _, part := newClient(t, "", "").do("GET", loc, "", map[string]string{"Range": "bytes=0-7"})
	if st != 206 || string(part) != string(whole[:8]) {
		t.Errorf("range behind the redirect: %d %q", st, part)
	}
	// Tampered or expired: refused by the gateway, no redirect.
	for name, path := range map[string]string{
		"tampered": strings.Replace(u.RequestURI(), ".png", "0.png", 1),
		"expired":  signURL(u.Path, time.Now().Add(-time.Minute)),
	} {
		resp, err := noFollow.Get(s.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 && resp.StatusCode != 410 || resp.Header.Get("Location") != "" {
			t.Errorf("%s URL: %d, Location %q; want 403 or 410 without a redirect", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}
