package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/easelhq/easel/pkg/apperr"
)

// S3Options reach an S3-compatible service: AWS S3, MinIO, Cloudflare R2,
// Google Cloud Storage's XML API.
type S3Options struct {
	// Endpoint is the service's URL (http://minio:9000); empty for AWS.
	Endpoint string
	// Region is the bucket's region; empty: AWS_REGION, else us-east-1.
	Region string
	// PathStyle addresses buckets as endpoint/bucket rather than
	// bucket.endpoint: MinIO and most self-hosted services need it.
	PathStyle bool
	// AccessKeyID and SecretAccessKey, when set, are the credentials;
	// otherwise the AWS SDK's default chain finds them (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity as in EKS, instance
	// roles).
	AccessKeyID, SecretAccessKey string
}

// S3 is a blob store in an S3 bucket, under a key prefix. Blobs are written
// whole with PutObject, so readers see all of a blob or none, and read
// with ranged GETs as a reader seeks.
type S3 struct {
	client         *s3.Client
	presign        *s3.PresignClient
	bucket, prefix string
}

// S3 request timeouts: a request that has sent nothing for this long is
// abandoned (the caller's context bounds the whole transfer).
const s3ResponseTimeout = 30 * time.Second

// OpenS3 returns a store for bucket, keeping blobs under prefix ("" or a
// path ending in "/"). It does not contact the service.
func OpenS3(ctx context.Context, bucket, prefix string, o S3Options) (*S3, error) {
	if bucket == "" {
		return nil, errors.New("blob: s3: no bucket")
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if prefix != "" && !ValidKey(strings.TrimSuffix(prefix, "/")) {
		return nil, fmt.Errorf("blob: s3 prefix %q: want letters, digits, '.', '-', '_' and '/'", prefix)
	}
	loads := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = 64
			t.ResponseHeaderTimeout = s3ResponseTimeout
		})),
	}
	if o.Region != "" {
		loads = append(loads, awsconfig.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" || o.SecretAccessKey != "" {
		loads = append(loads, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("blob: s3 configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		// Checksums only where the API requires them: services that speak
		// S3 but not its newer checksum headers (older MinIO, R2, GCS)
		// otherwise refuse uploads.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &S3{client: client, presign: s3.NewPresignClient(client), bucket: bucket, prefix: prefix}, nil
}

// Client is the S3 client the store uses: for tests and tools that set a
// bucket up.
func (s *S3) Client() *s3.Client { return s.client }

// String names the store for logs: s3://bucket/prefix.
func (s *S3) String() string { return "s3://" + s.bucket + "/" + s.prefix }

// Close releases nothing: the client holds only idle connections.
func (s *S3) Close() error { return nil }

func (s *S3) objectKey(key string) string { return s.prefix + key }

// Check asks for the bucket (HeadBucket), so a service can say at start that
// its store is missing or refuses its credentials.
func (s *S3) Check(ctx context.Context) error {
	if _, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)}); err != nil {
		return s.fail(err, "check bucket", "")
	}
	return nil
}

// Put stores the bytes of r under key with one PutObject: readers see the
// whole blob or none.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if !ValidKey(key) {
		return 0, fmt.Errorf("blob: invalid key %q", key)
	}
	// The SDK signs the payload, so it needs to know its length and to read
	// it again on a retry: results are held in memory already.
	body, ok := r.(io.ReadSeeker)
	var n int64
	if ok {
		end, err := body.Seek(0, io.SeekEnd)
		if err == nil {
			var start int64
			start, err = body.Seek(0, io.SeekStart)
			n = end - start
		}
		if err != nil {
			return 0, fmt.Errorf("blob: put %s: %w", key, err)
		}
	} else {
		b, err := io.ReadAll(ctxReader{ctx, r})
		if err != nil {
			return 0, fmt.Errorf("blob: put %s: %w", key, err)
		}
		body, n = bytes.NewReader(b), int64(len(b))
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.objectKey(key)),
		Body:          body,
		ContentLength: aws.Int64(n),
		ContentType:   aws.String(ContentType(key)),
	})
	if err != nil {
		return 0, s.fail(err, "put", key)
	}
	return n, nil
}

// Touch marks an existing blob as fresh and reports whether it exists. S3
// has no way to change an object's date but to write it: the object is
// copied onto itself (server side, no bytes travel), which gives it a new
// LastModified, the date lifecycle rules and Sweep go by.
func (s *S3) Touch(ctx context.Context, key string) (bool, error) {
	if !ValidKey(key) {
		return false, fmt.Errorf("blob: invalid key %q", key)
	}
	_, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket:            aws.String(s.bucket),
		Key:               aws.String(s.objectKey(key)),
		CopySource:        aws.String(s.bucket + "/" + url.PathEscape(s.objectKey(key))),
		MetadataDirective: types.MetadataDirectiveReplace,
		ContentType:       aws.String(ContentType(key)),
	})
	if err == nil {
		return true, nil
	}
	if notFound(err) {
		return false, nil
	}
	return false, s.fail(err, "touch", key)
}

// Open opens a blob for reading with a GET of the whole object; a reader
// that seeks elsewhere (a Range request) costs a ranged GET from there. A
// missing blob is *apperr.NotFoundError.
func (s *S3) Open(ctx context.Context, key string) (Object, Info, error) {
	if !ValidKey(key) {
		return nil, Info{}, errNotFound
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.objectKey(key))})
	if err != nil {
		if notFound(err) {
			return nil, Info{}, errNotFound
		}
		return nil, Info{}, s.fail(err, "open", key)
	}
	size := aws.ToInt64(out.ContentLength)
	info := Info{Size: size, ModTime: aws.ToTime(out.LastModified)}
	return &s3Object{ctx: ctx, s: s, key: key, size: size, body: out.Body}, info, nil
}

// Presign returns a URL anyone may GET the blob at for ttl (at most 7 days,
// S3's limit for signed URLs).
func (s *S3) Presign(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if !ValidKey(key) {
		return "", errNotFound
	}
	ttl = min(max(ttl, time.Second), 7*24*time.Hour)
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.objectKey(key))},
		s3.WithPresignExpires(ttl))
	if err != nil {
		return "", s.fail(err, "presign", key)
	}
	return req.URL, nil
}

// Sweep deletes the blobs under the prefix last modified before cutoff: the
// janitor, for buckets without a lifecycle rule (Expiry). It returns how
// many it deleted.
func (s *S3) Sweep(ctx context.Context, cutoff time.Time) (int, error) {
	removed := 0
	var batch []types.ObjectIdentifier
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.bucket),
			Delete: &types.Delete{Objects: batch, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return s.fail(err, "sweep", "")
		}
		removed += len(batch) - len(out.Errors)
		batch = batch[:0]
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("blob: sweep: %d of the objects not deleted, first %s: %s", len(out.Errors), aws.ToString(e.Key), aws.ToString(e.Message))
		}
		return nil
	}
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(s.prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return removed, s.fail(err, "sweep", "")
		}
		for _, o := range page.Contents {
			// Only what Easel writes: a result key under the prefix. A
			// bucket shared with anything else keeps the rest.
			if _, ok := ContentHash(strings.TrimPrefix(aws.ToString(o.Key), s.prefix)); !ok || !ValidKey(strings.TrimPrefix(aws.ToString(o.Key), s.prefix)) {
				continue
			}
			if o.LastModified != nil && o.LastModified.Before(cutoff) {
				batch = append(batch, types.ObjectIdentifier{Key: o.Key})
			}
			if len(batch) == 1000 { // DeleteObjects' limit
				if err := flush(); err != nil {
					return removed, err
				}
			}
		}
	}
	return removed, flush()
}

// Expiry returns the age at which the bucket's lifecycle configuration
// deletes the store's blobs, and false when no enabled rule covers the whole
// prefix (or the configuration cannot be read): then the janitor has to.
func (s *S3) Expiry(ctx context.Context) (time.Duration, bool, error) {
	out, err := s.client.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String(s.bucket)})
	if err != nil {
		if code := apiCode(err); code == "NoSuchLifecycleConfiguration" {
			return 0, false, nil
		}
		return 0, false, s.fail(err, "lifecycle", "")
	}
	var best time.Duration
	for _, r := range out.Rules {
		if r.Status != types.ExpirationStatusEnabled || r.Expiration == nil || aws.ToInt32(r.Expiration.Days) <= 0 {
			continue
		}
		if !strings.HasPrefix(s.prefix, ruleprefix(r)) || (r.Filter != nil && (r.Filter.Tag != nil || r.Filter.And != nil || r.Filter.ObjectSizeGreaterThan != nil || r.Filter.ObjectSizeLessThan != nil)) {
			continue // covers part of the blobs at most
		}
		d := time.Duration(aws.ToInt32(r.Expiration.Days)) * 24 * time.Hour
		if best == 0 || d < best {
			best = d
		}
	}
	return best, best > 0, nil
}

// ruleprefix is the key prefix a lifecycle rule applies to.
func ruleprefix(r types.LifecycleRule) string {
	if r.Filter != nil && r.Filter.Prefix != nil {
		return *r.Filter.Prefix
	}
	//lint:ignore SA1019 the rule's top-level Prefix is deprecated but still answered by some services
	return aws.ToString(r.Prefix) //nolint:staticcheck
}

// fail turns an S3 error into the store's: a retryable unavailable one,
// with the service's details for the logs only.
func (s *S3) fail(err error, op, key string) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("blob: s3 %s %s: %w", op, key, err)
	}
	return apperr.Transient(fmt.Errorf("blob: s3 %s %s%s: %w", op, s, key, err), apperr.Unavailable, "the result store is unavailable; try again")
}

// notFound reports whether err is S3's answer for a missing object.
func notFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	switch apiCode(err) {
	case "NoSuchKey", "NotFound":
		return true
	}
	return false
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// s3Object reads a blob as an io.ReadSeekCloser: a GET from the reader's
// position, made again only when a Seek moved it elsewhere.
type s3Object struct {
	ctx     context.Context
	s       *S3
	key     string
	size    int64
	pos     int64         // where the next Read reads
	body    io.ReadCloser // the open GET's body, or nil
	bodyPos int64         // where body's next byte is
}

func (o *s3Object) Read(p []byte) (int, error) {
	if o.pos >= o.size {
		return 0, io.EOF
	}
	if o.body == nil || o.bodyPos != o.pos {
		if o.body != nil {
			_ = o.body.Close()
			o.body = nil
		}
		out, err := o.s.client.GetObject(o.ctx, &s3.GetObjectInput{
			Bucket: aws.String(o.s.bucket),
			Key:    aws.String(o.s.objectKey(o.key)),
			Range:  aws.String(fmt.Sprintf("bytes=%d-", o.pos)),
		})
		if err != nil {
			return 0, o.s.fail(err, "read", o.key)
		}
		o.body, o.bodyPos = out.Body, o.pos
	}
	n, err := o.body.Read(p)
	o.pos += int64(n)
	o.bodyPos += int64(n)
	if err == io.EOF && o.pos < o.size {
		err = io.ErrUnexpectedEOF // replaced meanwhile by a shorter object: never, with content addressing
	}
	return n, err
}

func (o *s3Object) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += o.pos
	case io.SeekEnd:
		offset += o.size
	default:
		return 0, errors.New("blob: seek: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("blob: seek: negative position")
	}
	o.pos = offset
	return offset, nil
}

func (o *s3Object) Close() error {
	if o.body == nil {
		return nil
	}
	err := o.body.Close()
	o.body = nil
	return err
}
