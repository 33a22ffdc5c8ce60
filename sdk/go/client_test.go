package easel

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// reply is one scripted answer of a fake server; hangup drops the
// connection instead.
type reply struct {
	status int
	header map[string]string
	body   string
	hangup bool
}

// seen is one request a fake server received.
type seen struct {
	method, path, query string
	header              http.Header
	body                string
}

// scripted is a server answering with replies in turn (the last one
// again once they run out) and recording the requests.
type scripted struct {
	mu      sync.Mutex
	replies []reply
	reqs    []seen
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(b)})
	rp := s.replies[min(len(s.reqs), len(s.replies))-1]
	s.mu.Unlock()
	if rp.hangup {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rp.status)
	_, _ = io.WriteString(w, rp.body)
}

func (s *scripted) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// sleeps records the client's waits instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// newTestClient returns a client of h whose sleeps are recorded.
func newTestClient(t *testing.T, h http.Handler, opts ...Option) (*Client, *sleeps) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "esk_test", opts...)
	if err != nil {
		t.Fatal(err)
	}
	s := &sleeps{}
	c.sleep = s.sleep
	return c, s
}

const created = `{"code":200,"msg":"success","data":{"task_id":"task_lumen_1"}}`

func TestNew(t *testing.T) {
	tests := []struct {
		url, key string
		ok       bool
	}{
		{"http://127.0.0.1:8080", "esk_x", true},
		{"https://api.example.com/", "esk_x", true},
		{"127.0.0.1:8080", "esk_x", false},
		{"ftp://example.com", "esk_x", false},
		{"http://", "esk_x", false},
		{"http://127.0.0.1:8080", "", false},
	}
	for _, tt := range tests {
		c, err := New(tt.url, tt.key)
		if (err == nil) != tt.ok {
			t.Errorf("New(%q, %q): %v; want ok %v", tt.url, tt.key, err, tt.ok)
		}
		if err == nil && strings.HasSuffix(c.BaseURL(), "/") {
			t.Errorf("base %q keeps its slash", c.BaseURL())
		}
	}
}

func TestCreate(t *testing.T) {
	tests := []struct {
		name string
		req  CreateRequest
		body string
	}{
		{"minimal", CreateRequest{Model: ModelStandard, Prompt: "a cat"},
			`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"a cat"}}`},
		{"everything", CreateRequest{Model: ModelPro, Prompt: "p", AspectRatio: "16:9", ImageSize: "2K",
			ImageURLs: []string{"https://example.com/a.png"}, OutputFormat: FormatJPEG, OutputQuality: 75, NumImages: 3,
			CallbackURL: "https://example.com/hook", CallbackEvents: []string{EventCompleted, EventProgress}, IdempotencyKey: "order-17"},
			`{"model":"lumen-3-pro-image-preview","task_type":"image","input":{"prompt":"p","aspect_ratio":"16:9","image_size":"2K","image_urls":["https://example.com/a.png"],"output_format":"jpeg","output_quality":75,"num_images":3},"callback_url":"https://example.com/hook","callback_events":["task.completed","task.progress"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: []reply{{status: 200, body: created}}}
			c, _ := newTestClient(t, srv)
			id, err := c.Create(context.Background(), tt.req)
			if err != nil || id != "task_lumen_1" {
				t.Fatalf("Create: %q %v", id, err)
			}
			r := srv.requests()[0]
			if r.method != "POST" || r.path != "/v1/task/create" || r.body != tt.body {
				t.Errorf("request %s %s %s\nwant body %s", r.method, r.path, r.body, tt.body)
			}
			if r.header.Get("Authorization") != "Bearer esk_test" || r.header.Get("Content-Type") != "application/json" ||
				!strings.HasPrefix(r.header.Get("User-Agent"), "easel-go/") {
				t.Errorf("headers %v", r.header)
			}
			key := r.header.Get("Idempotency-Key")
			if tt.req.IdempotencyKey != "" && key != tt.req.IdempotencyKey || tt.req.IdempotencyKey == "" && !strings.HasPrefix(key, "easel-go-") {
				t.Errorf("Idempotency-Key %q", key)
			}
		})
	}
}

func TestCreateAndWait(t *testing.T) {
	const waited = `{"code":200,"msg":"success","data":{"task_id":"task_lumen_1","task":{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"completed","progress":100,"create_time":1,"complete_time":2,"results":["http://x/1.png"]}}}`
	const record = `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"processing","progress":40,"create_time":1,"complete_time":null,"results":[]}`
	tests := []struct {
		name       string
		wait       time.Duration
		replies    []reply
		prefer     string
		wantStatus Status
		requests   int
	}{
		{"the server waits", 30 * time.Second, []reply{{status: 200, body: waited}}, "wait=30", StatusCompleted, 1},
		{"past the longest", 10 * time.Minute, []reply{{status: 200, body: waited}}, "wait=60", StatusCompleted, 1},
		{"negative is no wait", -time.Second, []reply{{status: 200, body: waited}}, "wait=0", StatusCompleted, 1},
		{"a server that does not wait", 30 * time.Second, []reply{{status: 200, body: created}, {status: 200, body: record}}, "wait=30", StatusProcessing, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: tt.replies}
			c, _ := newTestClient(t, srv)
			task, err := c.CreateAndWait(context.Background(), CreateRequest{Model: ModelStandard, Prompt: "a cat"}, tt.wait)
			if err != nil || task == nil || task.ID != "task_lumen_1" || task.Status != tt.wantStatus {
				t.Fatalf("CreateAndWait: %+v %v", task, err)
			}
			reqs := srv.requests()
			if len(reqs) != tt.requests || reqs[0].header.Get("Prefer") != tt.prefer {
				t.Errorf("%d requests, Prefer %q; want %d, %q", len(reqs), reqs[0].header.Get("Prefer"), tt.requests, tt.prefer)
			}
		})
	}
	// A plain create asks for no wait.
	srv := &scripted{replies: []reply{{status: 200, body: created}}}
	c, _ := newTestClient(t, srv)
	if _, err := c.Create(context.Background(), CreateRequest{Model: ModelStandard, Prompt: "a cat"}); err != nil {
		t.Fatal(err)
	}
	if p := srv.requests()[0].header.Get("Prefer"); p != "" {
		t.Errorf("Create sent Prefer %q", p)
	}
}

func TestAPIErrors(t *testing.T) {
	tests := []struct {
		name   string
		reply  reply
		kind   error
		code   int
		msg    string
		reqID  string
		retryA time.Duration
	}{
		{"bad request", reply{status: 400, body: `{"code":400,"msg":"input.prompt must be a string","data":null}`, header: map[string]string{"X-Request-Id": "r1"}},
			ErrBadRequest, 400, "input.prompt must be a string", "r1", 0},
		{"unauthorized", reply{status: 401, body: `{"code":401,"msg":"invalid API key","data":null}`}, ErrUnauthorized, 401, "invalid API key", "", 0},
		{"credits", reply{status: 402, body: `{"code":402,"msg":"insufficient credits: this task costs 18 credits and the balance is 5","data":null}`},
			ErrInsufficientCredits, 402, "insufficient credits: this task costs 18 credits and the balance is 5", "", 0},
		{"forbidden", reply{status: 403, body: `{"code":403,"msg":"this account is disabled","data":null}`}, ErrForbidden, 403, "this account is disabled", "", 0},
		{"a proxy's page", reply{status: 502, body: "<html>bad gateway</html>"}, nil, 502, "<html>bad gateway</html>", "", 0},
		{"no body", reply{status: 404}, ErrNotFound, 404, "Not Found", "", 0},
		{"outcome unknown", reply{status: 504, body: `{"code":504,"msg":"task task_lumen_9 may have been created","data":{"task_id":"task_lumen_9","outcome":"unknown","settled_at":1}}`, header: map[string]string{"Retry-After": "4"}},
			ErrOutcomeUnknown, 504, "task task_lumen_9 may have been created", "", 4 * time.Second},
		{"rate limited, after retries", reply{status: 429, body: `{"code":429,"msg":"rate limit exceeded","data":null}`, header: map[string]string{"Retry-After": "3"}},
			ErrRateLimited, 429, "rate limit exceeded", "", 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestClient(t, &scripted{replies: []reply{tt.reply}})
			_, err := c.Get(context.Background(), "task_lumen_1")
			var e *APIError
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T); want an *APIError", err, err)
			}
			if e.StatusCode != tt.reply.status || e.Code != tt.code || e.Message != tt.msg || e.RequestID != tt.reqID || e.RetryAfter != tt.retryA {
				t.Errorf("error %+v", e)
			}
			if wantID := map[bool]string{true: "task_lumen_9"}[tt.code == 504]; e.TaskID != wantID {
				t.Errorf("TaskID %q; want %q", e.TaskID, wantID)
			}
			if tt.kind != nil && !errors.Is(err, tt.kind) {
				t.Errorf("errors.Is(%v, %v) false", err, tt.kind)
			}
			if errors.Is(err, ErrConflict) {
				t.Errorf("%v is ErrConflict", err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Error() %q lacks the message", err.Error())
			}
		})
	}
}

func TestRetries(t *testing.T) {
	busy := reply{status: 429, body: `{"code":429,"msg":"rate limit exceeded","data":null}`, header: map[string]string{"Retry-After": "2"}}
	down := reply{status: 503, body: `{"code":503,"msg":"the service is unavailable, try again","data":null}`, header: map[string]string{"Retry-After": "1"}}
	downNoHeader := reply{status: 503, body: `{"code":503,"msg":"unavailable","data":null}`}
	ok := reply{status: 200, body: created}
	unknown := reply{status: 504, body: `{"code":504,"msg":"outcome unknown","data":{"task_id":"task_lumen_9","outcome":"unknown","settled_at":1}}`, header: map[string]string{"Retry-After": "3"}}
	tests := []struct {
		name     string
		call     string // create, cancel, get
		replies  []reply
		requests int
		sleeps   []time.Duration // exact, or (when backoff) counted only
		backoffs int
		kind     error // nil: success
	}{
		{"429 then success waits Retry-After", "create", []reply{busy, ok}, 2, []time.Duration{2 * time.Second}, 0, nil},
		{"503 twice then success", "create", []reply{down, down, ok}, 3, []time.Duration{time.Second, time.Second}, 0, nil},
		{"503 without Retry-After backs off", "get", []reply{downNoHeader, downNoHeader, {status: 200, body: `{"task_id":"task_lumen_1","status":"pending"}`}}, 3, nil, 2, nil},
		{"503 every time gives up after 4 retries", "get", []reply{down}, 5, []time.Duration{time.Second, time.Second, time.Second, time.Second}, 0, ErrUnavailable},
		{"Retry-After past the longest wait is not waited", "get", []reply{{status: 429, header: map[string]string{"Retry-After": "120"}}}, 1, nil, 0, ErrRateLimited},
		{"400 is not retried", "create", []reply{{status: 400, body: `{"code":400,"msg":"bad","data":null}`}, ok}, 1, nil, 0, ErrBadRequest},
		{"a dropped create is repeated with its key", "create", []reply{{hangup: true}, ok}, 2, nil, 1, nil},
		{"a create still under way (409) is asked again", "create", []reply{{hangup: true}, {status: 409, body: `{"code":409,"msg":"in progress","data":null}`}, ok}, 3, nil, 2, nil},
		{"a create of unknown outcome (504) is asked again with its key after Retry-After", "create", []reply{unknown, ok}, 2, []time.Duration{3 * time.Second}, 0, nil},
		{"a 504 of unknown outcome every time gives up with the task id", "create", []reply{unknown}, 5, []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}, 0, ErrOutcomeUnknown},
		{"a read's 504 is not retried", "get", []reply{unknown, ok}, 1, nil, 0, ErrOutcomeUnknown},
		{"a first 409 of a create is final", "create", []reply{{status: 409, body: `{"code":409,"msg":"in progress","data":null}`}, ok}, 1, nil, 0, ErrConflict},
		{"a dropped cancel is not repeated", "cancel", []reply{{hangup: true}, ok}, 1, nil, 0, errors.New("any")},
		{"a dropped read is repeated", "get", []reply{{hangup: true}, {status: 200, body: `{"task_id":"task_lumen_1","status":"pending"}`}}, 2, nil, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: tt.replies}
			c, sl := newTestClient(t, srv)
			ctx := context.Background()
			var err error
			switch tt.call {
			case "create":
				_, err = c.Create(ctx, CreateRequest{Model: ModelStandard, Prompt: "x"})
			case "cancel":
				_, err = c.Cancel(ctx, "task_lumen_1")
			default:
				_, err = c.Get(ctx, "task_lumen_1")
			}
			switch {
			case tt.kind == nil && err != nil:
				t.Fatalf("error %v", err)
			case tt.kind != nil && err == nil:
				t.Fatalf("no error; want %v", tt.kind)
			case tt.kind != nil && errors.As(tt.kind, new(statusError)) && !errors.Is(err, tt.kind):
				t.Fatalf("error %v; want %v", err, tt.kind)
			}
			reqs := srv.requests()
			if len(reqs) != tt.requests {
				t.Fatalf("%d requests; want %d", len(reqs), tt.requests)
			}
			for _, r := range reqs[1:] {
				if r.body != reqs[0].body || r.header.Get("Idempotency-Key") != reqs[0].header.Get("Idempotency-Key") {
					t.Errorf("a retry differs: %q %q; first %q %q", r.body, r.header.Get("Idempotency-Key"), reqs[0].body, reqs[0].header.Get("Idempotency-Key"))
				}
			}
			got := sl.all()
			if tt.backoffs > 0 {
				if len(got) != tt.backoffs {
					t.Fatalf("sleeps %v; want %d backoffs", got, tt.backoffs)
				}
				for i, d := range got {
					if hi := 500 * time.Millisecond << i; d > hi || d < hi*3/4 {
						t.Errorf("backoff %d: %v; want %v less at most a quarter", i, d, hi)
					}
				}
				return
			}
			if len(got) != len(tt.sleeps) {
				t.Fatalf("sleeps %v; want %v", got, tt.sleeps)
			}
			for i := range got {
				if got[i] != tt.sleeps[i] {
					t.Errorf("sleeps %v; want %v", got, tt.sleeps)
				}
			}
		})
	}
}

func TestRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"5", 5 * time.Second}, {"-1", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.v, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v; want %v", tt.v, got, tt.want)
		}
	}
}

func TestRetryStopsWithTheContext(t *testing.T) {
	srv := &scripted{replies: []reply{{status: 503, header: map[string]string{"Retry-After": "10"}}}}
	c, _ := newTestClient(t, srv)
	c.sleep = sleepCtx // really wait, so the context can end it
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Get(ctx, "task_lumen_1")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("error %v; want the 503 and the deadline", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name  string
		reply reply
		want  CancelResult
		kind  error
	}{
		{"pending, refunded", reply{status: 200, body: `{"code":200,"msg":"success","data":{"task_id":"task_lumen_1","status":"canceled","refunded":true,"credits_refunded":18}}`},
			CancelResult{TaskID: "task_lumen_1", Status: StatusCanceled, Refunded: true, CreditsRefunded: 18}, nil},
		{"processing, not refunded", reply{status: 200, body: `{"code":200,"msg":"success","data":{"task_id":"task_lumen_1","status":"canceled","refunded":false,"credits_refunded":0}}`},
			CancelResult{TaskID: "task_lumen_1", Status: StatusCanceled}, nil},
		{"already final", reply{status: 409, body: `{"code":409,"msg":"task task_lumen_1 is already completed","data":null}`}, CancelResult{}, ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: []reply{tt.reply}}
			c, _ := newTestClient(t, srv)
			res, err := c.Cancel(context.Background(), "task_lumen_1")
			if tt.kind != nil {
				if !errors.Is(err, tt.kind) {
					t.Fatalf("error %v; want %v", err, tt.kind)
				}
			} else if err != nil || *res != tt.want {
				t.Fatalf("Cancel: %+v %v; want %+v", res, err, tt.want)
			}
			r := srv.requests()[0]
			if r.method != "POST" || r.path != "/v1/task/cancel" || r.body != `{"task_id":"task_lumen_1"}` || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("request %+v", r)
			}
		})
	}
}

// pages serves /v1/task/list from a list of tasks, limit at a time.
func pages(t *testing.T, ids []string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/task/list" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		start := 0
		if cur := q.Get("cursor"); cur != "" {
			for i, id := range ids {
				if "after-"+id == cur {
					start = i + 1
				}
			}
		}
		limit := 2
		if q.Get("limit") != "" {
			limit = len(q.Get("limit")) // "1" -> 1, "10" -> 2: enough for a test
		}
		end := min(start+limit, len(ids))
		p := TaskPage{Tasks: []Task{}}
		for _, id := range ids[start:end] {
			p.Tasks = append(p.Tasks, Task{ID: id, Status: Status(q.Get("status")), Model: q.Get("model"), Results: []string{}})
		}
		if end < len(ids) {
			p.NextCursor = "after-" + ids[end-1]
		}
		_ = json.NewEncoder(w).Encode(p)
	}
}

func TestList(t *testing.T) {
	ids := []string{"t5", "t4", "t3", "t2", "t1"}
	var queries []string
	var mu sync.Mutex
	h := pages(t, ids)
	c, _ := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		h(w, r)
	}))
	ctx := context.Background()
	p, err := c.List(ctx, ListOptions{Status: StatusCompleted, Model: ModelPro, Limit: 1})
	if err != nil || len(p.Tasks) != 1 || p.Tasks[0].ID != "t5" || p.NextCursor != "after-t5" || p.Tasks[0].Status != StatusCompleted || p.Tasks[0].Model != ModelPro {
		t.Fatalf("List: %+v %v", p, err)
	}
	if queries[0] != "limit=1&model=lumen-3-pro-image-preview&status=completed" {
		t.Errorf("query %q", queries[0])
	}

	tests := []struct {
		name  string
		stop  int // stop after this many; 0: all
		want  []string
		pages int
	}{
		{"every page", 0, ids, 3},
		{"stop early", 3, ids[:3], 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			queries = nil
			mu.Unlock()
			var got []string
			for task, err := range c.Tasks(ctx, ListOptions{}) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, task.ID)
				if len(got) == tt.stop {
					break
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") || len(queries) != tt.pages {
				t.Errorf("tasks %v in %d pages (%v); want %v in %d", got, len(queries), queries, tt.want, tt.pages)
			}
		})
	}

	t.Run("an error ends the iteration", func(t *testing.T) {
		c, _ := newTestClient(t, &scripted{replies: []reply{{status: 400, body: `{"code":400,"msg":"status must be one of ...","data":null}`}}})
		n := 0
		for task, err := range c.Tasks(ctx, ListOptions{Status: "done"}) {
			n++
			if task != nil || !errors.Is(err, ErrBadRequest) {
				t.Errorf("%v %v", task, err)
			}
		}
		if n != 1 {
			t.Errorf("%d yields; want 1", n)
		}
	})
}

func TestDownload(t *testing.T) {
	png := "\x89PNG\r\n\x1a\nimage bytes"
	tests := []struct {
		name  string
		reply reply
		url   string // relative to the server
		kind  error
	}{
		{"ok", reply{status: 200, body: png, header: map[string]string{"Content-Type": "image/png"}}, "/v1/files/2026/a.png?expires=1&sig=x", nil},
		{"expired", reply{status: 410, body: `{"code":410,"msg":"this URL has expired","data":null}`}, "/v1/files/2026/a.png?expires=1&sig=x", ErrGone},
		{"busy then ok", reply{status: 503, header: map[string]string{"Retry-After": "1"}}, "/v1/files/2026/a.png?expires=1&sig=x", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: []reply{tt.reply, {status: 200, body: png}}}
			c, _ := newTestClient(t, srv)
			var b strings.Builder
			for i, u := range []string{c.BaseURL() + tt.url, tt.url} { // absolute, and relative to the API
				b.Reset()
				n, err := c.Download(context.Background(), u, &b)
				if tt.kind != nil {
					if !errors.Is(err, tt.kind) {
						t.Fatalf("error %v; want %v", err, tt.kind)
					}
					return
				}
				if err != nil || n != int64(len(png)) || b.String() != png {
					t.Fatalf("download %d: %d %q %v", i, n, b.String(), err)
				}
			}
			for _, r := range srv.requests() {
				if r.header.Get("Authorization") != "" || r.path+"?"+r.query != tt.url {
					t.Errorf("request %s?%s with Authorization %q", r.path, r.query, r.header.Get("Authorization"))
				}
			}
		})
	}
	c, _ := newTestClient(t, http.NotFoundHandler())
	if _, err := c.Download(context.Background(), "file:///etc/passwd", io.Discard); err == nil {
		t.Error("a file: URL downloaded")
	}
}
