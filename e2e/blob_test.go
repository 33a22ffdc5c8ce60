package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/tools/testkit/s3proc"
)

// The suite's result store: a directory, or with EASEL_E2E_BLOB=s3 a bucket
// on a private MinIO (make test runs the whole suite both ways). One MinIO
// serves the test process; each stack gets a bucket of its own.
var (
	minioOnce sync.Once
	minio     *s3proc.Proc
	minioErr  error
	minioDir  string
	buckets   atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
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
