package processor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/imagegen/procedural"
	"github.com/easelhq/easel/worker/internal/fetch"
)

const (
	std = "lumen-2.5-flash-image"
	pro = "lumen-3-pro-image-preview"
	// Every task costs this much in these tests; the account starts with
	// startCredits.
	price        = 10
	startCredits = 1000
)

// recorder is the real task store, with the progress values it was given
// written down, and the input and model each task's last applied start
// read back.
type recorder struct {
	*store.Tasks
	mu       sync.Mutex
	progress []int
	inputs   map[string][]byte
	models   map[string]string
}

func (r *recorder) Start(ctx context.Context, a, id, run string) (store.Started, error) {
	st, err := r.Tasks.Start(ctx, a, id, run)
	if err == nil && st.Outcome == task.Applied {
		r.mu.Lock()
		if r.inputs == nil {
			r.inputs, r.models = map[string][]byte{}, map[string]string{}
		}
		r.inputs[id], r.models[id] = st.Input, st.Model
		r.mu.Unlock()
	}
	return st, err
}

// input is the input the last applied start of task id read back from its
// record, with the model the record holds (of its tier, its queue's): what
// its run ran. The model travels once, in the record: the input kept
// does not name it.
func (f *fixture) input(t *testing.T, id string) task.Input {
	t.Helper()
	f.store.mu.Lock()
	b, ok := f.store.inputs[id]
	model := f.store.models[id]
	f.store.mu.Unlock()
	if !ok {
		t.Fatalf("%s was never started", id)
	}
	if model == "" || bytes.Contains(b, []byte(model)) {
		t.Fatalf("%s's start read the model %q, and the input %q: want the model once, from the record", id, model, b)
	}
	in, err := jobs.DecodeInput(b, catalog.Model{ID: model, Tier: tierOf(model)})
	if err != nil {
		t.Fatalf("the input %s's start read back: %v", id, err)
	}
	return in
}

// tierOf is the tier of the tests' models (std, pro).
func tierOf(model string) catalog.Tier {
	if model == pro {
		return catalog.Pro
	}
	return catalog.Standard
}

func (r *recorder) Progress(ctx context.Context, a, id, run string, pct int) (bool, error) {
	r.mu.Lock()
	r.progress = append(r.progress, pct)
	r.mu.Unlock()
	return r.Tasks.Progress(ctx, a, id, run, pct)
}

type genFunc func(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error)

func (f genFunc) Generate(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error) {
	return f(ctx, req, progress)
}

type fixture struct {
	proc     *Processor
	store    *recorder
	blobs    *blob.FS
	db       *store.DB
	accounts *store.Accounts
	acct     string
	srv      *redistest.Server
	// created is what the create of each task (job, jobWith) did.
	created map[string]store.Creation
}

func newFixture(t *testing.T, gen imagegen.Generator) *fixture {
	t.Helper()
	return newFixtureWith(t, gen, store.Options{})
}

// newFixtureWith is newFixture on a store with options o.
func newFixtureWith(t *testing.T, gen imagegen.Generator, o store.Options) *fixture {
	t.Helper()
	srv := redistest.Start(t)
	db := store.NewDB(srv.Client(t), o)
	rec := &recorder{Tasks: store.NewTasks(db)}
	blobs, err := blob.OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blobs.Close() })
	if gen == nil {
		g, err := procedural.New(procedural.Options{Delay: 40 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		gen = g
	}
	cat, _ := catalog.New("lumen")
	f := fetch.New(fetch.Options{Policy: egress.Policy{AllowPrivate: true}, Timeout: 5 * time.Second})
	accounts := store.NewAccounts(db)
	a, err := accounts.Create(context.Background(), account.Spec{Name: "test", Credits: startCredits})
	if err != nil {
		t.Fatal(err)
	}
	retry := Retry{MaxAttempts: 3, MaxElapsed: 5 * time.Second, Initial: time.Millisecond, MaxInterval: 5 * time.Millisecond}
	return &fixture{proc: New(rec, blobs, gen, f, cat, zap.NewNop(), Options{Retry: retry}), store: rec, blobs: blobs, db: db, accounts: accounts, acct: a.ID, srv: srv,
		created: map[string]store.Creation{}}
}

// credits returns the balance and the number of refunds in the ledger.
func (f *fixture) credits(t *testing.T) (int64, int) {
	t.Helper()
	ctx := context.Background()
	a, err := f.accounts.Get(ctx, f.acct)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := f.accounts.Ledger(ctx, f.acct, 1000)
	if err != nil {
		t.Fatal(err)
	}
	refunds := 0
	for _, e := range entries {
		if e.Kind == account.Refund {
			refunds++
		}
	}
	return a.Credits, refunds
}

// job writes a pending record and returns its job.
func (f *fixture) job(t *testing.T, id, model string, mod func(*task.Input)) jobs.GenerateImage {
	t.Helper()
	return f.jobWith(t, id, model, task.Callback{}, "", mod)
}

// jobWith writes a pending record with a callback (the record keeps it
// apart: the input kept does not carry it) in queue ("": none), and
// returns its job: what its run runs (Process takes its jobs.RefOf).
func (f *fixture) jobWith(t *testing.T, id, model string, cb task.Callback, queue string, mod func(*task.Input)) jobs.GenerateImage {
	t.Helper()
	return f.jobOf(t, f.acct, id, model, cb, queue, mod)
}

// jobOf is jobWith for a task of account acct. The record keeps the
// task's input, callback and all as the client sent it, as the gateway's
// create does (jobs.EncodeInput).
func (f *fixture) jobOf(t *testing.T, acct, id, model string, cb task.Callback, queue string, mod func(*task.Input)) jobs.GenerateImage {
	t.Helper()
	tier := tierOf(model)
	now := time.Now()
	j := jobs.GenerateImage{TaskID: id, AccountID: acct, CreateTime: now, Deadline: now.Add(time.Hour),
		Input: task.Input{Model: catalog.Model{ID: model, Tier: tier}, Prompt: "a cat", AspectRatio: "1:1", ImageSize: "1K"}}
	if mod != nil {
		mod(&j.Input)
	}
	// As the gateway's decoder leaves it: its defaults applied.
	j.Input = j.Input.WithDefaults()
	sent := j.Input
	sent.Callback = cb
	input, err := jobs.EncodeInput(sent)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.store.Create(context.Background(), &task.Task{ID: id, AccountID: acct, Type: task.Type, Model: model, CreateTime: now, Callback: cb},
		task.Charge{Price: price, Tier: string(tier), MaxInflight: 100, CountUntil: j.Deadline.Add(jobs.CountMargin), Queue: queue}, input)
	if err != nil {
		t.Fatal(err)
	}
	f.created[id] = c
	return j
}

func (f *fixture) get(t *testing.T, id string) *task.Task {
	t.Helper()
	got, err := f.store.Get(context.Background(), f.acct, id)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (f *fixture) resultImage(t *testing.T, r task.Result) image.Config {
	t.Helper()
	obj, info, err := f.blobs.Open(context.Background(), r.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, _ := io.ReadAll(obj)
	// The record keeps the key (and the content type it names), not the
	// size: the blob's own.
	if len(b) == 0 || info.Size != int64(len(b)) {
		t.Errorf("blob size %d, %d bytes read", info.Size, len(b))
	}
	if r.ContentType != blob.ContentType(r.Key) {
		t.Errorf("result %+v: content type not the key's", r)
	}
	if sum := sha256.Sum256(b); !strings.Contains(r.Key, hex.EncodeToString(sum[:16])) {
		t.Errorf("key %s is not the content's hash", r.Key)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestTextToImage(t *testing.T) {
	// A generation of over a second (pro takes twice the 600 ms), long
	// enough for progress to show.
	g, err := procedural.New(procedural.Options{Delay: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, g)
	// Paced finely: each of the generator's steps (150 ms) is written.
	f.proc.Pacing = Pacing{Step: 1, Interval: 100 * time.Millisecond}
	j := f.job(t, "task_lumen_1", pro, func(in *task.Input) { in.AspectRatio = "9:16"; in.ImageSize = "2K" })
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	got := f.get(t, "task_lumen_1")
	if got.Status != task.Completed || got.Progress != 100 || len(got.Results) != 1 || got.CompleteTime.IsZero() {
		t.Fatalf("task %+v", got)
	}
	r := got.Results[0]
	if r.ContentType != "image/png" || !contentKey.MatchString(r.Key) || !blob.ValidKey(r.Key) {
		t.Errorf("result %+v", r)
	}
	if cfg := f.resultImage(t, r); cfg.Width != 1536 || cfg.Height != 2752 {
		t.Errorf("image %dx%d; want 1536x2752", cfg.Width, cfg.Height)
	}
	// Progress: several distinct values, increasing, below 100.
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	distinct := map[int]bool{}
	for i, p := range f.store.progress {
		if p <= 0 || p >= 100 || (i > 0 && p < f.store.progress[i-1]) {
			t.Fatalf("progress %v", f.store.progress)
		}
		distinct[p] = true
	}
	if len(distinct) < 3 {
		t.Errorf("progress %v: want at least 3 distinct values", f.store.progress)
	}
}

// A worker runs a task whose record an older gateway wrote, its input
// holding the model (1) and its tier (2) too: it runs the record's model,
// whatever the input says of it.
func TestOlderInput(t *testing.T) {
	g, err := procedural.New(procedural.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, g)
	const id = "task_lumen_older"
	now := time.Now()
	j := jobs.GenerateImage{TaskID: id, AccountID: f.acct, CreateTime: now, Deadline: now.Add(time.Hour),
		Input: task.Input{Model: catalog.Model{ID: std, Tier: catalog.Standard}, Prompt: "a cat", AspectRatio: "1:1", ImageSize: "1K"}}
	input, err := jobs.EncodeInput(j.Input)
	if err != nil {
		t.Fatal(err)
	}
	older := protowire.AppendTag(nil, 1, protowire.BytesType)
	older = protowire.AppendString(older, "a-model-no-deployment-serves")
	older = protowire.AppendTag(older, 2, protowire.VarintType)
	older = protowire.AppendVarint(older, 1)
	older = append(older, input...)
	if _, err := f.store.Create(context.Background(), &task.Task{ID: id, AccountID: f.acct, Type: task.Type, Model: std, CreateTime: now},
		task.Charge{Price: price, Tier: string(catalog.Standard), MaxInflight: 100, CountUntil: j.Deadline.Add(jobs.CountMargin)}, older); err != nil {
		t.Fatal(err)
	}
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, id); got.Status != task.Completed || len(got.Results) != 1 {
		t.Fatalf("task %+v %+v; want it completed", got, got.Failure)
	}
	// What the older input does not say reads as its default: PNG, one
	// image.
	if in := f.input(t, id); !reflect.DeepEqual(in, j.Input.WithDefaults()) {
		t.Errorf("the run read %+v; want %+v", in, j.Input.WithDefaults())
	}
}

// contentKey is a result key: the hour, then the image's content hash.
var contentKey = regexp.MustCompile(`^[0-9]{10}/[0-9a-f]{32}\.png$`)

// TestIdenticalResultsAreStoredOnce: two tasks asking the same of a
// deterministic generator share one blob, refreshed for the janitor.
func TestIdenticalResultsAreStoredOnce(t *testing.T) {
	g, _ := procedural.New(procedural.Options{})
	f := newFixture(t, g)
	for _, id := range []string{"task_lumen_21", "task_lumen_22"} {
		if err := f.proc.Process(context.Background(), jobs.RefOf(f.job(t, id, std, nil)), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := f.get(t, "task_lumen_21").Results[0], f.get(t, "task_lumen_22").Results[0]
	if a.Key != b.Key || a.Key == "" {
		t.Errorf("results %+v and %+v; want one shared blob", a, b)
	}
	f.resultImage(t, a)
	old := time.Now().Add(-48 * time.Hour)
	path := filepath.Join(f.blobs.Dir(), a.Key)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	// As another worker, or this one ten minutes later, would.
	f.proc.touched.Purge()
	if err := f.proc.Process(context.Background(), jobs.RefOf(f.job(t, "task_lumen_23", std, nil)), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || time.Since(st.ModTime()) > time.Hour {
		t.Errorf("a reused blob was not refreshed: %v %v", st.ModTime(), err)
	}
	f.resultImage(t, f.get(t, "task_lumen_23").Results[0])
}

func jpegServer(t *testing.T, w, h int) *httptest.Server {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), 80, uint8(y * 255 / h), 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing.jpg" {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "image/jpeg")
		_, _ = rw.Write(buf.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestEditPicksNearestRatio(t *testing.T) {
	f := newFixture(t, nil)
	wide := jpegServer(t, 640, 360)
	tall := jpegServer(t, 300, 400)
	tests := []struct {
		name  string
		urls  []string
		ratio string
		model string
		w, h  int
	}{
		{"16:9 source on standard", []string{wide.URL + "/a.jpg"}, "", std, 1344, 768},
		{"3:4 source on pro", []string{tall.URL + "/a.jpg", wide.URL + "/b.jpg"}, "", pro, 896, 1200},
		{"explicit ratio wins", []string{wide.URL + "/a.jpg"}, "1:1", std, 1024, 1024},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "task_lumen_" + string(rune('1'+i))
			j := f.job(t, id, tt.model, func(in *task.Input) { in.ImageURLs = tt.urls; in.AspectRatio = tt.ratio })
			if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
				t.Fatal(err)
			}
			got := f.get(t, id)
			if got.Status != task.Completed {
				t.Fatalf("status %s %+v", got.Status, got.Failure)
			}
			if cfg := f.resultImage(t, got.Results[0]); cfg.Width != tt.w || cfg.Height != tt.h {
				t.Errorf("%dx%d; want %dx%d", cfg.Width, cfg.Height, tt.w, tt.h)
			}
		})
	}
}

func TestEditFetchFailure(t *testing.T) {
	f := newFixture(t, nil)
	srv := jpegServer(t, 64, 64)
	j := f.job(t, "task_lumen_9", std, func(in *task.Input) { in.ImageURLs = []string{srv.URL + "/ok.jpg", srv.URL + "/missing.jpg"} })
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatalf("a final failure must not ask for a retry: %v", err)
	}
	got := f.get(t, "task_lumen_9")
	if got.Status != task.Failed || got.Failure.Code != "source_fetch_failed" || !strings.Contains(got.Failure.Message, "image_urls[1]") || !strings.Contains(got.Failure.Message, "404") {
		t.Errorf("task %+v %+v", got, got.Failure)
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name    string
		gen     genFunc
		attempt Attempt
		ctx     func() (context.Context, context.CancelFunc)
		wantErr bool // Process asks for another run
		status  task.Status
		code    string
		msgPart string
	}{
		{
			name: "final error",
			gen: func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				return nil, apperr.New(task.ContentBlocked, "the prompt was blocked by the safety filter")
			},
			attempt: Attempt{Retry: 0, MaxRetry: 3}, status: task.Failed, code: "content_blocked", msgPart: "safety filter",
		},
		{
			name: "retryable error until the retries run out",
			gen: func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				return nil, apperr.Transient(errors.New("503"), task.UpstreamUnavailable, "the model is unavailable")
			},
			attempt: Attempt{Retry: 0, MaxRetry: 3}, status: task.Failed, code: "upstream_unavailable", msgPart: "gave up after 3 attempts",
		},
		{
			name: "unknown error with job retries left",
			gen: func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				return nil, errors.New("dial tcp 10.1.2.3:443: secret-host")
			},
			attempt: Attempt{Retry: 1, MaxRetry: 3}, wantErr: true, status: task.Processing,
		},
		{
			name: "unknown error on the last job attempt is internal and hides its detail",
			gen: func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
				return nil, errors.New("dial tcp 10.1.2.3:443: secret-host")
			},
			attempt: Attempt{Retry: 3, MaxRetry: 3}, status: task.Failed, code: "internal", msgPart: "internal error",
		},
		{
			name:    "no image",
			gen:     func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) { return nil, nil },
			attempt: Attempt{Retry: 0, MaxRetry: 3}, status: task.Failed, code: "generation_failed", msgPart: "no image",
		},
		{
			name: "deadline",
			gen: func(ctx context.Context, _ imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 30*time.Millisecond)
			},
			attempt: Attempt{Retry: 0, MaxRetry: 3}, status: task.Failed, code: "timeout", msgPart: "deadline",
		},
		{
			name: "shutdown leaves the task to run again",
			gen: func(ctx context.Context, _ imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(30*time.Millisecond, cancel)
				return ctx, cancel
			},
			attempt: Attempt{Retry: 0, MaxRetry: 3}, wantErr: true, status: task.Processing,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.gen)
			j := f.job(t, "task_lumen_5", std, nil)
			ctx, cancel := context.WithCancel(context.Background())
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			err := f.proc.Process(ctx, jobs.RefOf(j), tt.attempt)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Process = %v; want error: %v", err, tt.wantErr)
			}
			got := f.get(t, "task_lumen_5")
			if got.Status != tt.status {
				t.Fatalf("status %s; want %s", got.Status, tt.status)
			}
			bal, refunds := f.credits(t)
			if tt.status != task.Failed {
				if bal != startCredits-price || refunds != 0 {
					t.Errorf("unfinished task: balance %d, %d refunds", bal, refunds)
				}
				return
			}
			if bal != startCredits || refunds != 1 || !got.Refunded {
				t.Errorf("failed task: balance %d, %d refunds; want %d and exactly 1", bal, refunds, startCredits)
			}
			if got.Failure == nil || got.Failure.Code != tt.code || !strings.Contains(got.Failure.Message, tt.msgPart) {
				t.Errorf("failure %+v; want code %s, message with %q", got.Failure, tt.code, tt.msgPart)
			}
			if strings.Contains(got.Failure.Message, "10.1.2.3") {
				t.Error("failure message leaks internals")
			}
			if got.CompleteTime.IsZero() || len(got.Results) != 0 {
				t.Errorf("failed task %+v", got)
			}
		})
	}
}

func TestRetryThenSucceed(t *testing.T) {
	calls := 0
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		calls++
		if calls < 3 {
			return nil, apperr.Transient(errors.New("429"), task.UpstreamUnavailable, "busy")
		}
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	j := f.job(t, "task_lumen_3", std, nil)
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, "task_lumen_3"); got.Status != task.Completed || calls != 3 {
		t.Errorf("status %s after %d calls", got.Status, calls)
	}
	if bal, refunds := f.credits(t); bal != startCredits-price || refunds != 0 {
		t.Errorf("balance %d, %d refunds", bal, refunds)
	}
}

func TestRetriesStopAtMaxElapsed(t *testing.T) {
	calls := 0
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		calls++
		return nil, apperr.Transient(errors.New("500"), task.UpstreamUnavailable, "down")
	}))
	f.proc.Retry = Retry{MaxAttempts: 100, MaxElapsed: 50 * time.Millisecond, Initial: 20 * time.Millisecond, MaxInterval: 20 * time.Millisecond}
	j := f.job(t, "task_lumen_4", std, nil)
	start := time.Now()
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, "task_lumen_4"); got.Status != task.Failed || calls >= 100 || time.Since(start) > 5*time.Second {
		t.Errorf("status %s after %d calls in %v", got.Status, calls, time.Since(start))
	}
}

func TestDuplicateAndOrphanJobs(t *testing.T) {
	calls := 0
	gen := genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		calls++
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	})
	f := newFixture(t, gen)
	j := f.job(t, "task_lumen_7", std, nil)
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	first := f.get(t, "task_lumen_7")
	// Asynq delivers at least once: a second run must change nothing.
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 1, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("generator ran %d times", calls)
	}
	if again := f.get(t, "task_lumen_7"); !again.CompleteTime.Equal(first.CompleteTime) || again.Results[0] != first.Results[0] {
		t.Error("duplicate job changed the finished task")
	}
	// A job whose record is gone (expired, or removed after an enqueue
	// failure) is dropped without recreating it.
	orphan := jobs.GenerateImage{TaskID: "task_lumen_8", AccountID: f.acct, Deadline: time.Now().Add(time.Hour), Input: task.Input{Model: catalog.Model{ID: std, Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
	if err := f.proc.Process(context.Background(), jobs.RefOf(orphan), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Get(context.Background(), f.acct, "task_lumen_8"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("orphan job created a record: %v", err)
	}
	if calls != 1 {
		t.Errorf("generator ran for an orphan job")
	}
}

func TestWrongModelFailsCleanly(t *testing.T) {
	f := newFixture(t, nil)
	j := f.job(t, "task_other_1", "other-2.5-flash-image", nil)
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, "task_other_1"); got.Status != task.Failed || got.Failure.Code != "generation_failed" {
		t.Errorf("task %+v", got)
	}
}

// The job names the task only: the run reads what it runs from the task's
// record, where the create kept it. A long prompt and many sources, kept
// over several of the record's fields, come back whole.
func TestRunReadsTheInputFromTheRecord(t *testing.T) {
	var got imagegen.Request
	f := newFixture(t, genFunc(func(_ context.Context, req imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
		got = req
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	srv := jpegServer(t, 64, 64)
	prompt := strings.Repeat("a lighthouse at dusk, «painted» in oils; ", 20)
	var urls []string
	for i := range 6 {
		urls = append(urls, srv.URL+"/source-"+string(rune('a'+i))+".jpg")
	}
	j := f.job(t, "task_lumen_64", pro, func(in *task.Input) { in.Prompt = prompt; in.ImageURLs = urls; in.ImageSize = "2K" })
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if st := f.get(t, j.TaskID).Status; st != task.Completed {
		t.Fatalf("task %s; want completed", st)
	}
	if in := f.input(t, j.TaskID); !reflect.DeepEqual(in, j.Input) {
		t.Errorf("the run read %+v; want %+v", in, j.Input)
	}
	if got.TaskID != j.TaskID || got.Prompt != prompt || len(got.Sources) != len(urls) || got.Model.ID != pro || got.ImageSize != "2K" {
		t.Errorf("generated %q (%s, %s) from %d sources; want the task's prompt, %d sources", got.Prompt, got.Model.ID, got.ImageSize, len(got.Sources), len(urls))
	}
}

// A task whose kept input does not decode cannot run, now or on any
// retry: its run fails it at once (refunded) rather than leave it to its
// deadline, and the job is done with.
func TestUndecodableInputFailsTheTask(t *testing.T) {
	ran := false
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		ran = true
		return nil, errors.New("must not run")
	}))
	ctx := context.Background()
	for i, input := range [][]byte{[]byte("not an input"), nil} {
		id := "task_lumen_6" + string(rune('5'+i))
		now := time.Now()
		if _, err := f.store.Create(ctx, &task.Task{ID: id, AccountID: f.acct, Type: task.Type, Model: std, CreateTime: now},
			task.Charge{Price: price, Tier: string(catalog.Standard), MaxInflight: 100, CountUntil: now.Add(time.Hour), Queue: jobs.Queue(catalog.Standard)}, input); err != nil {
			t.Fatal(err)
		}
		ref := jobs.Ref{AccountID: f.acct, TaskID: id, Queue: jobs.Queue(catalog.Standard), Deadline: now.Add(time.Hour)}
		if err := f.proc.Process(ctx, ref, Attempt{MaxRetry: 3}); err != nil {
			t.Fatalf("input %q: Process = %v; want the job done with (nil)", input, err)
		}
		got := f.get(t, id)
		if got.Status != task.Failed || got.Failure == nil || got.Failure.Code != string(apperr.Internal) || !got.Refunded {
			t.Errorf("input %q: task %s %+v, refunded %v; want failed, internal, refunded", input, got.Status, got.Failure, got.Refunded)
		}
		if bal, refunds := f.credits(t); bal != startCredits || refunds != i+1 {
			t.Errorf("input %q: balance %d with %d refunds; want %d with %d", input, bal, refunds, startCredits, i+1)
		}
	}
	if ran {
		t.Error("a task without an input it could read ran")
	}
}

// TestRefundAcrossRetries follows one task through the runs Asynq would make
// of its job, including runs after a worker crashed, and checks the account
// is refunded exactly once when, and only when, the task ends failed.
func TestRefundAcrossRetries(t *testing.T) {
	transient := genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return nil, apperr.Transient(errors.New("503"), task.UpstreamUnavailable, "the model is unavailable")
	})
	final := genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return nil, apperr.New(task.ContentBlocked, "blocked")
	})
	okGen := genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	})
	type run struct {
		gen   genFunc
		retry int
		crash bool // the worker dies after marking the task processing
	}
	tests := []struct {
		name    string
		runs    []run
		status  task.Status
		refunds int
	}{
		{"transient errors until retries run out", []run{{transient, 0, false}, {transient, 1, false}, {transient, 2, false}, {transient, 3, false}}, task.Failed, 1},
		{"crash, then the retry fails", []run{{okGen, 0, true}, {final, 1, false}}, task.Failed, 1},
		{"transient, crash, then the last attempt fails", []run{{transient, 0, false}, {okGen, 1, true}, {transient, 3, false}}, task.Failed, 1},
		{"failed, then the job is delivered again", []run{{final, 0, false}, {final, 1, false}, {okGen, 2, false}}, task.Failed, 1},
		{"crash, then the retry succeeds", []run{{okGen, 0, true}, {okGen, 1, false}}, task.Completed, 0},
		{"completed, then the job is delivered again and would fail", []run{{okGen, 0, false}, {final, 1, false}}, task.Completed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var current genFunc
			f := newFixture(t, genFunc(func(ctx context.Context, r imagegen.Request, p func(int)) ([]imagegen.Image, error) {
				return current(ctx, r, p)
			}))
			j := f.job(t, "task_lumen_42", std, nil)
			for _, r := range tt.runs {
				if r.crash {
					// All a crashed run leaves behind: the task marked processing.
					if _, err := f.store.Start(context.Background(), f.acct, "task_lumen_42", "task_lumen_42"); err != nil {
						t.Fatal(err)
					}
					continue
				}
				current = r.gen
				_ = f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: r.retry, MaxRetry: 3})
			}
			got := f.get(t, "task_lumen_42")
			bal, refunds := f.credits(t)
			if got.Status != tt.status || refunds != tt.refunds {
				t.Fatalf("status %s with %d refunds; want %s with %d", got.Status, refunds, tt.status, tt.refunds)
			}
			if got.Failure != nil && got.Failure.Code == string(task.WorkerCrashed) {
				t.Errorf("a task handed back alive was counted as crashing its worker: %+v", got.Failure)
			}
			want := int64(startCredits - price)
			if tt.refunds == 1 {
				want = startCredits
			}
			if bal != want {
				t.Errorf("balance %d; want %d", bal, want)
			}
		})
	}
}

// TestTaskLogLines: the lines of a task carry its id and name the line in
// the processor that wrote them, not the logging wrapper.
func TestTaskLogLines(t *testing.T) {
	f := newFixture(t, nil)
	core, logs := observer.New(zap.InfoLevel)
	f.proc = New(f.store, f.blobs, f.proc.gen, f.proc.fetch, f.proc.catalog, zap.New(core, zap.AddCaller()), f.proc.Options)
	j := f.job(t, "task_lumen_7", std, nil)
	if err := f.proc.Process(context.Background(), jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	entries := logs.All()
	if len(entries) == 0 {
		t.Fatal("no log lines")
	}
	for _, e := range entries {
		if e.ContextMap()["task_id"] != "task_lumen_7" {
			t.Errorf("line %q without the task id: %v", e.Message, e.ContextMap())
		}
		if !e.Caller.Defined || !strings.HasSuffix(e.Caller.File, "processor.go") || e.Caller.Function == "" || strings.Contains(e.Caller.Function, "taskLog") {
			t.Errorf("line %q: caller %s (%s)", e.Message, e.Caller.String(), e.Caller.Function)
		}
	}
}

// A source that drips slower than the fetch timeout fails the task with
// source_fetch_failed, not timeout: the task's deadline was nowhere near.
func TestSlowSourceIsAFetchFailure(t *testing.T) {
	f := newFixture(t, nil)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.WriteHeader(200)
		for i := 0; i < 100; i++ {
			if _, err := w.Write([]byte{0x89}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(slow.Close)
	f.proc.fetch = fetch.New(fetch.Options{Policy: egress.Policy{AllowPrivate: true}, Timeout: 300 * time.Millisecond})
	j := f.job(t, "task_lumen_31", std, func(in *task.Input) { in.ImageURLs = []string{slow.URL + "/drip.png"} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // the task's deadline
	defer cancel()
	if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Retry: 0, MaxRetry: 3}); err != nil {
		t.Fatalf("a final failure must not ask for a retry: %v", err)
	}
	got := f.get(t, "task_lumen_31")
	if got.Status != task.Failed || got.Failure.Code != string(task.SourceFetchFailed) || !strings.Contains(got.Failure.Message, "image_urls[0]") {
		t.Errorf("task %+v %+v; want source_fetch_failed naming image_urls[0]", got, got.Failure)
	}
}

// A run whose worker died is counted; the second such crash fails the task
// with worker_crashed, refunded, without running the generator again. A run
// that lost its task to another does nothing.
func TestCrashedRunsAndSupersededRuns(t *testing.T) {
	calls := 0
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		calls++
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	ctx := context.Background()

	j := f.job(t, "task_lumen_50", std, nil)
	for i := 0; i < 2; i++ { // two runs that die after starting
		if c, err := f.store.Start(ctx, f.acct, j.TaskID, j.TaskID); err != nil || c.Outcome != task.Applied {
			t.Fatalf("start %d: %v %v", i, c.Outcome, err)
		}
	}
	if err := f.proc.Process(ctx, jobs.RefOf(j), Attempt{Retry: 2, MaxRetry: 3, Run: j.TaskID}); err != nil {
		t.Fatal(err)
	}
	got := f.get(t, j.TaskID)
	if got.Status != task.Failed || got.Failure.Code != string(task.WorkerCrashed) || !got.Refunded || calls != 0 {
		t.Errorf("task %+v %+v, generator ran %d times; want failed with worker_crashed, refunded, not run", got, got.Failure, calls)
	}

	// Run 1 took the task over: run 0, coming back late, is dropped.
	j2 := f.job(t, "task_lumen_51", std, nil)
	if c, err := f.store.Start(ctx, f.acct, j2.TaskID, j2.TaskID); err != nil || c.Outcome != task.Applied {
		t.Fatal(c, err)
	}
	if c, run, err := f.store.Takeover(ctx, f.acct, j2.TaskID, j2.TaskID, func(n int) string { return jobs.RunID(j2.TaskID, n) }); err != nil || c.Outcome != task.Applied {
		t.Fatalf("takeover: %v %s %v", c.Outcome, run, err)
	}
	if err := f.proc.Process(ctx, jobs.RefOf(j2), Attempt{Retry: 1, MaxRetry: 3, Run: j2.TaskID}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, j2.TaskID); got.Status != task.Processing || calls != 0 {
		t.Errorf("the superseded run changed the task (%s) or ran (%d)", got.Status, calls)
	}
	if err := f.proc.Process(ctx, jobs.RefOf(j2), Attempt{Retry: 0, MaxRetry: 3, Run: jobs.RunID(j2.TaskID, 1)}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, j2.TaskID); got.Status != task.Completed || calls != 1 {
		t.Errorf("the new run: %s after %d generations; want completed after 1", got.Status, calls)
	}
}

// Queue positions: the store counts a task out of its queue when a run
// starts it (the processor does not), once, whatever runs follow.
func TestStartCountsTaskOutOfQueue(t *testing.T) {
	f := newFixture(t, genFunc(func(context.Context, imagegen.Request, func(int)) ([]imagegen.Image, error) {
		return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
	}))
	ctx := context.Background()
	queue := jobs.Queue(catalog.Standard)
	queues := store.NewQueues(f.db)
	dequeued := func() int64 {
		t.Helper()
		st, err := queues.Stats(ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		return st.Dequeued
	}
	first := f.jobWith(t, "task_lumen_100", std, task.Callback{}, queue, nil)
	second := f.jobWith(t, "task_lumen_101", std, task.Callback{}, queue, nil)
	behind := f.get(t, second.TaskID)
	if behind.Queue != queue || behind.QueueSeq != 2 {
		t.Fatalf("second task in queue %q as %d; want %q as 2", behind.Queue, behind.QueueSeq, queue)
	}
	if n := dequeued(); n != 0 {
		t.Fatalf("%d counted out before any start", n)
	}
	if err := f.proc.Process(ctx, jobs.RefOf(first), Attempt{Run: first.TaskID, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	st, _ := queues.Stats(ctx, queue)
	if st.Dequeued != 1 {
		t.Errorf("%d counted out after one task started; want 1", st.Dequeued)
	}
	if p := st.PositionOf(behind.QueueSeq, time.Now()); p.Position != 1 {
		t.Errorf("the task behind stands at %d; want 1", p.Position)
	}
	// A duplicate of the finished job counts nothing more.
	if err := f.proc.Process(ctx, jobs.RefOf(first), Attempt{Run: first.TaskID, Retry: 1, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if err := f.proc.Process(ctx, jobs.RefOf(second), Attempt{Run: second.TaskID, MaxRetry: 3}); err != nil {
		t.Fatal(err)
	}
	if n := dequeued(); n != 2 {
		t.Errorf("%d counted out after two tasks started (one of them twice); want 2", n)
	}
}
