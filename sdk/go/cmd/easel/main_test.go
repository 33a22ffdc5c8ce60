package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeAPI is an Easel API in memory. Each query of a task moves it on:
// pending (first in its queue), processing at 50 %, then completed with
// one PNG result; a prompt "fail" ends failed instead.
type fakeAPI struct {
	t    *testing.T
	url  string
	png  []byte
	mu   sync.Mutex
	ids  []string // in creation order
	recs map[string]map[string]any
	// steps counts each task's queries; creates holds the create bodies;
	// auth the Authorization headers seen.
	steps   map[string]int
	creates []map[string]any
	auth    []string
	fails   map[string]bool
	// prefers holds the creates' Prefer headers.
	prefers []string
	// uploads holds the images uploaded.
	uploads [][]byte
	// hook is the account's webhook endpoint (nil: none); account holds
	// the requests to /v1/account/....
	hook    *webhookEndpoint
	account []request
}

func newFakeAPI(t *testing.T) *fakeAPI {
	img := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.NRGBA{200, 10, 10, 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{t: t, png: b.Bytes(), recs: map[string]map[string]any{}, steps: map[string]int{}, fails: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fakeAPI) fail(w http.ResponseWriter, status int, msg string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "msg": msg, "data": nil})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/v1/files/") {
		if r.Header.Get("Authorization") != "" {
			f.t.Errorf("a download sent Authorization")
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(f.png)
		return
	}
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	if r.Header.Get("Authorization") != "Bearer esk_test" {
		f.fail(w, 401, "invalid API key")
		return
	}
	q := r.URL.Query()
	switch r.URL.Path {
	case "/v1/uploads":
		file, _, err := r.FormFile("file")
		if err != nil {
			f.fail(w, 400, `the multipart/form-data body has no "file" field`)
			return
		}
		data, _ := io.ReadAll(file)
		if !bytes.HasPrefix(data, []byte("\x89PNG")) {
			f.fail(w, 415, "the file is not a PNG, JPEG, WebP or GIF image (got text/plain)")
			return
		}
		f.uploads = append(f.uploads, data)
		u := fmt.Sprintf("https://uploads.example/v1/files/uploads/%d.png?expires=1795446000&sig=s", len(f.uploads))
		_ = json.NewEncoder(w).Encode(map[string]any{"code": 200, "msg": "success", "data": map[string]any{"url": u, "expires_at": 1795446000, "content_type": "image/png", "width": 3, "height": 2}})
	case "/v1/task/create":
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			f.fail(w, 400, "malformed JSON")
			return
		}
		f.creates = append(f.creates, body)
		f.prefers = append(f.prefers, r.Header.Get("Prefer"))
		id := fmt.Sprintf("task_lumen_%d", len(f.ids)+1)
		f.ids = append(f.ids, id)
		f.fails[id] = body["input"].(map[string]any)["prompt"] == "fail"
		f.recs[id] = map[string]any{"task_id": id, "task_type": "image", "model": body["model"], "status": "pending", "progress": 0,
			"create_time": 1795359098636, "start_time": 0, "complete_time": 0, "results": []string{}, "queue_position": 1, "eta_ms": 2000,
			"price": 4, "input": map[string]any{"prompt": body["input"].(map[string]any)["prompt"], "aspect_ratio": "1:1", "output_format": "png", "num_images": 1}}
		_ = json.NewEncoder(w).Encode(map[string]any{"code": 200, "msg": "success", "data": map[string]string{"task_id": id}})
	case "/v1/task/query":
		rec, ok := f.recs[q.Get("task_id")]
		if !ok {
			f.fail(w, 404, "task "+q.Get("task_id")+" not found")
			return
		}
		id := q.Get("task_id")
		f.steps[id]++
		if rec["status"] == "pending" && f.steps[id] > 1 || rec["status"] == "processing" {
			delete(rec, "queue_position")
			delete(rec, "eta_ms")
			switch {
			case rec["status"] == "pending":
				rec["status"], rec["progress"], rec["start_time"] = "processing", 50, 1795359099136
			case f.fails[id]:
				rec["status"], rec["complete_time"] = "failed", 1795359100975
				rec["error"] = map[string]string{"code": "content_blocked", "message": "PROHIBITED_CONTENT"}
			default:
				rec["status"], rec["progress"], rec["complete_time"] = "completed", 100, 1795359100975
				rec["results"] = []string{f.url + "/v1/files/2026112214/" + strings.TrimPrefix(id, "task_lumen_") + ".png?expires=1&sig=x"}
			}
		}
		_ = json.NewEncoder(w).Encode(rec)
	case "/v1/task/cancel":
		var body struct {
			TaskID string `json:"task_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		rec, ok := f.recs[body.TaskID]
		if !ok {
			f.fail(w, 404, "task not found")
			return
		}
		if st := rec["status"].(string); st != "pending" && st != "processing" {
			f.fail(w, 409, "task "+body.TaskID+" is already "+st)
			return
		}
		refunded := rec["status"] == "pending"
		rec["status"] = "canceled"
		credits := 0
		if refunded {
			credits = 18
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"code": 200, "msg": "success", "data": map[string]any{"task_id": body.TaskID, "status": "canceled", "refunded": refunded, "credits_refunded": credits}})
	case "/v1/task/list":
		limit := 20
		if q.Get("limit") != "" {
			limit, _ = strconv.Atoi(q.Get("limit"))
		}
		var tasks []map[string]any
		ids := slices.Clone(f.ids)
		slices.Reverse(ids)
		start := 0
		if c := q.Get("cursor"); c != "" {
			start = slices.Index(ids, c) + 1
		}
		next := ""
		for i := start; i < len(ids); i++ {
			rec := f.recs[ids[i]]
			if st := q.Get("status"); st != "" && rec["status"] != st {
				continue
			}
			if len(tasks) == limit {
				next = ids[i-1]
				break
			}
			tasks = append(tasks, rec)
		}
		page := map[string]any{"tasks": tasks}
		if next != "" {
			page["next_cursor"] = next
		}
		_ = json.NewEncoder(w).Encode(page)
	case "/v1/account/webhook", "/v1/account/webhook/test", "/v1/account/usage", "/v1/account/usage.csv":
		f.serveAccount(w, r)
	default:
		f.fail(w, 404, "not found")
	}
}

// run runs the command with the fake's URL and key in its environment.
func (f *fakeAPI) run(t *testing.T, env map[string]string, tty bool, args ...string) (string, string, error) {
	t.Helper()
	full := map[string]string{"EASEL_URL": f.url, "EASEL_API_KEY": "esk_test"}
	for k, v := range env {
		full[k] = v
	}
	var out, errOut bytes.Buffer
	a := &app{args: args, env: func(k string) string { return full[k] }, stdout: &out, stderr: &errOut, tty: &tty}
	err := a.run(context.Background())
	return out.String(), errOut.String(), err
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	local := filepath.Join(dir, "photo.png")
	if err := os.WriteFile(local, []byte("\x89PNG\r\n\x1a\n a picture"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.png")
	if err := os.WriteFile(text, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		input  string // the create's input, as JSON; "" when no create is expected
		model  string
		out    string // the file expected; "" none
		stdout string // a substring of stdout
		err    string // a substring of the error; "" none
	}{
		{"pro 2K 16:9 to a file", nil, []string{"generate", "a lighthouse at dusk", "--model", "pro", "--size", "2k", "--ratio", "16:9", "-o", "{dir}/lighthouse.png"},
			`{"aspect_ratio":"16:9","image_size":"2K","prompt":"a lighthouse at dusk"}`, "lumen-3-pro-image-preview", "{dir}/lighthouse.png", "wrote {dir}/lighthouse.png\n", ""},
		{"standard by default, into a directory", nil, []string{"generate", "a cat", "-o", "{dir}"},
			`{"prompt":"a cat"}`, "lumen-2.5-flash-image", "{dir}/task_lumen_1.png", "wrote {dir}/task_lumen_1.png\n", ""},
		{"another family word", map[string]string{"EASEL_MODEL_FAMILY": "nova"}, []string{"generate", "x", "-m", "pro", "-o", "{dir}/n.png"},
			`{"prompt":"x"}`, "nova-3-pro-image-preview", "{dir}/n.png", "wrote", ""},
		{"a full model id", nil, []string{"generate", "x", "--model", "lumen-2.5-flash-image", "-o", "{dir}/m.png"},
			`{"prompt":"x"}`, "lumen-2.5-flash-image", "{dir}/m.png", "wrote", ""},
		{"an edit by URL", nil, []string{"generate", "make it winter", "--image", "https://example.com/a.jpg", "--image", "http://example.com/b.png", "-o", "{dir}/e.png"},
			`{"image_urls":["https://example.com/a.jpg","http://example.com/b.png"],"prompt":"make it winter"}`, "lumen-2.5-flash-image", "{dir}/e.png", "wrote", ""},
		{"jpeg at a quality", nil, []string{"generate", "x", "--format", "JPEG", "--quality", "80", "-o", "{dir}/q.png"},
			`{"output_format":"jpeg","output_quality":80,"prompt":"x"}`, "lumen-2.5-flash-image", "{dir}/q.png", "wrote", ""},
		{"webp, two images asked", nil, []string{"generate", "x", "--format", "webp", "-n", "2", "-o", "{dir}/w.png"},
			`{"num_images":2,"output_format":"webp","prompt":"x"}`, "lumen-2.5-flash-image", "{dir}/w.png", "wrote", ""},
		{"JSON for scripts", nil, []string{"generate", "x", "--json", "-o", "{dir}/j.png"},
			`{"prompt":"x"}`, "lumen-2.5-flash-image", "{dir}/j.png", `"status": "completed"`, ""},
		{"a failed task", nil, []string{"generate", "fail", "-o", "{dir}/f.png"},
			`{"prompt":"fail"}`, "lumen-2.5-flash-image", "", "failed 50%", "task task_lumen_1 failed: content_blocked: PROHIBITED_CONTENT"},
		{"a local image is uploaded and its URL sent, a URL as it is", nil, []string{"generate", "x", "--image", local, "--image", "https://example.com/a.jpg", "-o", "{dir}/u.png"},
			`{"image_urls":["https://uploads.example/v1/files/uploads/1.png?expires=1795446000\u0026sig=s","https://example.com/a.jpg"],"prompt":"x"}`, "lumen-2.5-flash-image", "{dir}/u.png", "wrote", ""},
		{"a local file that is not an image", nil, []string{"generate", "x", "--image", text},
			"", "", "", "", "--image " + text + ": upload: easel: 415 Unsupported Media Type"},
		{"a directory", nil, []string{"generate", "x", "--image", dir}, "", "", "", "", "--image " + dir + " is not a regular file"},
		{"not a URL", nil, []string{"generate", "x", "--image", "nowhere.png"}, "", "", "", "", `--image "nowhere.png" is not an http(s) URL or a file`},
		{"an unknown model", nil, []string{"generate", "x", "--model", "turbo"}, "", "", "", "", `unknown model "turbo": use standard, pro or a model id`},
		{"no key", map[string]string{"EASEL_API_KEY": ""}, []string{"generate", "x"}, "", "", "", "", "no API key: pass --api-key or set EASEL_API_KEY"},
		{"a wrong key", nil, []string{"generate", "x", "--api-key", "esk_wrong"}, "", "", "", "", "easel: 401 Unauthorized: invalid API key"},
		{"no prompt", nil, []string{"generate"}, "", "", "", "", "accepts 1 arg(s), received 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sub := func(s string) string { return strings.ReplaceAll(s, "{dir}", dir) }
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = sub(a)
			}
			f := newFakeAPI(t)
			stdout, _, err := f.run(t, tt.env, false, args...)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), sub(tt.err))) {
				t.Fatalf("error %v; want %q", err, tt.err)
			}
			if !strings.Contains(stdout, sub(tt.stdout)) {
				t.Errorf("stdout %q; want %q in it", stdout, sub(tt.stdout))
			}
			if strings.Contains(stdout, "\r") || strings.Contains(stdout, "%|") {
				t.Errorf("progress drawn off a terminal: %q", stdout)
			}
			if tt.input == "" {
				if len(f.creates) != 0 {
					t.Errorf("created %v", f.creates)
				}
			} else {
				if len(f.creates) != 1 {
					t.Fatalf("%d creates", len(f.creates))
				}
				in, _ := json.Marshal(f.creates[0]["input"])
				if string(in) != tt.input || f.creates[0]["model"] != tt.model || f.creates[0]["task_type"] != "image" {
					t.Errorf("created %v; want model %s, input %s", f.creates[0], tt.model, tt.input)
				}
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*"))
			if tt.out == "" {
				if len(files) != 0 {
					t.Errorf("files %v written", files)
				}
				return
			}
			if len(files) != 1 || files[0] != sub(tt.out) {
				t.Fatalf("files %v; want %s alone (no partial file left)", files, sub(tt.out))
			}
			if b, _ := os.ReadFile(files[0]); !bytes.Equal(b, f.png) {
				t.Errorf("%s holds %d bytes, not the image", files[0], len(b))
			}
			if slices.Contains(args, "--json") {
				var got struct {
					Task  map[string]any `json:"task"`
					Files []string       `json:"files"`
				}
				if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.Task["task_id"] != "task_lumen_1" || len(got.Files) != 1 || got.Files[0] != sub(tt.out) {
					t.Errorf("JSON %s: %v", stdout, err)
				}
			}
		})
	}
}

// On a terminal: the spinner with the queue position, then the bar to 100 %.
// --wait-on-create asks the server to hold the create (Prefer: wait), and
// still follows a task that was not done by then.
func TestGenerateWaitsOnCreate(t *testing.T) {
	for _, tt := range []struct {
		flag, prefer string
	}{
		{"", ""},
		{"30s", "wait=30"},
		{"10m", "wait=60"},
	} {
		t.Run(tt.flag, func(t *testing.T) {
			f := newFakeAPI(t)
			out := filepath.Join(t.TempDir(), "w.png")
			args := []string{"generate", "a cat", "-o", out}
			if tt.flag != "" {
				args = append(args, "--wait-on-create", tt.flag)
			}
			if _, _, err := f.run(t, nil, false, args...); err != nil {
				t.Fatal(err)
			}
			if len(f.prefers) != 1 || f.prefers[0] != tt.prefer {
				t.Errorf("Prefer %q; want %q", f.prefers, tt.prefer)
			}
			if b, _ := os.ReadFile(out); !bytes.Equal(b, f.png) {
				t.Error("the image was not written")
			}
		})
	}
}

func TestGenerateProgress(t *testing.T) {
	f := newFakeAPI(t)
	out := filepath.Join(t.TempDir(), "p.png")
	stdout, _, err := f.run(t, nil, true, "generate", "a lighthouse", "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pending: #1 in queue, about 2s", "processing  50%", "completed  100%", "wrote " + out + "\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output %q lacks %q", stdout, want)
		}
	}
	if i, j := strings.Index(stdout, "pending"), strings.Index(stdout, "100%"); i < 0 || j < i {
		t.Errorf("output %q: the spinner is not before the bar", stdout)
	}
	// --json draws nothing, even on a terminal.
	stdout, _, err = f.run(t, nil, true, "generate", "x", "--json", "-o", out)
	if err != nil || strings.Contains(stdout, "%") || !json.Valid([]byte(stdout)) {
		t.Errorf("--json on a terminal: %v %q", err, stdout)
	}
}

func TestTaskCommands(t *testing.T) {
	f := newFakeAPI(t)
	dir := t.TempDir()
	// Three tasks: task_lumen_1 completed, 2 pending, 3 failed.
	if _, _, err := f.run(t, nil, false, "generate", "one", "-o", dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.run(t, nil, false, "generate", "two", "--timeout", "1ns"); err == nil || !strings.Contains(err.Error(), "task task_lumen_2 goes on; `easel task wait task_lumen_2 -o FILE` picks it up") {
		t.Fatalf("generate --timeout 1ns: %v", err)
	}
	if out, _, err := f.run(t, nil, false, "generate", "fail", "--no-wait"); err != nil || out != "task_lumen_3\n" {
		t.Fatalf("generate --no-wait: %q %v", out, err)
	}
	f.mu.Lock()
	f.steps["task_lumen_3"] = 5
	f.recs["task_lumen_3"]["status"] = "processing"
	f.mu.Unlock()
	tests := []struct {
		name   string
		args   []string
		stdout []string // substrings
		err    string
	}{
		{"get", []string{"task", "get", "task_lumen_1"}, []string{"task_lumen_1  completed 100%", "model      lumen-2.5-flash-image", "prompt     one", "images     1 png", "price      4 credits", "queued 500ms", "result     " + f.url + "/v1/files/"}, ""},
		{"get, JSON", []string{"task", "get", "task_lumen_1", "--json"}, []string{`"task_id": "task_lumen_1"`, `"progress": 100`}, ""},
		{"get, unknown", []string{"task", "get", "task_lumen_9"}, nil, "404 Not Found: task task_lumen_9 not found"},
		{"list", []string{"task", "list"}, []string{"TASK", "task_lumen_3  processing", "task_lumen_2  pending", "task_lumen_1  completed"}, ""},
		{"list a page", []string{"task", "list", "--limit", "1"}, []string{"task_lumen_3", "more: easel task list --cursor task_lumen_3"}, ""},
		{"list the next page", []string{"task", "list", "--limit", "1", "--cursor", "task_lumen_3"}, []string{"task_lumen_2", "--cursor task_lumen_2"}, ""},
		{"list every page, JSON", []string{"task", "list", "--limit", "1", "--all", "--json"}, []string{`"task_id": "task_lumen_3"`, `"task_id": "task_lumen_1"`}, ""},
		{"list by status", []string{"task", "list", "--status", "completed"}, []string{"task_lumen_1  completed"}, ""},
		{"cancel a pending task", []string{"task", "cancel", "task_lumen_2"}, []string{"canceled task_lumen_2 (refunded 18 credits)"}, ""},
		{"cancel it again", []string{"task", "cancel", "task_lumen_2"}, nil, "409 Conflict: task task_lumen_2 is already canceled"},
		{"wait for a canceled task", []string{"task", "wait", "task_lumen_2"}, []string{"task_lumen_2  canceled 0%"}, "task task_lumen_2 was canceled"},
		{"wait and download", []string{"task", "wait", "task_lumen_1", "-o", filepath.Join(dir, "w.png")}, []string{"wrote " + filepath.Join(dir, "w.png")}, ""},
		{"wait, JSON", []string{"task", "wait", "task_lumen_3", "--json"}, []string{`"status": "failed"`, `"code": "content_blocked"`}, "task task_lumen_3 failed"},
		{"an unknown flag", []string{"task", "list", "--colour"}, nil, "unknown flag: --colour (see easel task list --help)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := f.run(t, nil, false, tt.args...)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v; want %q", err, tt.err)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout %q lacks %q", stdout, s)
				}
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "w.png")); err != nil || !bytes.Equal(b, f.png) {
		t.Errorf("task wait -o: %v", err)
	}
}

// Flags come before the environment, and the environment before the
// defaults.
func TestURLAndKey(t *testing.T) {
	f := newFakeAPI(t)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		ok   bool
	}{
		{"from the environment", nil, nil, true},
		{"flags win", map[string]string{"EASEL_URL": "http://127.0.0.1:1", "EASEL_API_KEY": "esk_wrong"}, []string{"--url", f.url, "--api-key", "esk_test"}, true},
		{"a wrong key in the environment", map[string]string{"EASEL_API_KEY": "esk_wrong"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := f.run(t, tt.env, false, append([]string{"task", "list"}, tt.args...)...)
			if (err == nil) != tt.ok {
				t.Errorf("error %v; want ok %v", err, tt.ok)
			}
		})
	}
}
