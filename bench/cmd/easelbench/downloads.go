package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/taskview"
	"github.com/easelhq/easel/tools/testkit/s3proc"
)

// The downloads part (--only downloads): a result streamed by the gateway
// (signed URL checked, the store's object served with http.ServeContent,
// access log, metrics) against a bare http.ServeContent of the same object
// of the same store (no signature, no middleware), in MB/s, for the file
// store and S3 (a private MinIO), with 1 MB and 20 MB files, over
// --concurrency connections; alternating which side goes first each round.

// downloadResult is the downloads part's figures.
type downloadResult struct {
	Connections int            `json:"connections"`
	Seconds     float64        `json:"measured_seconds"`
	Cases       []downloadCase `json:"cases"`
}

type downloadCase struct {
	Store        string    `json:"store"` // file or s3
	SizeMB       int       `json:"size_mb"`
	RealMBps     []float64 `json:"real_mb_per_s"`
	BaselineMBps []float64 `json:"baseline_mb_per_s"`
}

// downloadTarget is the ratio each case must reach.
const downloadTarget = 0.9

var downloadSizesMB = []int{1, 20}

// blobSetup is a store the part downloads from: the gateway's and the
// baseline's environment for it, and how to put a file in it.
type blobSetup struct {
	name string
	env  []string
	put  func(ctx context.Context, key string, data []byte) error
}

func (e *env) downloads(ctx context.Context, res *results) error {
	dir, err := os.MkdirTemp("", "easelbench-downloads-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	stores := []blobSetup{fileSetup(filepath.Join(dir, "files"))}
	e.logf("  starting MinIO (built from the Go module proxy and cached the first time)")
	minio, err := s3proc.Start(ctx, filepath.Join(dir, "minio"))
	if err != nil {
		return fmt.Errorf("MinIO: %w", err)
	}
	defer minio.Stop()
	s3s, err := s3Setup(ctx, minio)
	if err != nil {
		return err
	}
	stores = append(stores, s3s)

	r := &downloadResult{Connections: e.o.concurrency, Seconds: e.o.downloadDuration().Seconds()}
	res.Downloads = r
	for _, st := range stores {
		for _, mb := range downloadSizesMB {
			data := make([]byte, mb<<20)
			_, _ = rand.Read(data)
			key := blob.ResultKey(time.Now(), [32]byte{byte(mb), 1}, "image/png")
			if err := st.put(ctx, key, data); err != nil {
				return fmt.Errorf("%s: put %s: %w", st.name, key, err)
			}
			c := downloadCase{Store: st.name, SizeMB: mb}
			for round := 1; round <= e.o.rounds; round++ {
				sides := []string{"baseline", "real"}
				if round%2 == 0 {
					sides[0], sides[1] = sides[1], sides[0]
				}
				for _, side := range sides {
					rate, err := e.downloadRun(ctx, st, side, key, int64(len(data)))
					if err != nil {
						return fmt.Errorf("%s %d MB %s: %w", st.name, mb, side, err)
					}
					if side == "real" {
						c.RealMBps = append(c.RealMBps, rate)
					} else {
						c.BaselineMBps = append(c.BaselineMBps, rate)
					}
				}
				e.logf("  %s, %d MB, round %d: real %.0f MB/s, baseline %.0f MB/s", st.name, mb, round, c.RealMBps[len(c.RealMBps)-1], c.BaselineMBps[len(c.BaselineMBps)-1])
			}
			r.Cases = append(r.Cases, c)
		}
	}
	return nil
}

func (o options) downloadDuration() time.Duration {
	if o.duration > 0 {
		return o.duration
	}
	return 5 * time.Second
}

func fileSetup(dir string) blobSetup {
	return blobSetup{
		name: "file",
		env:  []string{"EASEL_BLOB_URL=file://" + dir},
		put: func(_ context.Context, key string, data []byte) error {
			p := filepath.Join(dir, filepath.FromSlash(key))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return os.WriteFile(p, data, 0o644)
		},
	}
}

func s3Setup(ctx context.Context, minio *s3proc.Proc) (blobSetup, error) {
	const bucket = "easelbench"
	opts := blob.S3Options{Endpoint: minio.Endpoint, PathStyle: true, AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey}
	st, err := blob.OpenS3(ctx, bucket, "results/", opts)
	if err != nil {
		return blobSetup{}, err
	}
	if _, err := st.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return blobSetup{}, err
	}
	return blobSetup{
		name: "s3",
		env: []string{
			"EASEL_BLOB_URL=s3://" + bucket + "/results",
			"EASEL_S3_ENDPOINT=" + minio.Endpoint,
			"EASEL_S3_PATH_STYLE=true",
			"EASEL_S3_ACCESS_KEY_ID=" + minio.AccessKey,
			"EASEL_S3_SECRET_ACCESS_KEY=" + minio.SecretKey,
		},
		put: func(ctx context.Context, key string, data []byte) error {
			_, err := st.Put(ctx, key, bytes.NewReader(data))
			return err
		},
	}, nil
}

// downloadRun serves the object of key from st by side (the real gateway
// or the bare baseline) and downloads it over the part's connections for
// its measured time, after a second's warm-up; it returns MB/s (10^6
// bytes).
func (e *env) downloadRun(ctx context.Context, st blobSetup, side, key string, size int64) (float64, error) {
	var (
		p    *proc
		base string
		err  error
		url  string
	)
	if side == "real" {
		p, base, err = e.startGatewayEnv(ctx, st.env...)
		if err != nil {
			return 0, err
		}
		signer := signedurl.New([]byte(benchSigningSecret), base)
		url = signer.Sign(taskview.FilesPrefix+key, time.Now().Add(time.Hour))
	} else {
		addr := freeAddr()
		env := append(os.Environ(), st.env...)
		p, err = startProc("baseline-files", e.o.self, []string{"baseline-files", addr}, env, io.Discard)
		if err != nil {
			return 0, err
		}
		base = "http://" + addr
		if err := p.waitReady(ctx, base+"/healthz"); err != nil {
			p.stop()
			return 0, err
		}
		url = base + taskview.FilesPrefix + key
	}
	defer p.stop()
	tr := &http.Transport{MaxIdleConnsPerHost: e.o.concurrency, MaxConnsPerHost: e.o.concurrency, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	run := func(d time.Duration) (int64, time.Duration, error) {
		var bytes atomic.Int64
		var firstErr error
		var once sync.Once
		stop := time.Now().Add(d)
		start := time.Now()
		var wg sync.WaitGroup
		for range e.o.concurrency {
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					n, err := download(ctx, client, url, size)
					if err != nil {
						once.Do(func() { firstErr = err })
						return
					}
					bytes.Add(n)
				}
			})
		}
		wg.Wait()
		return bytes.Load(), time.Since(start), firstErr
	}
	if _, _, err := run(time.Second); err != nil {
		return 0, err
	}
	n, took, err := run(e.o.downloadDuration())
	if err != nil {
		return 0, err
	}
	return float64(n) / took.Seconds() / 1e6, nil
}

// download GETs url whole and checks it is size bytes.
func download(ctx context.Context, client *http.Client, url string, size int64) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("GET: %d %s", resp.StatusCode, b)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && n != size {
		err = fmt.Errorf("GET: %d bytes; want %d", n, size)
	}
	return n, err
}

// runBaselineFiles serves GET /v1/files/KEY from the store EASEL_BLOB_URL
// (and EASEL_S3_*) names with nothing but http.ServeContent, and
// /healthz.
func runBaselineFiles(ctx context.Context, addr string) error {
	cfg := blob.Config{URL: os.Getenv("EASEL_BLOB_URL"), S3: blob.S3Options{
		Endpoint: os.Getenv("EASEL_S3_ENDPOINT"), PathStyle: os.Getenv("EASEL_S3_PATH_STYLE") == "true",
		AccessKeyID: os.Getenv("EASEL_S3_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("EASEL_S3_SECRET_ACCESS_KEY"),
	}}
	st, err := blob.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc(taskview.FilesPrefix, func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, taskview.FilesPrefix)
		obj, info, err := st.Open(r.Context(), key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		defer obj.Close()
		http.ServeContent(w, r, path.Base(key), info.ModTime, obj)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (r *downloadResult) rows(tw *tabwriter.Writer) {
	if r == nil {
		fmt.Fprintf(tw, "downloads (--only downloads)\t%s\t\t\t\t%s\t\n", notRun, notRun)
		return
	}
	for _, c := range r.Cases {
		real, base := median(c.RealMBps), median(c.BaselineMBps)
		ratio := real / base
		fmt.Fprintf(tw, "download, %s store, %d MB (%d connections)\t%.0f MB/s\t%.0f MB/s\t%.2f\t>= %.2f\t%s\t\n",
			c.Store, c.SizeMB, r.Connections, real, base, ratio, downloadTarget, yes(ratio >= downloadTarget))
	}
}

func (r *downloadResult) details(w io.Writer) {
	if r == nil {
		return
	}
	var parts []string
	for _, c := range r.Cases {
		parts = append(parts, fmt.Sprintf("%s %d MB %s", c.Store, c.SizeMB, pairs(c.RealMBps, c.BaselineMBps)))
	}
	fmt.Fprintf(w, "downloads per round, MB/s (real/baseline, %.0f s each): %s\n", r.Seconds, strings.Join(parts, "; "))
}
