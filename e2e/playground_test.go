package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium: $EASEL_CHROMIUM, /usr/bin/chromium,
// or chromium on PATH. Never a downloaded browser.
func chromiumPath() string {
	if p := os.Getenv("EASEL_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// artifactDir is where the playground test keeps its screenshots:
// $EASEL_ARTIFACTS when set (CI keeps it), else the test's artifact
// directory (kept under -outputdir with go test -artifacts; removed after
// the test otherwise).
func artifactDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("EASEL_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

// browser is a headless chromium tab.
type browser struct {
	ctx context.Context // the tab's; no deadline, so a failure can still be photographed

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// startBrowser starts headless chromium, or skips the test when none is
// installed.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no chromium binary: install Debian's chromium (apt-get install -y chromium) or set EASEL_CHROMIUM")
	}
	var out lockedBuffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // as root, chromium refuses to start with its sandbox
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("no-proxy-server", true),
		chromedp.CombinedOutput(&out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium's output:\n%s", out.String())
		}
	})
	// The first action starts the browser and binds it to ctx, which has
	// no deadline; the wait for it has one.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting %s: %v\n%s", bin, err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start within 60 s\n%s", bin, out.String())
	}
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs actions within a bound.
func (b *browser) do(t *testing.T, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression into T.
func eval[T any](t *testing.T, b *browser, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// screenshot saves the whole page as a PNG in the artifact directory.
func (b *browser) screenshot(t *testing.T, dir, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	t.Logf("screenshot: %s", p)
	return p
}

// problems are the console's errors, warnings and uncaught exceptions
// (a refusal by the Content-Security-Policy is one).
func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if strings.Contains(m.Text, "status of 401") || strings.Contains(m.Text, "status of 415") {
			continue // the invalid key of "an error is shown readably", the text file of "an edit of a local file"
		}
		if m.IsException() || m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning {
			out = append(out, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
		}
	}
	return out
}

// pageState is what the playground shows of its task.
type pageState struct {
	Status   string `json:"status"`
	Source   string `json:"source"`
	Progress int    `json:"progress"`
	Text     string `json:"text"`
	Error    string `json:"error"`
	TaskID   string `json:"task_id"`
	JSON     string `json:"json"`
	ImgSrc   string `json:"img_src"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
}

const pageStateJS = `(() => {
  const $ = (id) => document.getElementById(id);
  const img = document.querySelector('#results img');
  const loaded = !!img && img.complete;
  return {
    status: $('task').dataset.status || '',
    source: $('task').dataset.source || '',
    progress: Number($('progress').value),
    text: $('status').textContent,
    error: $('error').hidden ? '' : $('error').textContent,
    task_id: $('task-id').textContent,
    json: $('task-json').textContent,
    img_src: img ? img.src : '',
    width: loaded ? img.naturalWidth : 0,
    height: loaded ? img.naturalHeight : 0,
  };
})()`

// TestPlayground drives the playground page in headless chromium against
// the real stack: a key and a prompt entered, the task followed on the
// stream to 100 %, the image shown; a screenshot kept either way.
func TestPlayground(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser test is not part of make test-short")
	}
	t.Parallel()
	b := startBrowser(t)
	s := startStack(t, stackOptions{simDelay: 2 * time.Second})
	dir := artifactDir(t)
	defer func() {
		if t.Failed() {
			b.screenshot(t, dir, "playground-failed.png")
		}
	}()

	const prompt = "a lighthouse on a cliff at dusk"
	b.do(t, 30*time.Second,
		chromedp.Navigate(s.base+"/playground"),
		chromedp.WaitVisible(chromedp.ID("api-key")),
	)
	if u := eval[string](t, b, `location.pathname`); u != "/playground/" {
		t.Errorf("the page is at %s; want /playground/", u)
	}
	if models := eval[[]string](t, b, `[...document.querySelectorAll('#model option')].map(o => o.value)`); strings.Join(models, ",") != std+","+pro {
		t.Errorf("model options %v; want %s, %s", models, std, pro)
	}
	// The size is the pro model's only: shown, and sent, for it alone.
	choose := func(model string) (sizeShown bool, curl string) {
		t.Helper()
		got := eval[[]string](t, b, `(() => {
  const m = document.getElementById('model');
  m.value = '`+model+`';
  m.dispatchEvent(new Event('change', { bubbles: true }));
  return [String(!document.getElementById('image-size-field').hidden), document.getElementById('curl').textContent];
})()`)
		return got[0] == "true", got[1]
	}
	if shown, curl := choose(pro); !shown || !strings.Contains(curl, `"image_size":"1K"`) || !strings.Contains(curl, `"model":"`+pro+`"`) {
		t.Errorf("pro: size shown %v, curl %q; want the size shown and sent", shown, curl)
	}
	if shown, curl := choose(std); shown || strings.Contains(curl, "image_size") {
		t.Errorf("standard: size shown %v, curl %q; want no size", shown, curl)
	}
	b.do(t, 30*time.Second,
		chromedp.SendKeys(chromedp.ID("api-key"), s.key),
		chromedp.SendKeys(chromedp.ID("prompt"), prompt),
		chromedp.SetValue(chromedp.ID("aspect-ratio"), "16:9"),
		chromedp.Click(chromedp.ID("submit")),
	)

	// Follow the page until the image has loaded.
	var (
		st       pageState
		progress []int
	)
	deadline := time.Now().Add(60 * time.Second)
	for {
		st = eval[pageState](t, b, pageStateJS)
		if len(progress) == 0 || progress[len(progress)-1] != st.Progress {
			progress = append(progress, st.Progress)
		}
		if st.Error != "" {
			t.Fatalf("the page shows an error: %s (state %+v)", st.Error, st)
		}
		if st.Progress == 100 && st.Width > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no image within 60 s; progress seen %v, state %+v", progress, st)
		}
		time.Sleep(25 * time.Millisecond)
	}
	// Painted, not only loaded, before the screenshot.
	if !eval[bool](t, b, `document.querySelector('#results img').decode().then(() => new Promise((ok) => requestAnimationFrame(() => ok(true))))`, chromedp.EvalAwaitPromise) {
		t.Error("the image did not decode")
	}
	shot := b.screenshot(t, dir, "playground.png")

	if st.Status != "completed" || !strings.Contains(st.Text, "completed") || !strings.Contains(st.Text, "100") {
		t.Errorf("status %q, text %q; want completed at 100 %%", st.Status, st.Text)
	}
	if st.Source != "stream" {
		t.Errorf("the progress came from %q; want the stream", st.Source)
	}
	intermediate := 0
	for _, p := range progress {
		if p > 0 && p < 100 {
			intermediate++
		}
	}
	if intermediate == 0 {
		t.Errorf("progress seen %v: want a value between 0 and 100 on the way", progress)
	}
	if st.Width != 1344 || st.Height != 768 {
		t.Errorf("image %dx%d; want 1344x768 (standard, 16:9)", st.Width, st.Height)
	}
	var rec struct {
		TaskID   string   `json:"task_id"`
		Model    string   `json:"model"`
		Status   string   `json:"status"`
		Progress int      `json:"progress"`
		Results  []string `json:"results"`
	}
	if err := json.Unmarshal([]byte(st.JSON), &rec); err != nil {
		t.Fatalf("task JSON %q: %v", st.JSON, err)
	}
	if rec.TaskID == "" || rec.TaskID != st.TaskID || rec.Model != std || rec.Status != "completed" || rec.Progress != 100 ||
		len(rec.Results) != 1 || rec.Results[0] != st.ImgSrc || !strings.HasPrefix(st.ImgSrc, s.base+"/v1/files/") {
		t.Errorf("task JSON %+v; page task id %q, image %q", rec, st.TaskID, st.ImgSrc)
	}
	if !strings.Contains(st.JSON, "\n  \"task_id\": ") {
		t.Errorf("task JSON is not pretty-printed: %q", st.JSON)
	}

	// The key is kept for the tab only.
	if kept := eval[[]string](t, b, `[sessionStorage.getItem('easel.playground.apiKey') || '', localStorage.getItem('easel.playground.apiKey') || '']`); kept[0] != s.key || kept[1] != "" {
		t.Errorf("key kept in sessionStorage %q, localStorage %q; want the key in sessionStorage only", kept[0], kept[1])
	}

	t.Run("copy as curl", func(t *testing.T) {
		b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("copy-curl")))
		cmd := eval[string](t, b, `document.getElementById('curl').textContent`)
		if strings.Contains(cmd, s.key) || !strings.Contains(cmd, `"Authorization: Bearer $EASEL_API_KEY"`) {
			t.Fatalf("curl command %q: want the key as $EASEL_API_KEY", cmd)
		}
		body := `'{"model":"` + std + `","task_type":"image","input":{"prompt":"` + prompt + `","aspect_ratio":"16:9"}}'`
		if !strings.Contains(cmd, "'"+s.base+"/v1/task/create'") || !strings.HasSuffix(cmd, "-d "+body) {
			t.Fatalf("curl command %q: want a POST of %s to %s/v1/task/create", cmd, body, s.base)
		}
		if _, err := exec.LookPath("sh"); err != nil {
			return
		}
		if _, err := exec.LookPath("curl"); err != nil {
			t.Log("no curl: the command is not run")
			return
		}
		run := exec.Command("sh", "-c", cmd)
		run.Env = append(os.Environ(), "EASEL_API_KEY="+s.key)
		out, err := run.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"code":200`) || !strings.Contains(string(out), `"task_id":"task_`) {
			t.Errorf("running the curl command: %v\n%s", err, out)
		}
	})

	t.Run("an edit of a local file", func(t *testing.T) {
		dir := t.TempDir()
		notImage := filepath.Join(dir, "notes.png")
		source := filepath.Join(dir, "source.png")
		if err := os.WriteFile(notImage, []byte("not an image at all"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(source, pngBytes(t, 640, 360), 0o644); err != nil {
			t.Fatal(err)
		}
		uploadErr := `(() => { const e = document.getElementById('upload-error'); return e.hidden ? '' : e.textContent; })()`
		// A file the API refuses: its answer shown, nothing added.
		b.do(t, 10*time.Second, chromedp.SetUploadFiles(chromedp.ID("image-files"), []string{notImage}))
		waitFor(t, b, 15*time.Second, "the refused upload's error", uploadErr+` !== ''`)
		if msg := eval[string](t, b, uploadErr); !strings.HasPrefix(msg, "Not uploaded: notes.png: 415 Unsupported Media Type: the file is not a PNG, JPEG, WebP or GIF image") {
			t.Errorf("the refused upload shows %q; want the API's 415 and its msg", msg)
		}
		if urls := eval[string](t, b, `document.getElementById('image-urls').value`); urls != "" {
			t.Errorf("after a refused upload the image URLs read %q; want none", urls)
		}
		// A PNG: uploaded, its URL in the list, its thumbnail and size shown.
		b.do(t, 10*time.Second, chromedp.SetUploadFiles(chromedp.ID("image-files"), []string{source}))
		waitFor(t, b, 15*time.Second, "the uploaded image's thumbnail",
			`(() => { const i = document.querySelector('#uploads li img'); return !!i && i.complete && i.naturalWidth > 0; })()`)
		urls := eval[string](t, b, `document.getElementById('image-urls').value`)
		if !strings.HasPrefix(urls, s.base+"/v1/files/uploads/") || strings.Contains(urls, "\n") {
			t.Fatalf("the image URLs read %q; want the upload's URL alone", urls)
		}
		if line := eval[string](t, b, `document.querySelector('#uploads li span').textContent`); !strings.HasPrefix(line, "source.png: 640 × 360 px, PNG, ") {
			t.Errorf("the upload's line reads %q; want its name, pixels and type", line)
		}
		if msg := eval[string](t, b, uploadErr); msg != "" {
			t.Errorf("after an accepted upload the page still shows %q", msg)
		}
		if curl := eval[string](t, b, `document.getElementById('curl').textContent`); !strings.Contains(curl, `"image_urls":["`+urls+`"]`) {
			t.Errorf("the curl command %q lacks the uploaded URL", curl)
		}
		b.screenshot(t, artifactDir(t), "playground-upload.png")

		before := eval[pageState](t, b, pageStateJS).TaskID
		b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("submit")))
		var st pageState
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(60 * time.Second); ; <-tick.C {
			st = eval[pageState](t, b, pageStateJS)
			if st.Error != "" {
				t.Fatalf("the edit shows an error: %s", st.Error)
			}
			if st.TaskID != before && st.Status == "completed" && st.Width > 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the edit did not complete within 60 s: %+v", st)
			}
		}
		var rec struct {
			TaskID string `json:"task_id"`
			Input  struct {
				ImageURLs []string `json:"image_urls"`
			} `json:"input"`
		}
		if err := json.Unmarshal([]byte(st.JSON), &rec); err != nil {
			t.Fatalf("task JSON %q: %v", st.JSON, err)
		}
		if rec.TaskID != st.TaskID || len(rec.Input.ImageURLs) != 1 || rec.Input.ImageURLs[0] != urls {
			t.Errorf("the edit's record %+v; want input.image_urls [%s]", rec, urls)
		}
		// Removed, the URL leaves the list.
		b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(`#uploads li button`)))
		if got := eval[[]string](t, b, `[document.getElementById('image-urls').value, String(document.querySelectorAll('#uploads li').length)]`); got[0] != "" || got[1] != "0" {
			t.Errorf("after Remove the URLs read %q with %s uploads listed; want none", got[0], got[1])
		}
	})

	t.Run("an error is shown readably", func(t *testing.T) {
		b.do(t, 10*time.Second,
			chromedp.Evaluate[chromedp.Void](`document.getElementById('api-key').value = ''`),
			chromedp.SendKeys(chromedp.ID("api-key"), "esk_0000000000000000000000000000000000000000"),
			chromedp.Click(chromedp.ID("submit")),
		)
		var msg string
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
			if msg = eval[pageState](t, b, pageStateJS).Error; msg != "" {
				break
			}
		}
		if msg != "401 Unauthorized: invalid API key" {
			t.Errorf("error shown %q; want %q", msg, "401 Unauthorized: invalid API key")
		}
	})

	t.Run("phone width", func(t *testing.T) {
		b.do(t, 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		if w := eval[int](t, b, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("the page is %d px wide at a 390 px viewport", w)
		}
		b.screenshot(t, dir, "playground-phone.png")
	})

	if problems := b.problems(); len(problems) > 0 {
		t.Errorf("the console shows:\n%s", strings.Join(problems, "\n"))
	}
	if shot != "" {
		f, err := os.Open(shot)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cfg, err := png.DecodeConfig(f)
		if err != nil || cfg.Width < 1000 || cfg.Height < 600 {
			t.Errorf("screenshot %s: %v, %dx%d", shot, err, cfg.Width, cfg.Height)
		}
	}
}
