package easel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// progression serves GET /v1/task/query from a sequence of records, one
// per request (the last one again once they run out). With rejectWait it
// answers a wait parameter 400, as a server older than long-polls would.
type progression struct {
	mu         sync.Mutex
	records    []string
	rejectWait bool
	// hold delays an answer that repeats the one before, as a server
	// holding a long-poll until its wait is up.
	hold   time.Duration
	waits  []string // the wait parameter of each request ("" when absent)
	served int
}

func (p *progression) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := r.URL.Query()
	p.waits = append(p.waits, q.Get("wait"))
	if r.URL.Path != "/v1/task/query" || q.Get("task_id") != "task_lumen_1" {
		w.WriteHeader(404)
		fmt.Fprint(w, `{"code":404,"msg":"task not found","data":null}`)
		return
	}
	if p.rejectWait && q.Has("wait") {
		w.WriteHeader(400)
		fmt.Fprint(w, `{"code":400,"msg":"unknown parameter wait","data":null}`)
		return
	}
	i := min(p.served, len(p.records)-1)
	p.served++
	if i > 0 && p.records[i] == p.records[i-1] && q.Has("wait") {
		time.Sleep(p.hold)
	}
	fmt.Fprint(w, p.records[i])
}

func (p *progression) seenWaits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.waits...)
}

func rec(status string, progress int, extra string) string {
	return fmt.Sprintf(`{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":%q,"progress":%d,"create_time":1,"complete_time":0,"results":[]%s}`, status, progress, extra)
}

var lifecycle = []string{
	rec("pending", 0, `,"queue_position":2,"eta_ms":4000`),
	rec("pending", 0, `,"queue_position":1,"eta_ms":1000`),
	rec("processing", 10, ""),
	rec("processing", 10, ""), // nothing changed
	rec("processing", 60, ""),
	`{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"completed","progress":100,"create_time":1,"start_time":1,"complete_time":2,"results":["http://x/v1/files/a.png"],"price":8,"input":{"prompt":"x","aspect_ratio":"1:1","output_format":"jpeg","output_quality":90,"num_images":2}}`,
}

// updates describes what OnUpdate saw.
func updates(ts []Task) string {
	var s []string
	for _, t := range ts {
		e := fmt.Sprintf("%s/%d", t.Status, t.Progress)
		if t.QueuePosition != nil {
			e += fmt.Sprintf("#%d", *t.QueuePosition)
		}
		s = append(s, e)
	}
	return strings.Join(s, " ")
}

func TestWait(t *testing.T) {
	const wantUpdates = "pending/0#2 pending/0#1 processing/10 processing/60 completed/100"
	tests := []struct {
		name       string
		records    []string
		rejectWait bool
		hold       time.Duration
		opts       []WaitOption
		waits      string // the wait parameters sent, comma-separated
		updates    string
		status     Status
		// longest is the longest pause between requests; polls counts
		// the pauses of polling (longer than minGap).
		longest time.Duration
		polls   int
	}{
		// The server holds an unchanged record for most of the wait: the
		// next long-poll follows at once.
		{"long-poll", lifecycle, false, 600 * time.Millisecond, []WaitOption{WithLongPoll(time.Second)}, ",1,1,1,1,1", wantUpdates, StatusCompleted, minGap, 0},
		// An unchanged record answered at once: a pause, as polling.
		{"long-poll answered early", lifecycle, false, 0, nil, ",5,5,30,30,30", wantUpdates, StatusCompleted, 500 * time.Millisecond, 1},
		{"long-poll of 5 s", lifecycle[4:], false, 0, []WaitOption{WithLongPoll(5 * time.Second)}, ",5", "processing/60 completed/100", StatusCompleted, 0, 0},
		{"an older server: 400 to wait, then polls", lifecycle, true, 0, nil, ",5,,,,,", wantUpdates, StatusCompleted, 750 * time.Millisecond, 4},
		{"polling asked for", lifecycle, false, 0, []WaitOption{WithLongPoll(0), WithPollInterval(time.Second, 2*time.Second)}, ",,,,,", wantUpdates, StatusCompleted, 1500 * time.Millisecond, 5},
		{"already final", lifecycle[5:], false, 0, nil, "", "completed/100", StatusCompleted, 0, 0},
		{"failed", []string{rec("processing", 40, ""), rec("failed", 40, `,"error":{"code":"content_blocked","message":"PROHIBITED_CONTENT"}`)}, false, 0, nil, ",30", "processing/40 failed/40", StatusFailed, 0, 0},
		{"canceled", []string{rec("pending", 0, `,"queue_position":3`), rec("canceled", 0, "")}, false, 0, nil, ",5", "pending/0#3 canceled/0", StatusCanceled, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &progression{records: tt.records, rejectWait: tt.rejectWait, hold: tt.hold}
			c, sl := newTestClient(t, p)
			var seen []Task
			got, err := c.Wait(context.Background(), "task_lumen_1", append(tt.opts, OnUpdate(func(t *Task) { seen = append(seen, *t) }))...)
			if err != nil || got.Status != tt.status {
				t.Fatalf("Wait: %+v %v", got, err)
			}
			if u := updates(seen); u != tt.updates {
				t.Errorf("updates %q; want %q", u, tt.updates)
			}
			if w := strings.Join(p.seenWaits(), ","); w != tt.waits {
				t.Errorf("wait parameters %q; want %q", w, tt.waits)
			}
			var longest time.Duration // 0 if there was no pause
			polls := 0
			for _, d := range sl.all() {
				longest = max(longest, d)
				if d > minGap {
					polls++
				}
			}
			// A pause shortens by the time the request took.
			if longest > tt.longest || longest < tt.longest-50*time.Millisecond || polls != tt.polls {
				t.Errorf("pauses %v: longest %v, %d polling; want %v and %d (of more than minGap)", sl.all(), longest, polls, tt.longest, tt.polls)
			}
			if tt.status == StatusFailed && (got.Error == nil || got.Error.Code != "content_blocked") {
				t.Errorf("failed task's error %+v", got.Error)
			}
		})
	}
}

// A server that answers at once whatever the wait parameter says is polled
// with backoff, not hammered.
func TestWaitServerIgnoringWait(t *testing.T) {
	recs := []string{rec("processing", 10, "")}
	for range 5 {
		recs = append(recs, rec("processing", 10, ""))
	}
	recs = append(recs, rec("completed", 100, ""))
	p := &progression{records: recs}
	c, sl := newTestClient(t, p)
	// A clock that stands still: the requests take no time, so each pause
	// is the backoff's whole interval.
	at := time.Now()
	c.now = func() time.Time { return at }
	if _, err := c.Wait(context.Background(), "task_lumen_1"); err != nil {
		t.Fatal(err)
	}
	got := sl.all()
	// The first answer, read without waiting, goes straight on to a
	// long-poll; then five unchanged ones, polled at 500 ms growing by
	// half each time.
	want := []time.Duration{500 * time.Millisecond, 750 * time.Millisecond, 1125 * time.Millisecond, 1687500 * time.Microsecond, 2531250 * time.Microsecond}
	if len(got) != len(want) {
		t.Fatalf("pauses %v; want about %v", got, want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("pauses %v; want %v", got, want)
	}
}

func TestWaitRemembersAnOlderServer(t *testing.T) {
	p := &progression{records: []string{rec("processing", 10, ""), rec("processing", 20, ""), rec("completed", 100, "")}, rejectWait: true}
	c, _ := newTestClient(t, p)
	for range 2 {
		if _, err := c.Wait(context.Background(), "task_lumen_1"); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		p.served = 0
		p.mu.Unlock()
	}
	// The first Wait: a read, a refused long-poll, the same read again,
	// then polls; the second only polls.
	if w := strings.Join(p.seenWaits(), ","); w != ",30,,,,," {
		t.Errorf("wait parameters %q; want one refused long-poll then plain queries", w)
	}
}

func TestWaitErrors(t *testing.T) {
	t.Run("unknown task", func(t *testing.T) {
		c, _ := newTestClient(t, &progression{records: lifecycle})
		got, err := c.Wait(context.Background(), "task_lumen_404")
		if !errors.Is(err, ErrNotFound) || got != nil {
			t.Errorf("Wait: %v %v; want ErrNotFound", got, err)
		}
	})
	t.Run("a 400 that is not about wait", func(t *testing.T) {
		c, _ := newTestClient(t, &scripted{replies: []reply{{status: 400, body: `{"code":400,"msg":"task_id is required","data":null}`}}})
		_, err := c.Wait(context.Background(), "")
		var e *APIError
		if !errors.As(err, &e) || e.Message != "task_id is required" {
			t.Errorf("Wait: %v; want the 400", err)
		}
		if c.longPoll.Load() == longPollNo {
			t.Error("took the server for one without long-polls")
		}
	})
	t.Run("the context ends it, with the last record", func(t *testing.T) {
		c, _ := newTestClient(t, &progression{records: []string{rec("processing", 30, "")}})
		c.sleep = sleepCtx
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		got, err := c.Wait(ctx, "task_lumen_1", WithLongPoll(0))
		if !errors.Is(err, context.DeadlineExceeded) || got == nil || got.Progress != 30 {
			t.Errorf("Wait: %+v %v", got, err)
		}
	})
}

func TestGenerate(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	p := &progression{records: lifecycle}
	c, _ := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/v1/task/create" {
			fmt.Fprint(w, created)
			return
		}
		p.ServeHTTP(w, r)
	}))
	got, err := c.Generate(context.Background(), CreateRequest{Model: ModelStandard, Prompt: "x"})
	if err != nil || got.Status != StatusCompleted || len(got.Results) != 1 {
		t.Fatalf("Generate: %+v %v", got, err)
	}
	if paths[0] != "POST /v1/task/create" || paths[1] != "GET /v1/task/query" {
		t.Errorf("requests %v", paths)
	}
	// The record marshals back to the API's own JSON.
	b, _ := json.Marshal(got)
	if string(b) != lifecycle[5] {
		t.Errorf("marshalled\n%s\nwant\n%s", b, lifecycle[5])
	}
}
