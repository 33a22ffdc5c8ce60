package api_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/watch"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
)

// A create with Prefer: wait=N answers when its task ends, with the record,
// or after N seconds with the record as it is; a bad wait is refused
// before anything is created.
func TestCreateWaits(t *testing.T) {
	t.Parallel()
	hub := watch.New()
	queued := make(chan string, 16)
	e := newEnvWith(t, queueFunc(func(_ context.Context, j jobs.Ref, _ string) error {
		queued <- j.TaskID
		return nil
	}), zap.NewNop(), func(d *deps) { d.Watch = hub })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go hub.Run(ctx, e.Store, zap.NewNop())
	<-hub.Subscribed()

	// waitingOn returns the next task queued once its create waits on it.
	waitingOn := func() string {
		id := <-queued
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); hub.Waiting() == 0; <-tick.C {
			if time.Now().After(deadline) {
				t.Error("the create never waited")
				break
			}
		}
		return id
	}
	create := func(prefer string) reply {
		h := e.auth(e.KeyA)
		if prefer != "" {
			h["Prefer"] = prefer
		}
		return e.Do("POST", "/v1/task/create", h, okBody)
	}
	dataOf := func(r reply) (string, map[string]any) {
		d, _ := r.JSON(t)["data"].(map[string]any)
		id, _ := d["task_id"].(string)
		rec, _ := d["task"].(map[string]any)
		return id, rec
	}

	t.Run("ends while waiting", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			id := waitingOn()
			if _, err := e.Store.Start(ctx, e.AcctA, id, id); err != nil {
				done <- err
				return
			}
			_, err := e.Store.Complete(ctx, e.AcctA, id, id, []task.Result{{Key: "results/" + id + "/0.png", ContentType: "image/png", Size: 10, Width: 1, Height: 1}})
			done <- err
		}()
		r := create("respond-async, wait=30")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		id, rec := dataOf(r)
		if r.Status != 200 || rec == nil || rec["status"] != "completed" || rec["task_id"] != id {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		if urls, _ := rec["results"].([]any); len(urls) != 1 {
			t.Errorf("results %v", rec["results"])
		}
		if got := r.Header.Get("Preference-Applied"); got != "wait=30" {
			t.Errorf("Preference-Applied %q", got)
		}
	})

	t.Run("times out", func(t *testing.T) {
		start := time.Now()
		r := create("wait=1")
		took := time.Since(start)
		id, rec := dataOf(r)
		if r.Status != 200 || rec == nil || rec["status"] != "pending" || rec["task_id"] != id || took < time.Second {
			t.Fatalf("create: %d %s after %v", r.Status, r.Body, took)
		}
		if _, ok := rec["queue_position"]; !ok {
			t.Error("a pending task's record without its queue position")
		}
		<-queued
	})

	t.Run("without a wait", func(t *testing.T) {
		r := create("")
		id, rec := dataOf(r)
		if r.Status != 200 || id == "" || rec != nil || r.Header.Get("Preference-Applied") != "" {
			t.Fatalf("create: %d %s %v", r.Status, r.Body, r.Header)
		}
		<-queued
	})

	for _, bad := range []string{"wait=600", "wait=61", "wait=x", "wait=1, wait=2"} {
		t.Run("refused "+bad, func(t *testing.T) {
			before, _ := e.Accounts.Get(ctx, e.AcctA)
			r := create(bad)
			assertEnvelope(t, r, 400, "Prefer: ")
			after, _ := e.Accounts.Get(ctx, e.AcctA)
			if after.Credits != before.Credits {
				t.Errorf("a refused create charged %d", before.Credits-after.Credits)
			}
		})
	}
}
