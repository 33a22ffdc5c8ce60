package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/watch"
	"github.com/easelhq/easel/pkg/task"
)

// newWatchedEnv is an env whose waits and streams are woken by the store's
// events, as the gateway's are.
func newWatchedEnv(t *testing.T) *env {
	t.Helper()
	hub := watch.New()
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) { d.Watch = hub })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go hub.Run(ctx, e.Store, zap.NewNop())
	select {
	case <-hub.Subscribed():
	case <-time.After(5 * time.Second):
		t.Fatal("the hub never subscribed")
	}
	return e
}

func TestQueryWait(t *testing.T) {
	t.Parallel()
	e := newWatchedEnv(t)
	ctx := context.Background()
	first := e.newTask(e.KeyA)
	id := e.newTask(e.KeyA)
	waitQuery := func(id, wait string) (reply, time.Duration) {
		start := time.Now()
		r := e.Do("GET", "/v1/task/query?task_id="+id+"&wait="+wait, e.auth(e.KeyA), "")
		return r, time.Since(start)
	}

	// A pending task shows its place in the queue.
	r := e.Query(e.KeyA, id)
	if pos, _ := r.JSON(t)["queue_position"].(float64); pos != 2 {
		t.Fatalf("queue_position %v, want 2 (body %s)", r.JSON(t)["queue_position"], r.Body)
	}

	// Nothing happens: the record after the wait.
	r, took := waitQuery(id, "1")
	if r.Status != 200 || r.JSON(t)["status"] != "pending" || took < time.Second {
		t.Fatalf("wait=1: %d %s after %v", r.Status, r.Body, took)
	}

	// A change wakes the wait long before its end.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = e.Store.Start(ctx, e.AcctA, id, id)
	}()
	r, took = waitQuery(id, "30")
	if r.Status != 200 || r.JSON(t)["status"] != "processing" || took > 20*time.Second {
		t.Fatalf("wait=30 with a change: %d %s after %v", r.Status, r.Body, took)
	}
	if _, ok := r.JSON(t)["queue_position"]; ok {
		t.Error("a processing task shows a queue position")
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = e.Store.Progress(ctx, e.AcctA, id, id, 40)
	}()
	r, _ = waitQuery(id, "30")
	if p, _ := r.JSON(t)["progress"].(float64); p != 40 {
		t.Fatalf("progress change: %s", r.Body)
	}

	// A final task answers at once.
	if _, err := e.Store.Cancel(ctx, e.AcctA, first); err != nil {
		t.Fatal(err)
	}
	r, took = waitQuery(first, "30")
	if r.JSON(t)["status"] != "canceled" || took > 20*time.Second {
		t.Fatalf("final: %s after %v", r.Body, took)
	}

	for _, bad := range []string{"61", "-1", "1.5", "x"} {
		r, _ := waitQuery(id, bad)
		assertEnvelope(t, r, 400, "wait must be")
	}
	// Another account's task is not found, waiting or not.
	r = e.Do("GET", "/v1/task/query?task_id="+id+"&wait=5", e.auth(e.KeyB), "")
	assertEnvelope(t, r, 404, "not found")
}

func TestStream(t *testing.T) {
	t.Parallel()
	e := newWatchedEnv(t)
	ctx := context.Background()
	id := e.newTask(e.KeyA)
	req, _ := http.NewRequest("GET", e.Srv.URL+"/v1/task/stream?task_id="+id, nil)
	req.Header.Set("Authorization", "Bearer "+e.KeyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan map[string]any, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "task":
				var m map[string]any
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m) == nil {
					events <- m
				}
			}
		}
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-events:
			if !ok {
				t.Fatal("the stream ended early")
			}
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return nil
	}
	if m := next(); m["status"] != "pending" || m["task_id"] != id {
		t.Fatalf("first event %v", m)
	}
	steps := []struct {
		do     func()
		status string
		pct    float64
	}{
		{func() { _, _ = e.Store.Start(ctx, e.AcctA, id, id) }, "processing", 0},
		{func() { _, _ = e.Store.Progress(ctx, e.AcctA, id, id, 55) }, "processing", 55},
		{func() {
			_, _ = e.Store.Complete(ctx, e.AcctA, id, id, []task.Result{{Key: "2026112314/0123456789abcdef0123456789abcdef.png", ContentType: "image/png"}})
		}, "completed", 100},
	}
	var m map[string]any
	for _, s := range steps {
		s.do()
		if m = next(); m["status"] != s.status || m["progress"] != s.pct {
			t.Fatalf("event %v, want %s at %v", m, s.status, s.pct)
		}
	}
	// The result URL reads as the query's does.
	if q := e.Query(e.KeyA, id).JSON(t); fmt.Sprint(q["results"]) != fmt.Sprint(m["results"]) {
		t.Errorf("streamed results %v, query's %v", m["results"], q["results"])
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("an event after the final one")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after the task did")
	}
	r := e.Do("GET", "/v1/task/stream?task_id="+id, e.auth(e.KeyB), "")
	assertEnvelope(t, r, 404, "not found")
	r = e.Do("GET", "/v1/task/stream", e.auth(e.KeyA), "")
	assertEnvelope(t, r, 400, "task_id is required")
}
