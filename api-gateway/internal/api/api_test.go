package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/api-gateway/internal/pricing"
	"github.com/easelhq/easel/api-gateway/internal/ratelimit"
	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/api-gateway/internal/tasks"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

const (
	std        = "lumen-2.5-flash-image"
	pro        = "lumen-3-pro-image-preview"
	adminToken = "admin-token-0123456789abcdef0123456789"
)

// env is a gateway handler on a private Redis, with two accounts.
type env struct {
	t        *testing.T
	srv      *httptest.Server
	rdb      *redis.Client
	db       *store.DB
	store    *store.Tasks
	accounts *store.Accounts
	hooks    *store.Hooks
	blobs    *blob.FS
	signer   *signedurl.Signer
	keyA     string
	acctA    string
	keyB     string
	acctB    string
	keyOff   string
	now      time.Time
}

type queueFunc func(ctx context.Context, j jobs.Ref, run string) error

func (f queueFunc) CancelRun(context.Context, string) error { return nil }

func (f queueFunc) QueueHook(context.Context, jobs.Outbox, jobs.DeliverWebhook) error { return nil }

func (f queueFunc) EnqueueGenerateImage(ctx context.Context, j jobs.Ref, run string) error {
	return f(ctx, j, run)
}

// EnqueueAdmitted queues the first run of each task admitted, through f,
// as jobs.Enqueuer.EnqueueAdmitted does: the job of a task admitted is its
// Ref, its run ending at the task's run deadline.
func (f queueFunc) EnqueueAdmitted(ctx context.Context, admitted []task.Admitted) error {
	for _, a := range admitted {
		j := jobs.Ref{AccountID: a.AccountID, TaskID: a.TaskID, Queue: a.Queue, Deadline: jobs.RunDeadline(a.Deadline)}
		if _, err := jobs.NewGenerateImageTask(j, jobs.RunID(a.TaskID, 0)); err != nil {
			return err
		}
		if err := f(ctx, j, jobs.RunID(a.TaskID, 0)); err != nil {
			return err
		}
	}
	return nil
}

func newEnv(t *testing.T, queue tasks.Queue) *env {
	t.Helper()
	return newEnvLogged(t, queue, zap.NewNop())
}

// newEnvLogged is newEnv with the handler logging to log.
func newEnvLogged(t *testing.T, queue tasks.Queue, log *zap.Logger) *env {
	t.Helper()
	return newEnvWith(t, queue, log, nil)
}

// newEnvWith is newEnvLogged with the handler's dependencies changed by
// edit before it is built.
func newEnvWith(t *testing.T, queue tasks.Queue, log *zap.Logger, edit func(*api.Deps)) *env {
	t.Helper()
	return newEnvStore(t, queue, log, store.Options{}, edit)
}

// newEnvStore is newEnvWith on a store with options o (its share).
func newEnvStore(t *testing.T, queue tasks.Queue, log *zap.Logger, o store.Options, edit func(*api.Deps)) *env {
	t.Helper()
	var wrapped func(*env, *api.Deps)
	if edit != nil {
		wrapped = func(_ *env, d *api.Deps) { edit(d) }
	}
	return newEnvFull(t, queue, log, o, wrapped)
}

// newEnvFull is newEnvStore with edit given the env too (its store).
func newEnvFull(t *testing.T, queue tasks.Queue, log *zap.Logger, o store.Options, edit func(*env, *api.Deps)) *env {
	t.Helper()
	r := redistest.Start(t)
	rdb := r.Client(t)
	db := store.NewDB(rdb, o)
	e := &env{t: t, rdb: rdb, db: db, store: store.NewTasks(db), accounts: store.NewAccounts(db), hooks: store.NewHooks(db), now: time.Now()}
	ctx := context.Background()
	mk := func(name string, disabled bool) (string, string) {
		a, err := e.accounts.Create(ctx, account.Spec{Name: name, Credits: 10_000})
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := e.accounts.CreateKey(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if disabled {
			if err := e.accounts.SetStatus(ctx, a.ID, account.Disabled); err != nil {
				t.Fatal(err)
			}
		}
		return a.ID, k
	}
	e.acctA, e.keyA = mk("a", false)
	e.acctB, e.keyB = mk("b", false)
	_, e.keyOff = mk("off", true)

	var err error
	if e.blobs, err = blob.OpenFS(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.blobs.Close() })
	cat, _ := catalog.New("lumen")
	if queue == nil {
		queue = jobs.NewEnqueuer(rdb)
	}
	e.srv = httptest.NewUnstartedServer(nil)
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	e.signer = signedurl.New([]byte("0123456789abcdef0123456789abcdef"), e.srv.URL)
	prices, _ := pricing.Parse(pricing.Default)
	deps := api.Deps{
		Log: log,
		Tasks: tasks.NewService(tasks.Deps{
			Store: e.store, Queues: store.NewQueues(db), Outbox: e.hooks, Queue: queue,
			IDs: taskid.New("lumen"), Prices: prices,
		}, tasks.Config{Deadline: 10 * time.Minute, MaxInflight: 100}),
		Auth:    auth.New(e.accounts, 100, 0),
		Limiter: ratelimit.New(rdb),
		Limits:  api.Limits{Create: 1000, Query: 1000},
		Admin:   &api.AdminDeps{Token: adminToken, Accounts: e.accounts, Secrets: e.hooks, Catalog: cat},
		Decoder: &createreq.Decoder{Catalog: cat},
		Signer:  e.signer,
		Blobs:   e.blobs,
		Ready:   func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		Now:     func() time.Time { return e.now },
	}
	if edit != nil {
		edit(e, &deps)
	}
	e.srv.Config.Handler = api.New(deps)
	return e
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

func (e *env) do(method, path string, hdr map[string]string, body string) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func (e *env) create(key, body string) reply {
	return e.do("POST", "/v1/task/create", map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"}, body)
}

func (e *env) query(key, id string) reply {
	return e.do("GET", "/v1/task/query?task_id="+url.QueryEscape(id), map[string]string{"Authorization": "Bearer " + key}, "")
}

// assertEnvelope checks the error envelope: {"code": status, "msg": ..., "data": null}.
func assertEnvelope(t *testing.T, r reply, status int, msgPart string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d; want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	m := r.json(t)
	if len(m) != 3 {
		t.Errorf("envelope has fields %v; want code, msg, data", m)
	}
	if code, _ := m["code"].(float64); int(code) != status {
		t.Errorf("code %v; want %d", m["code"], status)
	}
	if d, ok := m["data"]; !ok || d != nil {
		t.Errorf("data %v; want null", d)
	}
	msg, _ := m["msg"].(string)
	if !strings.Contains(msg, msgPart) {
		t.Errorf("msg %q; want it to contain %q", msg, msgPart)
	}
	for _, leak := range []string{"goroutine", ".go:", "redis:", "panic", "asynq"} {
		if strings.Contains(strings.ToLower(msg), leak) {
			t.Errorf("msg %q leaks internals (%q)", msg, leak)
		}
	}
}

const okBody = `{"model":"` + std + `","task_type":"image","input":{"prompt":"a cat"}}`

func TestCreateErrors(t *testing.T) {
	e := newEnv(t, nil)
	json := "application/json"
	tests := []struct {
		name    string
		hdr     map[string]string
		body    string
		status  int
		msgPart string
	}{
		{"no Authorization", map[string]string{"Content-Type": json}, okBody, 401, "missing Authorization header"},
		{"not Bearer", map[string]string{"Authorization": "Basic " + e.keyA, "Content-Type": json}, okBody, 401, "malformed Authorization header"},
		{"Bearer without key", map[string]string{"Authorization": "Bearer ", "Content-Type": json}, okBody, 401, "malformed Authorization header"},
		{"unknown key", map[string]string{"Authorization": "Bearer esk_0000000000000000000000000000000000000000", "Content-Type": json}, okBody, 401, "invalid API key"},
		{"disabled account", map[string]string{"Authorization": "Bearer " + e.keyOff, "Content-Type": json}, okBody, 403, "disabled"},
		{"auth comes before content checks", map[string]string{"Content-Type": "text/plain"}, "x", 401, "missing Authorization"},
		{"no content type", map[string]string{"Authorization": "Bearer " + e.keyA}, okBody, 415, "application/json"},
		{"form content type", map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": "application/x-www-form-urlencoded"}, "a=b", 415, "application/json"},
		{"body too large", map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": json}, `{"model":"` + strings.Repeat("x", 70_000) + `"}`, 413, "64 KiB"},
		{"malformed JSON", map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": json}, `{"model":`, 400, "not valid JSON"},
		{"wrong type", map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": json}, `{"model":"` + std + `","task_type":"image","input":{"prompt":1}}`, 400, "input.prompt must be a string"},
		{"image_size on standard", map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": json}, `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_size":"2K"}}`, 400, "input.image_size is not supported by model " + std},
		{"unknown model", map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": json}, `{"model":"dall-e-3","task_type":"image","input":{"prompt":"p"}}`, 400, "is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("POST", "/v1/task/create", tt.hdr, tt.body)
			assertEnvelope(t, r, tt.status, tt.msgPart)
			if tt.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// Nothing was written or queued by any of them.
	n, err := e.taskRecords(e.acctA)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d task records written by refused requests", n)
	}
}

// taskRecords counts the task records of an account, paging its listing:
// the create script writes a record and its index entry in one step, and
// an undo removes both in one step, so the listing sees every record.
func (e *env) taskRecords(accountID string) (int, error) {
	ctx := context.Background()
	n, cursor := 0, ""
	for {
		page, next, err := e.store.List(ctx, accountID, task.Filter{Limit: 100, Cursor: cursor})
		if err != nil {
			return n, err
		}
		n += len(page)
		if next == "" {
			return n, nil
		}
		cursor = next
	}
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	e := newEnv(t, nil)
	assertEnvelope(t, e.do("GET", "/v1/nothing", nil, ""), 404, "no such endpoint")
	assertEnvelope(t, e.do("GET", "/v1/task/create", nil, ""), 405, "method not allowed")
	assertEnvelope(t, e.do("DELETE", "/v1/task/query", nil, ""), 405, "method not allowed")
}

func TestCreateAndQuery(t *testing.T) {
	e := newEnv(t, nil)
	r := e.create(e.keyA, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"  a cat  ","aspect_ratio":"16:9","image_size":"4K"}}`)
	if r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &created); err != nil {
		t.Fatal(err)
	}
	if created.Code != 200 || created.Msg != "success" || !taskid.Valid(created.Data.TaskID) || !strings.HasPrefix(created.Data.TaskID, "task_lumen_") {
		t.Fatalf("create body %s", r.body)
	}
	id := created.Data.TaskID
	// One record, as taskRecords (which TestCreateErrors relies on) counts.
	if n, err := e.taskRecords(e.acctA); err != nil || n != 1 {
		t.Errorf("%d task records (%v); want 1", n, err)
	}

	// The job is on the pro queue, under the task id, naming the task of
	// the account; its input is kept with the task's record (checked last,
	// as its run would read it).
	info, err := asynq.NewInspectorFromRedisClient(e.rdb).GetTaskInfo(jobs.Queue(catalog.Pro), id)
	if err != nil {
		t.Fatalf("job not queued: %v", err)
	}
	job, err := jobs.ParseGenerateImage(asynq.NewTask(info.Type, info.Payload), info.ID, info.Queue, info.Deadline)
	if err != nil {
		t.Fatal(err)
	}
	if job.AccountID != e.acctA || job.TaskID != id || job.Queue != jobs.Queue(catalog.Pro) {
		t.Errorf("job %+v", job)
	}
	if info.Deadline.Before(time.Now().Add(9*time.Minute)) || info.Deadline.After(time.Now().Add(11*time.Minute)) {
		t.Errorf("deadline %v; want ~10 minutes from now", info.Deadline)
	}

	q := e.query(e.keyA, id)
	if q.status != 200 {
		t.Fatalf("query: %d %s", q.status, q.body)
	}
	want := map[string]any{"task_id": id, "task_type": "image", "model": pro, "status": "pending", "progress": 0.0, "complete_time": 0.0, "results": []any{}}
	got := q.json(t)
	for k, v := range want {
		gv, _ := json.Marshal(got[k])
		wv, _ := json.Marshal(v)
		if string(gv) != string(wv) {
			t.Errorf("%s = %s; want %s", k, gv, wv)
		}
	}
	if ct, _ := got["create_time"].(float64); int64(ct) < time.Now().Add(-time.Minute).UnixMilli() || int64(ct) > time.Now().UnixMilli() {
		t.Errorf("create_time %v is not Unix milliseconds of now", got["create_time"])
	}
	if _, ok := got["error"]; ok {
		t.Error("pending task has an error field")
	}

	// Another account cannot see it, and neither can a made-up id.
	assertEnvelope(t, e.query(e.keyB, id), 404, "not found")
	assertEnvelope(t, e.query(e.keyA, "task_lumen_1"), 404, "not found")
	assertEnvelope(t, e.query(e.keyA, "../../etc/passwd"), 404, "not found")
	assertEnvelope(t, e.do("GET", "/v1/task/query", map[string]string{"Authorization": "Bearer " + e.keyA}, ""), 400, "task_id is required")
	assertEnvelope(t, e.do("GET", "/v1/task/query?task_id="+id, nil, ""), 401, "missing Authorization")

	// The job's run reads the task's input, as created (defaults applied,
	// prompt trimmed), from its record when it starts the task.
	st, err := e.store.Start(context.Background(), job.AccountID, job.TaskID, info.ID)
	if err != nil || st.Outcome != task.Applied {
		t.Fatalf("Start = %+v, %v", st, err)
	}
	in, err := jobs.DecodeInput(st.Input)
	if err != nil || in.Prompt != "a cat" || in.AspectRatio != "16:9" || in.ImageSize != "4K" || in.Model.ID != pro || in.Model.Tier != catalog.Pro {
		t.Errorf("the task's input %+v, %v", in, err)
	}
	if rd := jobs.RunDeadline(st.Deadline); rd.Before(info.Deadline.Add(-time.Second)) || rd.After(info.Deadline.Add(time.Second)) {
		t.Errorf("the task's run deadline %v; want its job's %v", rd, info.Deadline)
	}
}

func TestQueryStates(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	newTask := func() string {
		r := e.create(e.keyA, okBody)
		if r.status != 200 {
			t.Fatalf("create: %s", r.body)
		}
		return r.json(t)["data"].(map[string]any)["task_id"].(string)
	}

	processing := newTask()
	if _, err := e.store.Start(ctx, e.acctA, processing, processing); err != nil {
		t.Fatal(err)
	}
	_, _ = e.store.Progress(ctx, e.acctA, processing, processing, 42)
	got := e.query(e.keyA, processing).json(t)
	if got["status"] != "processing" || got["progress"] != 42.0 || got["complete_time"] != 0.0 || len(got["results"].([]any)) != 0 {
		t.Errorf("processing: %v", got)
	}

	failed := newTask()
	if _, err := e.store.Fail(ctx, e.acctA, failed, failed, task.Failure{Code: "content_blocked", Message: "the prompt was blocked"}); err != nil {
		t.Fatal(err)
	}
	got = e.query(e.keyA, failed).json(t)
	errObj, _ := got["error"].(map[string]any)
	if got["status"] != "failed" || errObj["code"] != "content_blocked" || errObj["message"] != "the prompt was blocked" || got["complete_time"] == 0.0 || len(got["results"].([]any)) != 0 {
		t.Errorf("failed: %v", got)
	}

	done := newTask()
	if _, err := e.store.Start(ctx, e.acctA, done, done); err != nil {
		t.Fatal(err)
	}
	res := []task.Result{{Key: "2026112214/0123456789abcdef0123456789abcdef.png", ContentType: "image/png", Size: 3, Width: 1, Height: 1}}
	ch, err := e.store.Complete(ctx, e.acctA, done, done, res)
	if err != nil {
		t.Fatal(err)
	}
	at := ch.At
	got = e.query(e.keyA, done).json(t)
	results, _ := got["results"].([]any)
	if got["status"] != "completed" || got["progress"] != 100.0 || int64(got["complete_time"].(float64)) != at.UnixMilli() || len(results) != 1 {
		t.Fatalf("completed: %v", got)
	}
	u, err := url.Parse(results[0].(string))
	if err != nil || u.Scheme != "http" || u.Host != strings.TrimPrefix(e.srv.URL, "http://") || u.Path != "/v1/files/"+res[0].Key {
		t.Errorf("result URL %v", results[0])
	}
	if exp := u.Query().Get("expires"); exp != itoa(at.Add(24*time.Hour).Unix()) {
		t.Errorf("expires %s; want complete_time + 24h = %d", exp, at.Add(24*time.Hour).Unix())
	}
	if strings.Contains(string(e.query(e.keyA, done).body), `\u0026`) {
		t.Error("result URL is HTML-escaped in JSON")
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestEnqueueFailureLeavesNoOrphan(t *testing.T) {
	e := newEnv(t, queueFunc(func(context.Context, jobs.Ref, string) error {
		return errors.New("redis: connection refused to 10.0.0.7:6379")
	}))
	r := e.create(e.keyA, okBody)
	assertEnvelope(t, r, 503, "queue is unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// The price was debited and refunded.
	if a, _ := e.accounts.Get(context.Background(), e.acctA); a.Credits != 10_000 {
		t.Errorf("balance %d after an enqueue failure; want 10000", a.Credits)
	}
	entries, _ := e.accounts.Ledger(context.Background(), e.acctA, 10)
	if len(entries) != 3 || entries[0].Kind != account.Refund || entries[1].Kind != account.Debit || entries[0].TaskID != entries[1].TaskID || entries[0].Note != "enqueue_failed" {
		t.Fatalf("ledger %+v; want a debit then a refund of one task", entries)
	}
	// No orphan: the record of the task that was charged is gone, and it
	// does not count as in flight.
	if _, err := e.store.Get(context.Background(), e.acctA, entries[0].TaskID); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("orphan task record left: %v", err)
	}
	if n, _ := e.store.Inflight(context.Background(), e.acctA); n != 0 {
		t.Errorf("%d tasks in flight after an enqueue failure", n)
	}
}

func TestDownload(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	data := []byte("\x89PNG\r\n\x1a\n0123456789abcdefghijklmnopqrstuvwxyz")
	key := "2026112214/0123456789abcdef0123456789abcdef.png"
	if _, err := e.blobs.Put(ctx, key, strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
	exp := e.now.Add(time.Hour)
	signed, _ := url.Parse(e.signer.Sign("/v1/files/"+key, exp))
	path := signed.RequestURI()

	r := e.do("GET", path, nil, "")
	if r.status != 200 || string(r.body) != string(data) {
		t.Fatalf("GET: %d %q", r.status, r.body)
	}
	if r.header.Get("Content-Type") != "image/png" || r.header.Get("Content-Length") != itoa(int64(len(data))) || r.header.Get("ETag") != `"0123456789abcdef0123456789abcdef"` || r.header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("headers %v", r.header)
	}

	r = e.do("GET", path, map[string]string{"Range": "bytes=8-17"}, "")
	if r.status != 206 || string(r.body) != "0123456789" || r.header.Get("Content-Range") != "bytes 8-17/"+itoa(int64(len(data))) {
		t.Errorf("Range: %d %q %v", r.status, r.body, r.header)
	}
	r = e.do("GET", path, map[string]string{"If-None-Match": `"0123456789abcdef0123456789abcdef"`}, "")
	if r.status != 304 || len(r.body) != 0 {
		t.Errorf("If-None-Match: %d", r.status)
	}
	r = e.do("HEAD", path, nil, "")
	if r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != itoa(int64(len(data))) {
		t.Errorf("HEAD: %d %v", r.status, r.header)
	}
	assertEnvelope(t, e.do("GET", path, map[string]string{"Range": "bytes=9999-"}, ""), 416, "range")

	tampered := strings.Replace(path, "0123456789abcdef0123", "0123456789abcdef0124", 1)
	assertEnvelope(t, e.do("GET", tampered, nil, ""), 403, "signature")
	assertEnvelope(t, e.do("GET", "/v1/files/"+key, nil, ""), 403, "signature")
	longer := strings.Replace(path, "expires="+itoa(exp.Unix()), "expires="+itoa(exp.Add(time.Hour).Unix()), 1)
	assertEnvelope(t, e.do("GET", longer, nil, ""), 403, "signature")

	e.now = exp.Add(time.Second)
	assertEnvelope(t, e.do("GET", path, nil, ""), 410, "expired")

	// A genuine URL whose blob the janitor removed.
	e.now = time.Now()
	if err := os.Remove(filepath.Join(e.blobs.Dir(), key)); err != nil {
		t.Fatal(err)
	}
	assertEnvelope(t, e.do("GET", path, nil, ""), 404, "not found")
}

func TestHealth(t *testing.T) {
	e := newEnv(t, nil)
	if r := e.do("GET", "/healthz", nil, ""); r.status != 200 {
		t.Errorf("healthz %d", r.status)
	}
	if r := e.do("GET", "/readyz", nil, ""); r.status != 200 {
		t.Errorf("readyz %d", r.status)
	}
	_ = e.rdb.Close()
	assertEnvelope(t, e.do("GET", "/readyz", nil, ""), 503, "Redis is unreachable")
	if r := e.do("GET", "/healthz", nil, ""); r.status != 200 {
		t.Errorf("healthz with Redis down: %d; liveness must not depend on Redis", r.status)
	}
}

func TestRequestID(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("GET", "/healthz", nil, "")
	if len(r.header.Get("X-Request-Id")) < 16 {
		t.Errorf("no request id: %v", r.header)
	}
	r = e.do("GET", "/healthz", map[string]string{"X-Request-Id": "client-chosen-42"}, "")
	if r.header.Get("X-Request-Id") != "client-chosen-42" {
		t.Errorf("request id not echoed: %v", r.header)
	}
}
