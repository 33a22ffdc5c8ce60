package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/worker"
)

const (
	std    = "lumen-2.5-flash-image"
	pro    = "lumen-3-pro-image-preview"
	secret = "e2e-signing-secret-0123456789abcdef"
)

// stack is a gateway and workers running in this process, through their Run
// functions, on a Redis.
type stack struct {
	base       string
	redisURL   string
	env        map[string]string // the services' environment
	workerAddr []string
	accounts   *store.Accounts
	tasks      *store.Tasks
	key        string // of an active account
	keyOther   string // of a second active account
	keyOff     string // of a disabled account
	stop       func() error
}

type stackOptions struct {
	redisURL string
	workers  int
	simDelay time.Duration
	// env adds to or overrides the gateway's and workers' environment.
	env map[string]string
}

const adminToken = "e2e-admin-token-0123456789abcdefghij"

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startStack configures the services the way their mains do: from
// environment variables, through package config.
func startStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	if o.redisURL == "" {
		o.redisURL = testRedisURL(t)
	}
	if o.workers == 0 {
		o.workers = 1
	}
	ln := listen(t)
	base := "http://" + ln.Addr().String()
	env := map[string]string{
		"EASEL_REDIS_URL":           o.redisURL,
		"EASEL_FETCH_ALLOW_PRIVATE": "true",
		"EASEL_TASK_DEADLINE":       "1m",
		"EASEL_LOG_LEVEL":           "warn",
		"EASEL_HTTP_ADDR":           ln.Addr().String(),
		"EASEL_METRICS_ADDR":        "off", // a test that scrapes sets its own
		"EASEL_PUBLIC_URL":          base,
		"EASEL_SIGNING_SECRET":      secret,
		"EASEL_ADMIN_TOKEN":         adminToken,
		"EASEL_SHUTDOWN_TIMEOUT":    "5s",
		"EASEL_SIM_DELAY":           o.simDelay.String(),
		"EASEL_WORKER_CONCURRENCY":  "4",
		"EASEL_TASK_CHECK_INTERVAL": "20ms",
		// Each simulated step's progress written, for the tests that
		// watch it rise.
		"EASEL_PROGRESS_STEP":     "1",
		"EASEL_PROGRESS_INTERVAL": "200ms",
		// Not the 400 ms default: under -race on a loaded 2-core machine,
		// with other stacks running alongside, a burst of creates (200 at
		// once in TestConcurrentCreatesNeverOverdraw) can keep a Redis call
		// waiting longer, and its create would be a 503. Tests of Redis
		// faults and failovers set the default again.
		"EASEL_REDIS_TIMEOUT": "5s",
	}
	maps.Copy(env, blobEnv(t))
	maps.Copy(env, o.env)
	gcfg, err := gateway.LoadConfig(env)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, o.workers+1)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))

	s := &stack{base: base, redisURL: o.redisURL, env: env}
	for i := 0; i < o.workers; i++ {
		hl := listen(t)
		s.workerAddr = append(s.workerAddr, hl.Addr().String())
		wenv := maps.Clone(env)
		wenv["EASEL_WORKER_HTTP_ADDR"] = hl.Addr().String()
		wcfg, err := worker.LoadConfig(wenv)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- worker.Run(ctx, wcfg, log.With(zap.Int("worker", i)), worker.Options{HealthListener: hl})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- gateway.Run(ctx, gcfg, log, ln)
	}()
	stopped := false
	s.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		wg.Wait()
		close(errs)
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		return errors.Join(all...)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stack stopped with: %v", err)
		}
	})
	waitHTTP(t, base+"/readyz")
	for _, a := range s.workerAddr {
		waitHTTP(t, "http://"+a+"/readyz")
	}
	rdb, err := redisconn.Open(context.Background(), o.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	db := store.NewDB(rdb, store.Options{})
	s.accounts, s.tasks = store.NewAccounts(db), store.NewTasks(db)
	_, s.key = s.newAccount(t, account.Spec{Name: "e2e", Credits: 1_000_000})
	_, s.keyOther = s.newAccount(t, account.Spec{Name: "e2e-other", Credits: 1_000_000})
	offID, off := s.newAccount(t, account.Spec{Name: "e2e-off", Credits: 1_000_000})
	if err := s.accounts.SetStatus(context.Background(), offID, account.Disabled); err != nil {
		t.Fatal(err)
	}
	s.keyOff = off
	return s
}

// newAccount makes an account and a key for it.
func (s *stack) newAccount(t *testing.T, spec account.Spec) (string, string) {
	t.Helper()
	ctx := context.Background()
	a, err := s.accounts.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := s.accounts.CreateKey(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	return a.ID, k
}

// accountTasks reads every task of an account, by id, paging through its
// listing (Tasks.List): the tasks of its index, those created in the last
// day plus their deadline, which is every task a test makes.
func accountTasks(ctx context.Context, tasks *store.Tasks, acct string) (map[string]*task.Task, error) {
	out := map[string]*task.Task{}
	f := task.Filter{Limit: 1000}
	for {
		page, next, err := tasks.List(ctx, acct, f)
		if err != nil {
			return out, err
		}
		for _, tk := range page {
			out[tk.ID] = tk
		}
		if next == "" {
			return out, nil
		}
		f.Cursor = next
	}
}

func waitHTTP(t testing.TB, u string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v", u, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sourceServer serves PNG source images of a given size at /<w>x<h>.png.
func sourceServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var width, height int
		if _, err := fmt.Sscanf(r.URL.Path, "/%dx%d.png", &width, &height); err != nil || width <= 0 || height <= 0 || width > 2000 || height > 2000 {
			http.NotFound(w, r)
			return
		}
		img := image.NewNRGBA(image.Rect(0, 0, width, height))
		for y := 0; y < height; y++ {
			for x := 0; x < width; x++ {
				img.Set(x, y, color.NRGBA{uint8(x), uint8(y), 128, 255})
			}
		}
		var buf bytes.Buffer
		_ = png.Encode(&buf, img)
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(buf.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	// Two seconds of generation, progress written every 200 ms: a client
	// polling every 50 ms sees several intermediate values even when its
	// first answer comes late on a loaded machine (with one second, a first
	// answer at 62 % left two).
	s := startStack(t, stackOptions{workers: 2, simDelay: 2 * time.Second})
	c := newClient(t, s.base, s.key)
	src := sourceServer(t)

	tests := []struct {
		name string
		body string
		w, h int
	}{
		{"text-to-image standard default ratio", createBody(std, `{"prompt":"a lighthouse at dusk"}`), 1024, 1024},
		{"text-to-image standard 21:9", createBody(std, `{"prompt":"a wide valley","aspect_ratio":"21:9"}`), 1536, 672},
		{"text-to-image pro 2K 9:16", createBody(pro, `{"prompt":"a tall tower","aspect_ratio":"9:16","image_size":"2K"}`), 1536, 2752},
		{"text-to-image pro default 1K", createBody(pro, `{"prompt":"a cat","aspect_ratio":"16:9"}`), 1376, 768},
		{"edit standard, ratio from the source", createBody(std, `{"prompt":"make it winter","image_urls":["`+src.URL+`/640x360.png"]}`), 1344, 768},
		{"edit pro, two sources, explicit ratio", createBody(pro, `{"prompt":"combine","aspect_ratio":"4:5","image_urls":["`+src.URL+`/300x400.png","`+src.URL+`/200x200.png"]}`), 928, 1152},
	}
	ids := make([]string, len(tests))
	t.Run("tasks", func(t *testing.T) {
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel() // each client polls its own task while it runs
				c := newClient(t, s.base, s.key)
				ids[i] = c.create(tt.body)
				rec, statuses, progress := c.poll(ids[i], 60*time.Second)
				if rec.Status != "completed" {
					t.Fatalf("task ended %s: %+v", rec.Status, rec.Error)
				}
				if rec.TaskID != ids[i] || rec.TaskType != "image" || rec.Progress != 100 || rec.CompleteTime < rec.CreateTime || len(rec.Results) != 1 || rec.Error != nil {
					t.Errorf("record %+v", rec)
				}
				if statuses[len(statuses)-1] != "completed" {
					t.Errorf("statuses %v", statuses)
				}
				intermediate := 0
				for _, p := range progress {
					if p > 0 && p < 100 {
						intermediate++
					}
				}
				if intermediate < 3 {
					t.Errorf("progress seen %v: want at least 3 intermediate values", progress)
				}
				cfg, format, _ := newClient(t, "", "").download(rec.Results[0])
				if format != "png" || cfg.Width != tt.w || cfg.Height != tt.h {
					t.Errorf("downloaded %s %dx%d; want png %dx%d", format, cfg.Width, cfg.Height, tt.w, tt.h)
				}
			})
		}
	})
	if t.Failed() {
		return
	}

	t.Run("result URLs", func(t *testing.T) {
		_, rec, _ := c.query(ids[0])
		u, _ := url.Parse(rec.Results[0])
		anon := newClient(t, s.base, "")
		tampered := strings.Replace(u.RequestURI(), ".png", "0.png", 1)
		if st, _, _ := anon.do("GET", tampered, "", nil); st != 403 {
			t.Errorf("tampered URL: %d; want 403", st)
		}
		q := u.Query()
		q.Set("expires", strconv.FormatInt(time.Now().Add(48*time.Hour).Unix(), 10))
		if st, _, _ := anon.do("GET", u.Path+"?"+q.Encode(), "", nil); st != 403 {
			t.Errorf("URL with a longer expiry: %d; want 403", st)
		}
		// A URL the server really signed, whose time is up.
		expired, _ := url.Parse(s.base + signURL(u.Path, time.Now().Add(-time.Minute)))
		if st, _, b := anon.do("GET", expired.RequestURI(), "", nil); st != 410 || !strings.Contains(string(b), `"code":410`) {
			t.Errorf("expired URL: %d %s; want 410", st, b)
		}
		if st, h, b := anon.do("GET", u.RequestURI(), "", map[string]string{"Range": "bytes=0-7"}); st != 206 || string(b) != "\x89PNG\r\n\x1a\n" || h.Get("Content-Range") == "" {
			t.Errorf("range: %d %q", st, b)
		}
		// The same bytes whole, in pieces, by HEAD and conditionally, on
		// either store.
		st, h, whole := anon.do("GET", u.RequestURI(), "", nil)
		size := len(whole)
		if st != 200 || size < 100 || h.Get("ETag") == "" || h.Get("Content-Type") != "image/png" || h.Get("Content-Length") != strconv.Itoa(size) {
			t.Fatalf("download: %d, %d bytes, headers %v", st, size, h)
		}
		if st, hh, b := anon.do("HEAD", u.RequestURI(), "", nil); st != 200 || len(b) != 0 || hh.Get("Content-Length") != strconv.Itoa(size) || hh.Get("ETag") != h.Get("ETag") {
			t.Errorf("HEAD: %d, %d bytes, headers %v", st, len(b), hh)
		}
		if st, _, b := anon.do("GET", u.RequestURI(), "", map[string]string{"If-None-Match": h.Get("ETag")}); st != 304 || len(b) != 0 {
			t.Errorf("If-None-Match: %d, %d bytes; want 304", st, len(b))
		}
		if st, hh, b := anon.do("GET", u.RequestURI(), "", map[string]string{"Range": "bytes=-10"}); st != 206 || !bytes.Equal(b, whole[size-10:]) || hh.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", size-10, size-1, size) {
			t.Errorf("suffix range: %d %q %v", st, b, hh)
		}
		if st, hh, b := anon.do("GET", u.RequestURI(), "", map[string]string{"Range": "bytes=1-2,50-52"}); st != 206 || !strings.HasPrefix(hh.Get("Content-Type"), "multipart/byteranges") ||
			!bytes.Contains(b, whole[1:3]) || !bytes.Contains(b, whole[50:53]) {
			t.Errorf("two ranges: %d %v", st, hh)
		}
		if st, hh, _ := anon.do("GET", u.RequestURI(), "", map[string]string{"Range": fmt.Sprintf("bytes=%d-", size)}); st != 416 || hh.Get("Content-Range") != fmt.Sprintf("bytes */%d", size) {
			t.Errorf("range past the end: %d %v; want 416", st, hh)
		}
	})

	t.Run("auth and ownership", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			key    string
			status int
		}{{"no key", "", 401}, {"unknown key", "esk_unknownunknownunknownunknownunknown00", 401}, {"disabled account", s.keyOff, 403}, {"other account", s.keyOther, 404}} {
			cc := newClient(t, s.base, tc.key)
			if st, _, b := cc.do("GET", "/v1/task/query?task_id="+ids[0], "", nil); st != tc.status || !strings.Contains(string(b), `"code":`+strconv.Itoa(tc.status)) {
				t.Errorf("%s: query %d %s; want %d", tc.name, st, b, tc.status)
			}
		}
		if st, _, _ := c.query("task_lumen_123"); st != 404 {
			t.Errorf("unknown task: %d", st)
		}
		if st, _, _ := newClient(t, s.base, s.keyOff).do("POST", "/v1/task/create", createBody(std, `{"prompt":"x"}`), nil); st != 403 {
			t.Errorf("disabled account create: %d", st)
		}
	})

	t.Run("failed edit", func(t *testing.T) {
		id := c.create(createBody(std, `{"prompt":"x","image_urls":["`+src.URL+`/0x0.png"]}`))
		rec, _, _ := c.poll(id, 30*time.Second)
		if rec.Status != "failed" || rec.Error == nil || rec.Error.Code != "source_fetch_failed" || !strings.Contains(rec.Error.Message, "image_urls[0]") || rec.CompleteTime == 0 || len(rec.Results) != 0 {
			t.Errorf("record %+v %+v", rec, rec.Error)
		}
	})

	t.Run("worker health", func(t *testing.T) {
		for _, a := range s.workerAddr {
			for _, p := range []string{"/healthz", "/readyz"} {
				resp, err := http.Get("http://" + a + p)
				if err != nil || resp.StatusCode != 200 {
					t.Errorf("worker %s%s: %v %v", a, p, err, resp)
				}
				if resp != nil {
					resp.Body.Close()
				}
			}
		}
	})

	if err := s.stop(); err != nil {
		t.Errorf("graceful shutdown: %v", err)
	}
}

// signURL signs a download path as the gateway does: an HMAC-SHA256 keyed by
// the signing secret over the path, a newline and the expiry in Unix
// seconds, base64url without padding. The test's own copy of the scheme
// docs/api.md documents, so a change to it shows.
func signURL(path string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(path + "\n" + exp))
	return path + "?expires=" + exp + "&sig=" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
