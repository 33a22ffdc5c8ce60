package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/redisconn"
)

// waitStatus queries a task until it has the status, failing after 30 s.
func (c *client) waitStatus(id, status string) taskRecord {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, rec, b := c.query(id)
		if rec.Status == status {
			return rec
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s never %s: %s", id, status, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stdBody(prompt string) string {
	return `{"model":"` + std + `","task_type":"image","input":{"prompt":"` + prompt + `"}}`
}

type cancelReply struct {
	TaskID          string `json:"task_id"`
	Status          string `json:"status"`
	Refunded        bool   `json:"refunded"`
	CreditsRefunded int64  `json:"credits_refunded"`
}

func (c *client) cancel(id string) (int, cancelReply) {
	c.t.Helper()
	status, _, b := c.do("POST", "/v1/task/cancel", `{"task_id":"`+id+`"}`, nil)
	var env envelope
	var r cancelReply
	if status == 200 {
		if err := json.Unmarshal(b, &env); err != nil || json.Unmarshal(env.Data, &r) != nil {
			c.t.Fatalf("cancel body %s", b)
		}
	}
	return status, r
}

// Canceling on the real services: a processing task's run stops on its
// worker at once (Asynq's cancellation), a pending task is refunded and
// never runs, a finished task is a conflict.
func TestCancelEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 20 * time.Second, env: map[string]string{"EASEL_WORKER_CONCURRENCY": "1"}})
	c := newClient(t, s.base, s.key)
	ctx := context.Background()
	rdb, err := redisconn.Open(ctx, s.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	acct, err := s.accounts.Authenticate(ctx, s.key)
	if err != nil {
		t.Fatal(err)
	}
	credits := func() int64 {
		a, err := s.accounts.Get(ctx, acct.ID)
		if err != nil {
			t.Fatal(err)
		}
		return a.Credits
	}
	before := credits()
	running := c.create(stdBody("a slow lighthouse"))
	c.waitStatus(running, "processing")
	queued := c.create(stdBody("a queued lighthouse"))
	charged := credits()
	if r := c.waitStatus(queued, "pending"); r.Status != "pending" {
		t.Fatal(r)
	}

	if st, r := c.cancel(queued); st != 200 || !r.Refunded || r.CreditsRefunded <= 0 || r.Status != "canceled" {
		t.Fatalf("cancel pending: %d %+v", st, r)
	}
	if st, r := c.cancel(running); st != 200 || r.Refunded || r.CreditsRefunded != 0 {
		t.Fatalf("cancel processing: %d %+v", st, r)
	}
	// The worker's run stops long before its 20 s generation would end.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.LLen(ctx, "asynq:{standard}:active").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the canceled run is still active on its worker")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range []string{running, queued} {
		if _, rec, _ := c.query(id); rec.Status != "canceled" || rec.CompleteTime == 0 || len(rec.Results) != 0 || rec.Error != nil {
			t.Errorf("%s after cancel: %+v", id, rec)
		}
		if st, _, b := c.do("POST", "/v1/task/cancel", `{"task_id":"`+id+`"}`, nil); st != 409 || !strings.Contains(string(b), "already canceled") {
			t.Errorf("second cancel: %d %s", st, b)
		}
	}
	// The queued task's job is picked up and dropped; nothing completes
	// either task later.
	time.Sleep(time.Second)
	for _, id := range []string{running, queued} {
		if _, rec, _ := c.query(id); rec.Status != "canceled" {
			t.Errorf("%s became %s after its cancel", id, rec.Status)
		}
	}
	if got, want := credits(), before-(before-charged)/2; got != want {
		t.Errorf("balance %d, want %d: the queued task refunded, the started one not", got, want)
	}
	if st, _, _ := newClient(t, s.base, s.keyOther).do("POST", "/v1/task/cancel", `{"task_id":"`+running+`"}`, nil); st != 404 {
		t.Errorf("another account's cancel: %d, want 404", st)
	}
}

// Waiting without polling, on the real services: query's wait answers at
// each change, the stream carries every change to the end, a queued task
// shows its place, and the list pages through the account's tasks.
func TestWaitStreamListEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: 2 * time.Second, env: map[string]string{"EASEL_WORKER_CONCURRENCY": "1"}})
	c := newClient(t, s.base, s.key)

	first := c.create(stdBody("first"))
	c.waitStatus(first, "processing")
	second := c.create(stdBody("second"))
	third := c.create(stdBody("third"))
	// Behind one running and one queued: second in its queue, once the
	// gateway has read the queue's numbers again (at most 250 ms old).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, rec, b := c.query(third)
		if rec.Status != "pending" || strings.Contains(string(b), `"queue_position":2`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the third task, behind one running and one queued: %s", b)
		}
	}

	// The stream of the second task, from pending to completed.
	req, _ := http.NewRequest("GET", s.base+"/v1/task/stream?task_id="+url.QueryEscape(second), nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	streamed := make(chan []taskRecord, 1)
	go func() {
		var recs []taskRecord
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var r taskRecord
				if json.Unmarshal([]byte(d), &r) == nil {
					recs = append(recs, r)
				}
			}
		}
		streamed <- recs
	}()

	// The first task's next change, by long-polling.
	start := time.Now()
	st, _, b := c.do("GET", "/v1/task/query?task_id="+url.QueryEscape(first)+"&wait=30", "", nil)
	var rec taskRecord
	_ = json.Unmarshal(b, &rec)
	if st != 200 || rec.Status == "pending" || time.Since(start) > 25*time.Second {
		t.Fatalf("wait: %d %s after %v", st, b, time.Since(start))
	}

	var recs []taskRecord
	select {
	case recs = <-streamed:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end with its task")
	}
	if len(recs) < 3 || recs[0].Status != "pending" || recs[len(recs)-1].Status != "completed" || recs[len(recs)-1].Progress != 100 {
		t.Fatalf("streamed %+v; want pending first, completed last", recs)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Progress < recs[i-1].Progress || (recs[i].Progress == recs[i-1].Progress && recs[i].Status == recs[i-1].Status) {
			t.Fatalf("event %d repeats or goes back: %+v", i, recs)
		}
	}

	// The list: newest first, two pages of two... then one.
	var got []string
	q := "/v1/task/list?limit=2"
	for page := 0; page < 5; page++ {
		st, _, b := c.do("GET", q, "", nil)
		var p struct {
			Tasks      []taskRecord `json:"tasks"`
			NextCursor string       `json:"next_cursor"`
		}
		if st != 200 || json.Unmarshal(b, &p) != nil {
			t.Fatalf("list: %d %s", st, b)
		}
		for _, r := range p.Tasks {
			got = append(got, r.TaskID)
		}
		if p.NextCursor == "" {
			break
		}
		q = "/v1/task/list?limit=2&cursor=" + url.QueryEscape(p.NextCursor)
	}
	if strings.Join(got, " ") != strings.Join([]string{third, second, first}, " ") {
		t.Errorf("listed %v, want third, second, first", got)
	}
	if st, _, b := newClient(t, s.base, s.keyOther).do("GET", "/v1/task/list", "", nil); st != 200 || !strings.Contains(string(b), `"tasks":[]`) {
		t.Errorf("another account's list: %d %s", st, b)
	}
}
