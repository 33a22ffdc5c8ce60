package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/gatewaytest"
	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/api-gateway/internal/tasks"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

const (
	std = gatewaytest.Standard
	pro = gatewaytest.Pro
)

// env is a gateway handler on a private Redis, with two accounts
// (gatewaytest.Env).
type env struct{ *gatewaytest.Env }

type reply = gatewaytest.Reply

type queueFunc = gatewaytest.QueueFunc

// deps are what the gateway's handler is built from.
type deps = gatewaytest.Deps

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
func newEnvWith(t *testing.T, queue tasks.Queue, log *zap.Logger, edit func(*deps)) *env {
	t.Helper()
	return newEnvStore(t, queue, log, store.Options{}, edit)
}

// newEnvStore is newEnvWith on a store with options o (its share).
func newEnvStore(t *testing.T, queue tasks.Queue, log *zap.Logger, o store.Options, edit func(*deps)) *env {
	t.Helper()
	var wrapped func(*gatewaytest.Env, *deps)
	if edit != nil {
		wrapped = func(_ *gatewaytest.Env, d *deps) { edit(d) }
	}
	return &env{gatewaytest.New(t, redistest.Start(t).Client(t), queue, log, o, wrapped)}
}

// assertEnvelope checks the error envelope.
var assertEnvelope = gatewaytest.AssertEnvelope

const okBody = gatewaytest.CreateBody

func TestCreateErrors(t *testing.T) {
	t.Parallel()
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
		{"not Bearer", map[string]string{"Authorization": "Basic " + e.KeyA, "Content-Type": json}, okBody, 401, "malformed Authorization header"},
		{"Bearer without key", map[string]string{"Authorization": "Bearer ", "Content-Type": json}, okBody, 401, "malformed Authorization header"},
		{"unknown key", map[string]string{"Authorization": "Bearer esk_0000000000000000000000000000000000000000", "Content-Type": json}, okBody, 401, "invalid API key"},
		{"disabled account", map[string]string{"Authorization": "Bearer " + e.KeyOff, "Content-Type": json}, okBody, 403, "disabled"},
		{"auth comes before content checks", map[string]string{"Content-Type": "text/plain"}, "x", 401, "missing Authorization"},
		{"no content type", map[string]string{"Authorization": "Bearer " + e.KeyA}, okBody, 415, "application/json"},
		{"form content type", map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": "application/x-www-form-urlencoded"}, "a=b", 415, "application/json"},
		{"body too large", map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": json}, `{"model":"` + strings.Repeat("x", 70_000) + `"}`, 413, "64 KiB"},
		{"malformed JSON", map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": json}, `{"model":`, 400, "not valid JSON"},
		{"wrong type", map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": json}, `{"model":"` + std + `","task_type":"image","input":{"prompt":1}}`, 400, "input.prompt must be a string"},
		{"image_size on standard", map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": json}, `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_size":"2K"}}`, 400, "input.image_size is not supported by model " + std},
		{"unknown model", map[string]string{"Authorization": "Bearer " + e.KeyA, "Content-Type": json}, `{"model":"dall-e-3","task_type":"image","input":{"prompt":"p"}}`, 400, "is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.Do("POST", "/v1/task/create", tt.hdr, tt.body)
			assertEnvelope(t, r, tt.status, tt.msgPart)
			if tt.status == 401 && r.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// Nothing was written or queued by any of them.
	n, err := e.taskRecords(e.AcctA)
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
		page, next, err := e.Store.List(ctx, accountID, task.Filter{Limit: 100, Cursor: cursor})
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
	t.Parallel()
	e := newEnv(t, nil)
	assertEnvelope(t, e.Do("GET", "/v1/nothing", nil, ""), 404, "no such endpoint")
	assertEnvelope(t, e.Do("GET", "/v1/task/create", nil, ""), 405, "method not allowed")
	assertEnvelope(t, e.Do("DELETE", "/v1/task/query", nil, ""), 405, "method not allowed")
}

func TestCreateAndQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.Create(e.KeyA, `{"model":"`+pro+`","task_type":"image","input":{"prompt":"  a cat  ","aspect_ratio":"16:9","image_size":"4K"}}`)
	if r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var created struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &created); err != nil {
		t.Fatal(err)
	}
	if created.Code != 200 || created.Msg != "success" || !taskid.Valid(created.Data.TaskID) || !strings.HasPrefix(created.Data.TaskID, "task_lumen_") {
		t.Fatalf("create body %s", r.Body)
	}
	id := created.Data.TaskID
	// One record, as taskRecords (which TestCreateErrors relies on) counts.
	if n, err := e.taskRecords(e.AcctA); err != nil || n != 1 {
		t.Errorf("%d task records (%v); want 1", n, err)
	}

	// The job is on the pro queue, under the task id, naming the task of
	// the account; its input is kept with the task's record (checked last,
	// as its run would read it).
	info, err := asynq.NewInspectorFromRedisClient(e.RDB).GetTaskInfo(jobs.Queue(catalog.Pro), id)
	if err != nil {
		t.Fatalf("job not queued: %v", err)
	}
	job, err := jobs.ParseGenerateImage(asynq.NewTask(info.Type, info.Payload), info.ID, info.Queue, info.Deadline)
	if err != nil {
		t.Fatal(err)
	}
	if job.AccountID != e.AcctA || job.TaskID != id || job.Queue != jobs.Queue(catalog.Pro) {
		t.Errorf("job %+v", job)
	}
	if info.Deadline.Before(time.Now().Add(9*time.Minute)) || info.Deadline.After(time.Now().Add(11*time.Minute)) {
		t.Errorf("deadline %v; want ~10 minutes from now", info.Deadline)
	}

	q := e.Query(e.KeyA, id)
	if q.Status != 200 {
		t.Fatalf("query: %d %s", q.Status, q.Body)
	}
	want := map[string]any{"task_id": id, "task_type": "image", "model": pro, "status": "pending", "progress": 0.0, "complete_time": 0.0, "results": []any{}}
	got := q.JSON(t)
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
	assertEnvelope(t, e.Query(e.KeyB, id), 404, "not found")
	assertEnvelope(t, e.Query(e.KeyA, "task_lumen_1"), 404, "not found")
	assertEnvelope(t, e.Query(e.KeyA, "../../etc/passwd"), 404, "not found")
	assertEnvelope(t, e.Do("GET", "/v1/task/query", map[string]string{"Authorization": "Bearer " + e.KeyA}, ""), 400, "task_id is required")
	assertEnvelope(t, e.Do("GET", "/v1/task/query?task_id="+id, nil, ""), 401, "missing Authorization")

	// The job's run reads the task's input, as created (defaults applied,
	// prompt trimmed), from its record when it starts the task, and the
	// model once, the record's (the input kept names none), of its
	// queue's tier.
	st, err := e.Store.Start(context.Background(), job.AccountID, job.TaskID, info.ID)
	if err != nil || st.Outcome != task.Applied {
		t.Fatalf("Start = %+v, %v", st, err)
	}
	if st.Model != pro || bytes.Contains(st.Input, []byte(pro)) {
		t.Errorf("the run starts with the model %q and the input %q; want %s once, from the record", st.Model, st.Input, pro)
	}
	in, err := jobs.DecodeInput(st.Input, catalog.Model{ID: st.Model, Tier: jobs.QueueTier(info.Queue)})
	if err != nil || in.Prompt != "a cat" || in.AspectRatio != "16:9" || in.ImageSize != "4K" || in.Model.ID != pro || in.Model.Tier != catalog.Pro {
		t.Errorf("the task's input %+v, %v", in, err)
	}
	if rd := jobs.RunDeadline(st.Deadline); rd.Before(info.Deadline.Add(-time.Second)) || rd.After(info.Deadline.Add(time.Second)) {
		t.Errorf("the task's run deadline %v; want its job's %v", rd, info.Deadline)
	}
}

func TestQueryStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	newTask := func() string {
		r := e.Create(e.KeyA, okBody)
		if r.Status != 200 {
			t.Fatalf("create: %s", r.Body)
		}
		return r.JSON(t)["data"].(map[string]any)["task_id"].(string)
	}

	processing := newTask()
	if _, err := e.Store.Start(ctx, e.AcctA, processing, processing); err != nil {
		t.Fatal(err)
	}
	_, _ = e.Store.Progress(ctx, e.AcctA, processing, processing, 42)
	got := e.Query(e.KeyA, processing).JSON(t)
	if got["status"] != "processing" || got["progress"] != 42.0 || got["complete_time"] != 0.0 || len(got["results"].([]any)) != 0 {
		t.Errorf("processing: %v", got)
	}

	failed := newTask()
	if _, err := e.Store.Fail(ctx, e.AcctA, failed, failed, task.Failure{Code: "content_blocked", Message: "the prompt was blocked"}); err != nil {
		t.Fatal(err)
	}
	got = e.Query(e.KeyA, failed).JSON(t)
	errObj, _ := got["error"].(map[string]any)
	if got["status"] != "failed" || errObj["code"] != "content_blocked" || errObj["message"] != "the prompt was blocked" || got["complete_time"] == 0.0 || len(got["results"].([]any)) != 0 {
		t.Errorf("failed: %v", got)
	}

	done := newTask()
	if _, err := e.Store.Start(ctx, e.AcctA, done, done); err != nil {
		t.Fatal(err)
	}
	res := []task.Result{{Key: "2026112214/0123456789abcdef0123456789abcdef.png", ContentType: "image/png", Size: 3, Width: 1, Height: 1}}
	ch, err := e.Store.Complete(ctx, e.AcctA, done, done, res)
	if err != nil {
		t.Fatal(err)
	}
	at := ch.At
	got = e.Query(e.KeyA, done).JSON(t)
	results, _ := got["results"].([]any)
	if got["status"] != "completed" || got["progress"] != 100.0 || int64(got["complete_time"].(float64)) != at.UnixMilli() || len(results) != 1 {
		t.Fatalf("completed: %v", got)
	}
	u, err := url.Parse(results[0].(string))
	if err != nil || u.Scheme != "http" || u.Host != strings.TrimPrefix(e.Srv.URL, "http://") || u.Path != "/v1/files/"+res[0].Key {
		t.Errorf("result URL %v", results[0])
	}
	if exp := u.Query().Get("expires"); exp != itoa(at.Add(24*time.Hour).Unix()) {
		t.Errorf("expires %s; want complete_time + 24h = %d", exp, at.Add(24*time.Hour).Unix())
	}
	if strings.Contains(string(e.Query(e.KeyA, done).Body), `\u0026`) {
		t.Error("result URL is HTML-escaped in JSON")
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestEnqueueFailureLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, queueFunc(func(context.Context, jobs.Ref, string) error {
		return errors.New("redis: connection refused to 10.0.0.7:6379")
	}))
	r := e.Create(e.KeyA, okBody)
	assertEnvelope(t, r, 503, "queue is unavailable")
	if r.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// The price was debited and refunded.
	if a, _ := e.Accounts.Get(context.Background(), e.AcctA); a.Credits != 10_000 {
		t.Errorf("balance %d after an enqueue failure; want 10000", a.Credits)
	}
	entries, _ := e.Accounts.Ledger(context.Background(), e.AcctA, 10)
	if len(entries) != 3 || entries[0].Kind != account.Refund || entries[1].Kind != account.Debit || entries[0].TaskID != entries[1].TaskID || entries[0].Note != "enqueue_failed" {
		t.Fatalf("ledger %+v; want a debit then a refund of one task", entries)
	}
	// No orphan: the record of the task that was charged is gone, and it
	// does not count as in flight.
	if _, err := e.Store.Get(context.Background(), e.AcctA, entries[0].TaskID); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("orphan task record left: %v", err)
	}
	if n, _ := e.Store.Inflight(context.Background(), e.AcctA); n != 0 {
		t.Errorf("%d tasks in flight after an enqueue failure", n)
	}
}

func TestDownload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	data := []byte("\x89PNG\r\n\x1a\n0123456789abcdefghijklmnopqrstuvwxyz")
	key := "2026112214/0123456789abcdef0123456789abcdef.png"
	if _, err := e.Blobs.Put(ctx, key, strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
	exp := e.Now.Add(time.Hour)
	signed, _ := url.Parse(e.Signer.Sign("/v1/files/"+key, exp))
	path := signed.RequestURI()

	r := e.Do("GET", path, nil, "")
	if r.Status != 200 || string(r.Body) != string(data) {
		t.Fatalf("GET: %d %q", r.Status, r.Body)
	}
	if r.Header.Get("Content-Type") != "image/png" || r.Header.Get("Content-Length") != itoa(int64(len(data))) || r.Header.Get("ETag") != `"0123456789abcdef0123456789abcdef"` || r.Header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("headers %v", r.Header)
	}

	r = e.Do("GET", path, map[string]string{"Range": "bytes=8-17"}, "")
	if r.Status != 206 || string(r.Body) != "0123456789" || r.Header.Get("Content-Range") != "bytes 8-17/"+itoa(int64(len(data))) {
		t.Errorf("Range: %d %q %v", r.Status, r.Body, r.Header)
	}
	r = e.Do("GET", path, map[string]string{"If-None-Match": `"0123456789abcdef0123456789abcdef"`}, "")
	if r.Status != 304 || len(r.Body) != 0 {
		t.Errorf("If-None-Match: %d", r.Status)
	}
	r = e.Do("HEAD", path, nil, "")
	if r.Status != 200 || len(r.Body) != 0 || r.Header.Get("Content-Length") != itoa(int64(len(data))) {
		t.Errorf("HEAD: %d %v", r.Status, r.Header)
	}
	assertEnvelope(t, e.Do("GET", path, map[string]string{"Range": "bytes=9999-"}, ""), 416, "range")

	tampered := strings.Replace(path, "0123456789abcdef0123", "0123456789abcdef0124", 1)
	assertEnvelope(t, e.Do("GET", tampered, nil, ""), 403, "signature")
	assertEnvelope(t, e.Do("GET", "/v1/files/"+key, nil, ""), 403, "signature")
	longer := strings.Replace(path, "expires="+itoa(exp.Unix()), "expires="+itoa(exp.Add(time.Hour).Unix()), 1)
	assertEnvelope(t, e.Do("GET", longer, nil, ""), 403, "signature")

	e.Now = exp.Add(time.Second)
	assertEnvelope(t, e.Do("GET", path, nil, ""), 410, "expired")

	// A genuine URL whose blob the janitor removed.
	e.Now = time.Now()
	if err := os.Remove(filepath.Join(e.Blobs.Dir(), key)); err != nil {
		t.Fatal(err)
	}
	assertEnvelope(t, e.Do("GET", path, nil, ""), 404, "not found")
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if r := e.Do("GET", "/healthz", nil, ""); r.Status != 200 {
		t.Errorf("healthz %d", r.Status)
	}
	if r := e.Do("GET", "/readyz", nil, ""); r.Status != 200 {
		t.Errorf("readyz %d", r.Status)
	}
	_ = e.RDB.Close()
	assertEnvelope(t, e.Do("GET", "/readyz", nil, ""), 503, "Redis is unreachable")
	if r := e.Do("GET", "/healthz", nil, ""); r.Status != 200 {
		t.Errorf("healthz with Redis down: %d; liveness must not depend on Redis", r.Status)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.Do("GET", "/healthz", nil, "")
	if len(r.Header.Get("X-Request-Id")) < 16 {
		t.Errorf("no request id: %v", r.Header)
	}
	r = e.Do("GET", "/healthz", map[string]string{"X-Request-Id": "client-chosen-42"}, "")
	if r.Header.Get("X-Request-Id") != "client-chosen-42" {
		t.Errorf("request id not echoed: %v", r.Header)
	}
}
