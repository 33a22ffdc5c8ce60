package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
)

func (e *env) newTask(key string) string {
	e.T.Helper()
	r := e.Create(key, okBody)
	if r.Status != 200 {
		e.T.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var env struct {
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &env); err != nil {
		e.T.Fatal(err)
	}
	return env.Data.TaskID
}

func (e *env) auth(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"}
}

func TestCancelRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	start, _ := e.Accounts.Get(ctx, e.AcctA)
	pendingID := e.newTask(e.KeyA)
	charged, _ := e.Accounts.Get(ctx, e.AcctA)
	price := start.Credits - charged.Credits
	processingID := e.newTask(e.KeyA)
	if _, err := e.Store.Start(ctx, e.AcctA, processingID, processingID); err != nil {
		t.Fatal(err)
	}
	before, _ := e.Accounts.Get(ctx, e.AcctA)
	for _, tc := range []struct {
		name    string
		key     string
		hdr     map[string]string
		body    string
		status  int
		msgPart string
		data    string
	}{
		{name: "pending", key: e.KeyA, body: `{"task_id":"` + pendingID + `"}`, status: 200,
			data: `{"credits_refunded":` + strconv.FormatInt(price, 10) + `,"refunded":true,"status":"canceled","task_id":"` + pendingID + `"}`},
		{name: "again", key: e.KeyA, body: `{"task_id":"` + pendingID + `"}`, status: 409, msgPart: "already canceled"},
		{name: "processing", key: e.KeyA, body: `{"task_id":"` + processingID + `"}`, status: 200,
			data: `{"credits_refunded":0,"refunded":false,"status":"canceled","task_id":"` + processingID + `"}`},
		{name: "another account's", key: e.KeyB, body: `{"task_id":"` + processingID + `"}`, status: 404, msgPart: "not found"},
		{name: "unknown", key: e.KeyA, body: `{"task_id":"task_lumen_1"}`, status: 404, msgPart: "not found"},
		{name: "not a task id", key: e.KeyA, body: `{"task_id":"../x"}`, status: 404, msgPart: "not found"},
		{name: "no task_id", key: e.KeyA, body: `{}`, status: 400, msgPart: "task_id is required"},
		{name: "task_id a number", key: e.KeyA, body: `{"task_id":7}`, status: 400, msgPart: "JSON object"},
		{name: "not JSON", key: e.KeyA, body: `task_id=1`, status: 400, msgPart: "JSON object"},
		{name: "not application/json", key: e.KeyA, hdr: map[string]string{"Content-Type": "text/plain"}, body: `{}`, status: 415, msgPart: "application/json"},
		{name: "no key", body: `{}`, status: 401, msgPart: "Authorization"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Content-Type": "application/json"}
			if tc.key != "" {
				hdr["Authorization"] = "Bearer " + tc.key
			}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			r := e.Do("POST", "/v1/task/cancel", hdr, tc.body)
			if tc.status != 200 {
				assertEnvelope(t, r, tc.status, tc.msgPart)
				return
			}
			var got struct {
				Code int             `json:"code"`
				Msg  string          `json:"msg"`
				Data json.RawMessage `json:"data"`
			}
			if r.Status != 200 || json.Unmarshal(r.Body, &got) != nil || got.Code != 200 || got.Msg != "success" {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			var a, b any
			_ = json.Unmarshal(got.Data, &a)
			_ = json.Unmarshal([]byte(tc.data), &b)
			if ja, _ := json.Marshal(a); string(ja) != string(canonJSON(b)) {
				t.Fatalf("data %s, want %s", got.Data, tc.data)
			}
		})
	}
	after, _ := e.Accounts.Get(ctx, e.AcctA)
	if after.Credits != before.Credits+price {
		t.Errorf("balance %d, want %d: the pending task's price back, not the processing one's", after.Credits, before.Credits+price)
	}
	r := e.Query(e.KeyA, processingID)
	if st := r.JSON(t)["status"]; st != "canceled" {
		t.Errorf("query after cancel: status %v", st)
	}
}

func canonJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestListRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var ids []string
	for range 3 {
		ids = append(ids, e.newTask(e.KeyA))
		time.Sleep(2 * time.Millisecond) // distinct creation times: a stable order to check
	}
	e.newTask(e.KeyB)
	if r := e.Do("POST", "/v1/task/cancel", e.auth(e.KeyA), `{"task_id":"`+ids[1]+`"}`); r.Status != 200 {
		t.Fatal(r.Status, string(r.Body))
	}
	type page struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
			Status string `json:"status"`
		} `json:"tasks"`
		NextCursor *string `json:"next_cursor"`
	}
	get := func(key, q string) (reply, page) {
		r := e.Do("GET", "/v1/task/list?"+q, e.auth(key), "")
		var p page
		if r.Status == 200 {
			if err := json.Unmarshal(r.Body, &p); err != nil {
				t.Fatal(err)
			}
		}
		return r, p
	}
	ids2 := func(p page) string {
		var s []string
		for _, x := range p.Tasks {
			s = append(s, x.TaskID)
		}
		return strings.Join(s, ",")
	}
	r, p := get(e.KeyA, "limit=2")
	if r.Status != 200 || ids2(p) != ids[2]+","+ids[1] || p.NextCursor == nil {
		t.Fatalf("first page: %d %s", r.Status, r.Body)
	}
	_, p = get(e.KeyA, "limit=2&cursor="+url.QueryEscape(*p.NextCursor))
	if ids2(p) != ids[0] || p.NextCursor != nil {
		t.Fatalf("second page: %+v", p)
	}
	if _, p = get(e.KeyA, "status=canceled"); ids2(p) != ids[1] || p.Tasks[0].Status != "canceled" {
		t.Fatalf("canceled: %+v", p)
	}
	if _, p = get(e.KeyA, "model="+pro); len(p.Tasks) != 0 {
		t.Fatalf("pro: %+v", p)
	}
	if _, p = get(e.KeyB, ""); len(p.Tasks) != 1 {
		t.Fatalf("the other account lists %d tasks, want its 1", len(p.Tasks))
	}
	for _, tc := range []struct{ q, msg string }{
		{"status=done", "status must be one of"},
		{"model=gpt", "is not a model"},
		{"limit=0", "limit must be"},
		{"limit=101", "limit must be"},
		{"limit=x", "limit must be"},
		{"cursor=abc", "cursor"},
	} {
		r, _ := get(e.KeyA, tc.q)
		assertEnvelope(t, r, 400, tc.msg)
	}
}

// A pending task's queue position counts the tasks ahead of it that are
// still waiting: a create undone after it took its number (the queue was
// down) and a task canceled through the API leave the queue, as the
// store's scripts count them.
func TestQueuePositionCountsWhatLeft(t *testing.T) {
	t.Parallel()
	var queueDown atomic.Bool
	e := newEnv(t, queueFunc(func(context.Context, jobs.Ref, string) error {
		if queueDown.Load() {
			return errors.New("connection refused")
		}
		return nil
	}))
	position := func(id string) float64 {
		t.Helper()
		r := e.Query(e.KeyA, id)
		pos, ok := r.JSON(t)["queue_position"].(float64)
		if r.Status != 200 || !ok {
			t.Fatalf("query %s: %d %s", id, r.Status, r.Body)
		}
		return pos
	}
	first := e.newTask(e.KeyA)
	second := e.newTask(e.KeyA)
	if p := position(second); p != 2 {
		t.Fatalf("second task at %v; want 2", p)
	}
	queueDown.Store(true)
	assertEnvelope(t, e.Create(e.KeyA, okBody), 503, "queue is unavailable")
	queueDown.Store(false)
	third := e.newTask(e.KeyA)
	time.Sleep(300 * time.Millisecond) // past the service's cache of the queue's numbers
	if p := position(third); p != 3 {
		t.Fatalf("third task at %v after an undone create; want 3", p)
	}
	if r := e.Do("POST", "/v1/task/cancel", e.auth(e.KeyA), `{"task_id":"`+first+`"}`); r.Status != 200 {
		t.Fatal(r.Status, string(r.Body))
	}
	time.Sleep(300 * time.Millisecond)
	if p := position(third); p != 2 {
		t.Errorf("third task at %v after the first was canceled; want 2", p)
	}
}

// A create past the account's share of the workers stands: 200, charged,
// the task pending with no job queued; once a place frees (the first task
// canceled), its job is queued. Another account's create is queued at
// once meanwhile.
func TestCreatePastTheShareStands(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var queued []string
	q := queueFunc(func(_ context.Context, j jobs.Ref, run string) error {
		mu.Lock()
		defer mu.Unlock()
		queued = append(queued, run)
		return nil
	})
	jobsQueued := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(queued)
	}
	e := newEnvStore(t, q, zap.NewNop(), store.Options{Share: 1}, nil)
	ctx := context.Background()
	first := e.newTask(e.KeyA)
	before, _ := e.Accounts.Get(ctx, e.AcctA)
	parked := e.newTask(e.KeyA)
	after, _ := e.Accounts.Get(ctx, e.AcctA)
	if after.Credits >= before.Credits {
		t.Errorf("balance %d after the create past the share, %d before: want it charged", after.Credits, before.Credits)
	}
	r := e.Query(e.KeyA, parked)
	if r.Status != 200 || r.JSON(t)["status"] != "pending" {
		t.Errorf("query of the parked task: %d %s; want it pending", r.Status, r.Body)
	}
	other := e.newTask(e.KeyB)
	if got := jobsQueued(); !slices.Equal(got, []string{first, other}) {
		t.Errorf("jobs queued %v; want the first task's and the other account's", got)
	}
	if r := e.Do("POST", "/v1/task/cancel", e.auth(e.KeyA), `{"task_id":"`+first+`"}`); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	if got := jobsQueued(); !slices.Equal(got, []string{first, other, parked}) {
		t.Errorf("jobs queued %v; want the parked task's once the first was canceled", got)
	}
}
