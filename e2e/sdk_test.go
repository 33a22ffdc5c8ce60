package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	easel "github.com/easelhq/easel/sdk/go"
)

// recorder is an http.RoundTripper that keeps, for every query request,
// its wait parameter, its status and how long it took.
type recorder struct {
	mu      sync.Mutex
	queries []recorded
}

type recorded struct {
	wait   string
	status int
	took   time.Duration
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if req.URL.Path == "/v1/task/query" {
		rec := recorded{wait: req.URL.Query().Get("wait"), took: time.Since(start)}
		if resp != nil {
			rec.status = resp.StatusCode
		}
		r.mu.Lock()
		r.queries = append(r.queries, rec)
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.queries)
}

// occupy starts a pro task and returns once a worker runs it, so that with
// EASEL_WORKER_CONCURRENCY=1 the next tasks wait in the queue.
func occupy(t *testing.T, c *easel.Client) string {
	t.Helper()
	ctx := context.Background()
	id, err := c.Create(ctx, easel.CreateRequest{Model: easel.ModelPro, Prompt: "a task that keeps the worker busy"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		task, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != easel.StatusPending {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still pending", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSDK drives the real gateway and a worker (one task at a time) with
// the Go SDK, as its users would.
func TestSDK(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: time.Second, env: map[string]string{"EASEL_WORKER_CONCURRENCY": "1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := &recorder{}
	c, err := easel.New(s.base, s.key, easel.WithHTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}

	plain, _ := easel.New(s.base, s.key)

	var first string // a completed task
	t.Run("generate, long-poll and download", func(t *testing.T) {
		occupy(t, plain)
		var updates []easel.Task
		task, err := c.Generate(ctx, easel.CreateRequest{Model: easel.ModelPro, Prompt: "a tall tower", AspectRatio: "9:16", ImageSize: "2K"},
			easel.OnUpdate(func(t *easel.Task) { updates = append(updates, *t) }))
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != easel.StatusCompleted || task.Progress != 100 || len(task.Results) != 1 || task.Error != nil || task.Model != easel.ModelPro {
			t.Fatalf("task %+v", task)
		}
		first = task.ID
		// Pending behind the other task, then processing with progress
		// rising, then completed.
		// First in its queue; or second, read within the 250 ms a gateway
		// keeps a queue's numbers, from before the task ahead started
		// (occupy saw it start an instant ago).
		if updates[0].Status != easel.StatusPending || updates[0].QueuePosition == nil || *updates[0].QueuePosition < 1 || *updates[0].QueuePosition > 2 {
			t.Errorf("first update %+v (position %v); want pending, first in its queue", updates[0], deref(updates[0].QueuePosition))
		}
		intermediate := 0
		for i, u := range updates {
			if i > 0 && u.Progress < updates[i-1].Progress {
				t.Errorf("progress went back: %d then %d", updates[i-1].Progress, u.Progress)
			}
			if u.Status == easel.StatusProcessing && u.Progress > 0 && u.Progress < 100 {
				intermediate++
			}
		}
		if intermediate < 3 || updates[len(updates)-1].Status != easel.StatusCompleted {
			t.Errorf("updates %v: want at least 3 of processing, then completed", updates)
		}
		// A first read, then long-polls (of 5 s while pending), each
		// bringing a change: no idle polling, and the wait while pending
		// held by the server.
		qs := rt.all()
		held := false
		for i, q := range qs {
			if i == 0 && q.wait != "" || i > 0 && q.wait != "5" && q.wait != "30" || q.status != 200 {
				t.Errorf("query %d with wait %q answered %d; want a read then long-polls answered 200", i, q.wait, q.status)
			}
			held = held || q.took > 500*time.Millisecond
		}
		if len(qs) > len(updates)+1 || !held {
			t.Errorf("%d queries for %d updates, one held: %v; want about one per change", len(qs), len(updates), held)
		}
		var img bytes.Buffer
		if _, err := c.Download(ctx, task.Results[0], &img); err != nil {
			t.Fatal(err)
		}
		cfg, format, err := image.DecodeConfig(&img)
		if err != nil || format != "png" || cfg.Width != 1536 || cfg.Height != 2752 {
			t.Errorf("image %s %dx%d %v; want png 1536x2752", format, cfg.Width, cfg.Height, err)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		occupy(t, plain)
		id, err := c.Create(ctx, easel.CreateRequest{Model: easel.ModelPro, Prompt: "never drawn"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Cancel(ctx, id)
		if err != nil || res.TaskID != id || res.Status != easel.StatusCanceled || !res.Refunded || res.CreditsRefunded <= 0 {
			t.Fatalf("Cancel of a pending task: %+v %v; want refunded", res, err)
		}
		task, err := c.Wait(ctx, id)
		if err != nil || task.Status != easel.StatusCanceled || len(task.Results) != 0 || task.CompleteTime == 0 {
			t.Errorf("Wait: %+v %v; want canceled", task, err)
		}
		if _, err := c.Cancel(ctx, id); !errors.Is(err, easel.ErrConflict) {
			t.Errorf("second cancel: %v; want ErrConflict", err)
		}
		if _, err := c.Cancel(ctx, "task_lumen_2170455969821192122696478843056611060"); !errors.Is(err, easel.ErrNotFound) {
			t.Errorf("cancel of an unknown task: %v; want ErrNotFound", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		p, err := c.List(ctx, easel.ListOptions{Limit: 1})
		if err != nil || len(p.Tasks) != 1 || p.NextCursor == "" {
			t.Fatalf("List limit 1: %+v %v", p, err)
		}
		var ids []string
		for task, err := range c.Tasks(ctx, easel.ListOptions{Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, task.ID)
		}
		// Two occupiers, the generated task and the canceled one, newest
		// first.
		if len(ids) != 4 || ids[0] != p.Tasks[0].ID || !slices.Contains(ids, first) || !slices.IsSortedFunc(ids, func(a, b string) int { return -strings.Compare(a, b) }) {
			t.Errorf("every page: %v", ids)
		}
		var canceled []string
		for task, err := range c.Tasks(ctx, easel.ListOptions{Status: easel.StatusCanceled}) {
			if err != nil {
				t.Fatal(err)
			}
			canceled = append(canceled, task.ID)
		}
		if len(canceled) != 1 {
			t.Errorf("canceled tasks %v; want 1", canceled)
		}
		if _, err := c.List(ctx, easel.ListOptions{Status: "done"}); !errors.Is(err, easel.ErrBadRequest) {
			t.Errorf("a bad status: %v; want ErrBadRequest", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		other, _ := easel.New(s.base, s.keyOther)
		off, _ := easel.New(s.base, s.keyOff)
		wrong, _ := easel.New(s.base, "esk_unknownunknownunknownunknownunknown00")
		tests := []struct {
			name string
			call func() error
			kind error
			msg  string
		}{
			{"a bad ratio", func() error {
				_, err := c.Create(ctx, easel.CreateRequest{Model: easel.ModelStandard, Prompt: "x", AspectRatio: "7:5"})
				return err
			}, easel.ErrBadRequest, "aspect_ratio"},
			{"a size on the standard model", func() error {
				_, err := c.Create(ctx, easel.CreateRequest{Model: easel.ModelStandard, Prompt: "x", ImageSize: "2K"})
				return err
			}, easel.ErrBadRequest, "input.image_size is not supported by model lumen-2.5-flash-image"},
			{"an unknown key", func() error { _, err := wrong.Get(ctx, first); return err }, easel.ErrUnauthorized, ""},
			{"a disabled account", func() error { _, err := off.Get(ctx, first); return err }, easel.ErrForbidden, "disabled"},
			{"another account's task", func() error { _, err := other.Get(ctx, first); return err }, easel.ErrNotFound, "not found"},
			{"an unknown task", func() error { _, err := c.Wait(ctx, "task_lumen_123"); return err }, easel.ErrNotFound, "not found"},
		}
		for _, tt := range tests {
			err := tt.call()
			var apiErr *easel.APIError
			if !errors.Is(err, tt.kind) || !errors.As(err, &apiErr) || apiErr.Code != apiErr.StatusCode || !strings.Contains(apiErr.Message, tt.msg) {
				t.Errorf("%s: %v; want %v with %q", tt.name, err, tt.kind, tt.msg)
			}
		}
	})

	t.Run("429 retried after Retry-After", func(t *testing.T) {
		_, key := s.newAccount(t, account.Spec{Name: "e2e-sdk-slow", Credits: 1000, QueryRateLimit: 1})
		slow, _ := easel.New(s.base, key)
		start := time.Now()
		for range 3 {
			if _, err := slow.Get(ctx, "task_lumen_123"); !errors.Is(err, easel.ErrNotFound) {
				t.Fatalf("query at 1 a second: %v; want the 404 once the 429s were waited out", err)
			}
		}
		if took := time.Since(start); took < time.Second {
			t.Errorf("3 queries at 1 a second took %v", took)
		}
		impatient, _ := easel.New(s.base, key, easel.WithRetries(0))
		_, _ = impatient.Get(ctx, "task_lumen_123")
		_, err := impatient.Get(ctx, "task_lumen_123")
		var apiErr *easel.APIError
		if !errors.Is(err, easel.ErrRateLimited) || !errors.As(err, &apiErr) || apiErr.RetryAfter < time.Second {
			t.Errorf("without retries: %v; want 429 with Retry-After", err)
		}
	})
}

// TestSDKExample runs the package example (example_test.go in sdk/go)
// against a real stack, as its documentation says to with `make run`.
func TestSDKExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sdk/go tests")
	}
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 500 * time.Millisecond})
	cmd := exec.Command("go", "test", "-trimpath", "-count=1", "-v", "-run", "^Example$", ".")
	cmd.Dir = "../sdk/go"
	cmd.Env = append(os.Environ(), "EASEL_URL="+s.base, "EASEL_API_KEY="+s.key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: Example") {
		t.Fatalf("go test -run Example: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "completed 100%") {
		t.Errorf("the example's updates are missing:\n%s", out)
	}
}

// TestSDKMatchesOpenAPI checks the SDK against the OpenAPI document the
// gateway serves: the routes it calls, the parameters it sends, the
// fields of its types and the values of its enums.
func TestSDKMatchesOpenAPI(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	resp, err := http.Get(s.base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /openapi.json: %d %s", resp.StatusCode, b)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	o := openapi{t: t, doc: doc}

	// The operations the SDK calls, with the parameters it sends.
	for _, op := range []struct {
		method, path string
		params       []string
	}{
		{"post", "/v1/task/create", []string{"Idempotency-Key"}},
		{"get", "/v1/task/query", []string{"task_id", "wait"}},
		{"post", "/v1/task/cancel", nil},
		{"get", "/v1/task/list", []string{"status", "model", "limit", "cursor"}},
		{"get", "/v1/account/usage", []string{"days", "key"}},
		{"get", "/v1/account/usage.csv", []string{"days", "key"}},
		{"get", "/v1/account/webhook", nil},
		{"put", "/v1/account/webhook", nil},
		{"delete", "/v1/account/webhook", nil},
		{"post", "/v1/account/webhook/test", nil},
		{"post", "/v1/uploads", nil},
	} {
		params := o.params(op.method, op.path)
		for _, p := range op.params {
			if _, ok := params[strings.ToLower(p)]; !ok {
				t.Errorf("%s %s: no parameter %s in %v", op.method, op.path, p, params)
			}
		}
	}
	if w := o.params("get", "/v1/task/query")["wait"]; w != nil {
		if sch := o.resolve(w["schema"]); sch["maximum"] != float64(60) {
			t.Errorf("wait's schema %v; the SDK's longest wait is 60", sch)
		}
	}

	// The records the SDK reads: the same fields, by JSON name.
	query := o.response("get", "/v1/task/query")
	o.sameFields("the task record", query, reflect.TypeFor[easel.Task]())
	o.sameFields("a task's error", o.resolve(o.props(query)["error"]), reflect.TypeFor[easel.TaskError]())
	list := o.response("get", "/v1/task/list")
	o.sameFields("the list", list, reflect.TypeFor[easel.TaskPage]())
	o.sameFields("a listed task", o.resolve(o.resolve(o.props(list)["tasks"])["items"]), reflect.TypeFor[easel.Task]())
	cancelData := o.resolve(o.props(o.response("post", "/v1/task/cancel"))["data"])
	o.sameFields("the cancel's data", cancelData, reflect.TypeFor[easel.CancelResult]())
	usage := o.resolve(o.props(o.response("get", "/v1/account/usage"))["data"])
	o.sameFields("the usage", usage, reflect.TypeFor[easel.Usage]())
	usageDay := o.resolve(o.resolve(o.props(usage)["days"])["items"])
	o.sameFields("a usage day", usageDay, reflect.TypeFor[easel.UsageDay]())
	o.sameFields("a usage figure", o.resolve(o.resolve(o.props(usageDay)["models"])["additionalProperties"]), reflect.TypeFor[easel.UsageCount]())
	o.sameFields("the account's webhook endpoint", o.resolve(o.props(o.response("get", "/v1/account/webhook"))["data"]), reflect.TypeFor[easel.WebhookEndpoint]())
	o.sameFields("a test event's answer", o.resolve(o.props(o.response("post", "/v1/account/webhook/test"))["data"]), reflect.TypeFor[easel.WebhookSend]())
	uploadData := o.resolve(o.props(o.response("post", "/v1/uploads"))["data"])
	o.sameFields("the upload's data", uploadData, reflect.TypeFor[easel.Upload]())

	// What the SDK sends in a create: every field of the body the document
	// has.
	sent := &bodyRecorder{}
	c, _ := easel.New(s.base, s.key, easel.WithHTTPClient(&http.Client{Transport: sent}))
	if _, err := c.Create(context.Background(), easel.CreateRequest{
		Model: easel.ModelPro, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K",
		ImageURLs: []string{"https://example.com/a.png"}, CallbackURL: "https://example.com/hook", CallbackEvents: []string{easel.EventCompleted},
	}); err != nil {
		t.Fatal(err)
	}
	create := o.resolve(o.op("post", "/v1/task/create")["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"])
	var body map[string]any
	if err := json.Unmarshal(sent.body, &body); err != nil {
		t.Fatal(err)
	}
	for k := range body {
		if _, ok := o.props(create)[k]; !ok {
			t.Errorf("the SDK sends %q, which the create's schema lacks", k)
		}
	}
	for k := range body["input"].(map[string]any) {
		if _, ok := o.props(o.resolve(o.props(create)["input"]))[k]; !ok {
			t.Errorf("the SDK sends input.%q, which the create's schema lacks", k)
		}
	}

	// Enums.
	o.sameEnum("statuses", o.resolve(o.props(query)["status"]),
		easel.StatusPending, easel.StatusProcessing, easel.StatusCompleted, easel.StatusFailed, easel.StatusCanceled)
	events := o.resolve(o.props(create)["callback_events"])
	o.sameEnum("webhook events", o.resolve(events["items"]), easel.EventCompleted, easel.EventFailed, easel.EventCanceled, easel.EventProgress)
	model := o.resolve(o.props(query)["model"])
	re, err := regexp.Compile(model["pattern"].(string))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{easel.ModelStandard, easel.ModelPro, easel.StandardModel("nova"), easel.ProModel("nova")} {
		if !re.MatchString(m) {
			t.Errorf("the SDK's model %s does not match the document's pattern %s", m, re)
		}
	}
}

// bodyRecorder keeps the last request body it sends on.
type bodyRecorder struct{ body []byte }

func (r *bodyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		r.body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(r.body))
	}
	return http.DefaultTransport.RoundTrip(req)
}

// openapi reads an OpenAPI document, following $refs.
type openapi struct {
	t   *testing.T
	doc map[string]any
}

func (o openapi) resolve(v any) map[string]any {
	o.t.Helper()
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			break
		}
		var cur any = o.doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[strings.NewReplacer("~1", "/", "~0", "~").Replace(part)]
		}
		m, _ = cur.(map[string]any)
	}
	if m == nil {
		o.t.Fatalf("not an object in the document: %v", v)
	}
	return m
}

func (o openapi) op(method, path string) map[string]any {
	o.t.Helper()
	paths := o.doc["paths"].(map[string]any)
	item, ok := paths[path].(map[string]any)
	if !ok || item[method] == nil {
		o.t.Fatalf("the document has no %s %s", method, path)
	}
	return item[method].(map[string]any)
}

// params maps an operation's parameters, by lowercase name.
func (o openapi) params(method, path string) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := o.op(method, path)["parameters"].([]any)
	for _, p := range list {
		pm := o.resolve(p)
		out[strings.ToLower(pm["name"].(string))] = pm
	}
	return out
}

// response is the JSON schema of an operation's 200.
func (o openapi) response(method, path string) map[string]any {
	o.t.Helper()
	r := o.resolve(o.op(method, path)["responses"].(map[string]any)["200"])
	return o.resolve(r["content"].(map[string]any)["application/json"].(map[string]any)["schema"])
}

func (o openapi) props(schema map[string]any) map[string]any {
	o.t.Helper()
	p, ok := schema["properties"].(map[string]any)
	if !ok {
		o.t.Fatalf("a schema without properties: %v", schema)
	}
	return p
}

// sameFields checks that a schema's properties are the JSON names of a
// struct's fields.
func (o openapi) sameFields(what string, schema map[string]any, typ reflect.Type) {
	o.t.Helper()
	var fields []string
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields = append(fields, name)
		}
	}
	var props []string
	for k := range o.props(schema) {
		props = append(props, k)
	}
	slices.Sort(fields)
	slices.Sort(props)
	if !slices.Equal(fields, props) {
		o.t.Errorf("%s: the SDK's %s has %v; the document %v", what, typ, fields, props)
	}
}

func (o openapi) sameEnum(what string, schema map[string]any, want ...any) {
	o.t.Helper()
	var got, exp []string
	enum, _ := schema["enum"].([]any)
	for _, v := range enum {
		got = append(got, v.(string))
	}
	for _, v := range want {
		exp = append(exp, reflect.ValueOf(v).String())
	}
	slices.Sort(got)
	slices.Sort(exp)
	if !slices.Equal(got, exp) {
		o.t.Errorf("%s: the SDK has %v; the document %v", what, exp, got)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
