package fetch

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/upload"
)

// Uploaded sources are read from the blob store, with private fetching
// off and a host no one answers on, under the same rules as fetched ones;
// a missing blob or an altered URL fails the task with the field named.
func TestUploadsAreReadFromTheBlobStore(t *testing.T) {
	store, err := blob.OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	signer := signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "http://127.0.0.1:1")
	now := time.Now()
	put := func(data []byte) string {
		key := upload.Key(now, "image/png")
		if _, err := store.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		return signer.Sign(upload.Path(key), now.Add(upload.TTL))
	}
	okURL := put(encoded(t, "png", 64, 48))
	// Expired since the gateway took it: the worker still reads it.
	oldKey := upload.Key(now, "image/png")
	if _, err := store.Put(context.Background(), oldKey, bytes.NewReader(encoded(t, "png", 2, 2))); err != nil {
		t.Fatal(err)
	}
	expiredURL := signer.Sign(upload.Path(oldKey), now.Add(-time.Hour))
	bombURL := put(bomb(t, 10_000, 10_000))
	textURL := put([]byte("not an image"))
	goneURL := signer.Sign(upload.Path(upload.Key(now, "image/png")), now.Add(upload.TTL))
	f := New(Options{Policy: egress.Policy{}, Uploads: signer, Blobs: store, Timeout: 2 * time.Second})

	srcs, err := f.Fetch(context.Background(), []string{okURL, expiredURL})
	if err != nil {
		t.Fatal(err)
	}
	if srcs[0].Width != 64 || srcs[0].Height != 48 || srcs[0].MIME != "image/png" || srcs[1].Width != 2 {
		t.Errorf("sources %+v %+v", srcs[0], srcs[1])
	}
	for _, tt := range []struct {
		name string
		url  string
		code apperr.Code
		msg  string
	}{
		{"over the pixel limit", bombURL, task.InvalidSourceImage, "image_urls[0] is 10000x10000 pixels"},
		{"not an image", textURL, task.InvalidSourceImage, "image_urls[0] is not a PNG, JPEG, WebP or GIF image"},
		{"gone from the store", goneURL, task.InvalidSourceImage, "image_urls[0] is an upload that has expired"},
		{"signature altered", strings.Replace(okURL, "sig=", "sig=A", 1), task.SourceFetchFailed, "image_urls[0] is an upload URL without a valid signature"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.Fetch(context.Background(), []string{tt.url})
			if apperr.CodeOf(err) != tt.code || !strings.Contains(apperr.MessageOf(err), tt.msg) {
				t.Errorf("Fetch: %v; want %s %q", err, tt.code, tt.msg)
			}
		})
	}
}
