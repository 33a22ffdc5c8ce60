package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// An idempotency key makes a create happen once per account: the same key
// and body again replays the first create (its task id, no charge, no
// task), another body is a mismatch, a repeat while the first is under way
// a conflict, and an undone create frees the key.
func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, srv := newStoreWith(t, Options{Now: func() time.Time { return now }})
	rdb := srv.Client(t)
	ctx := context.Background()
	charge := func(key, body string) task.Charge {
		c := std
		c.Idempotency = task.Idempotency{Key: key, BodyHash: body}
		return c
	}
	balance := func(acct string) int64 {
		n, _ := rdb.HGet(ctx, accountKey(acct), "credits").Int64()
		return n
	}

	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_1"), charge("k1", "body-1"), nil); err != nil {
		t.Fatal(err)
	}
	after := balance("acct_a")

	for _, tt := range []struct {
		name     string
		acct, id string
		key      string
		body     string
		advance  time.Duration
		done     bool
		replay   string      // the task id replayed
		code     apperr.Code // or the refusal
	}{
		{name: "repeat while the first is under way", acct: "acct_a", id: "task_lumen_2", key: "k1", body: "body-1", code: apperr.Conflict},
		{name: "another body", acct: "acct_a", id: "task_lumen_3", key: "k1", body: "body-2", code: apperr.Mismatch},
		{name: "repeat after the create stood", acct: "acct_a", id: "task_lumen_4", key: "k1", body: "body-1", done: true, replay: "task_lumen_1"},
		{name: "another body, still", acct: "acct_a", id: "task_lumen_5", key: "k1", body: "body-2", code: apperr.Mismatch},
		{name: "another account's key of the same name", acct: "acct_b", id: "task_lumen_6", key: "k1", body: "body-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now = now.Add(tt.advance)
			if tt.done {
				if err := s.tasks.IdempotencyDone(ctx, "acct_a", "k1", "task_lumen_1"); err != nil {
					t.Fatal(err)
				}
			}
			before := balance(tt.acct)
			_, err := s.tasks.Create(ctx, pending(tt.acct, tt.id), charge(tt.key, tt.body), nil)
			var r *task.Replayed
			switch {
			case tt.replay != "":
				if !errors.As(err, &r) || r.TaskID != tt.replay {
					t.Fatalf("Create = %v; want a replay of %s", err, tt.replay)
				}
			case tt.code != "":
				if apperr.CodeOf(err) != tt.code {
					t.Fatalf("Create = %v; want %s", err, tt.code)
				}
			default:
				if err != nil {
					t.Fatalf("Create = %v; want created", err)
				}
			}
			created, _ := rdb.Exists(ctx, taskKey(tt.acct, tt.id)).Result()
			if (created == 1) != (tt.replay == "" && tt.code == "") {
				t.Errorf("task %s exists: %v", tt.id, created == 1)
			}
			if tt.replay != "" || tt.code != "" {
				if b := balance(tt.acct); b != before {
					t.Errorf("balance %d -> %d on a create that made nothing", before, b)
				}
			}
		})
	}
	if balance("acct_a") != after {
		t.Errorf("balance of acct_a %d; want %d, one charge", balance("acct_a"), after)
	}

	// A gateway that died mid-create leaves the key under way: after the
	// pending window it replays (the task stands; the recovery queues it).
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_7"), charge("k2", "b"), nil); err != nil {
		t.Fatal(err)
	}
	now = now.Add(idempotencyPending + time.Second)
	var r *task.Replayed
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_8"), charge("k2", "b"), nil); !errors.As(err, &r) || r.TaskID != "task_lumen_7" {
		t.Errorf("repeat past the pending window: %v; want a replay of task_lumen_7", err)
	}

	// An undone create frees its key, in the same step.
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_9"), charge("k3", "b"), nil); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.tasks.Abort(ctx, "acct_a", "task_lumen_9", "k3"); !ok || err != nil {
		t.Fatalf("abort: %v %v", ok, err)
	}
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_11"), charge("k3", "b"), nil); err != nil {
		t.Errorf("after the undone create: %v; want created", err)
	}
	// An undo that does not apply (a worker started the task meanwhile)
	// leaves the key: a retry replays the task that runs, never a second.
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_12"), charge("k4", "b"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := start(s, "acct_a", "task_lumen_12", "task_lumen_12"); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.tasks.Abort(ctx, "acct_a", "task_lumen_12", "k4"); ok || err != nil {
		t.Fatalf("abort of a started task: %v %v; want not applied", ok, err)
	}
	now = now.Add(idempotencyPending + time.Second)
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_13"), charge("k4", "b"), nil); !errors.As(err, &r) || r.TaskID != "task_lumen_12" {
		t.Errorf("retry after an undo that did not apply: %v; want a replay of task_lumen_12", err)
	}

	// Keys are kept 24 hours.
	ttl, _ := rdb.PTTL(ctx, idempotencyKey("acct_a", "k1")).Result()
	if ttl < IdempotencyTTL-time.Minute || ttl > IdempotencyTTL {
		t.Errorf("key TTL %v; want %v", ttl, IdempotencyTTL)
	}
}
