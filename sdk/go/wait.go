package easel

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// WaitOption configures Wait.
type WaitOption func(*waitConfig)

type waitConfig struct {
	onUpdate         func(*Task)
	longPoll         time.Duration
	minPoll, maxPoll time.Duration
}

// OnUpdate calls fn with the first record Wait reads and then with each
// one whose status, progress or queue position changed, the final one
// included; fn runs on Wait's goroutine.
func OnUpdate(fn func(*Task)) WaitOption { return func(w *waitConfig) { w.onUpdate = fn } }

// WithLongPoll sets how long one request may wait on the server for a
// change (1 to 60 s, default 30 s); 0 polls instead.
func WithLongPoll(d time.Duration) WaitOption {
	return func(w *waitConfig) {
		switch {
		case d <= 0:
			w.longPoll = 0
		case d < time.Second:
			w.longPoll = time.Second
		default:
			w.longPoll = min(d, 60*time.Second)
		}
	}
}

// WithPollInterval sets the polling when the server cannot long-poll:
// first every lo, then backing off by half again each time nothing
// changed, up to hi (default 500 ms to 5 s).
func WithPollInterval(lo, hi time.Duration) WaitOption {
	return func(w *waitConfig) { w.minPoll, w.maxPoll = lo, max(lo, hi) }
}

// pendingWait is the longest long-poll on a pending task: its queue
// position changes without waking one.
const pendingWait = 5 * time.Second

// minGap spaces the requests of a Wait even when each answer brings a
// change.
const minGap = 100 * time.Millisecond

// Wait returns a task's record once it is final: completed, failed or
// canceled. A failed task is no error: read Task.Error. It reads the task
// once, then long-polls (GET /v1/task/query?wait=N), so each change
// arrives as it happens (for a pending task, at most 5 s apart, so that
// its queue position stays current); with a server that does not take the
// wait parameter it polls, backing off while nothing changes. The context bounds the wait. On an error it returns the
// last record it read, if any, with the error.
func (c *Client) Wait(ctx context.Context, taskID string, opts ...WaitOption) (*Task, error) {
	cfg := waitConfig{longPoll: 30 * time.Second, minPoll: 500 * time.Millisecond, maxPoll: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	var last *Task
	interval := cfg.minPoll
	for {
		// The first question is answered at once (a long-poll is held
		// until a change); a pending task's long-polls are short, so that
		// its queue position stays current.
		wait := cfg.longPoll
		switch {
		case last == nil:
			wait = 0
		case last.Status == StatusPending:
			wait = min(wait, pendingWait)
		}
		start := c.now()
		t, held, err := c.poll(ctx, taskID, wait)
		if err != nil {
			return last, err
		}
		first := last == nil
		changed := last == nil || t.Status != last.Status || t.Progress != last.Progress || !sameInt(t.QueuePosition, last.QueuePosition)
		last = t
		if changed && cfg.onUpdate != nil {
			cfg.onUpdate(t)
		}
		if t.Status.Final() {
			return t, nil
		}
		elapsed := c.now().Sub(start)
		var pause time.Duration
		switch {
		case first && cfg.longPoll > 0 && c.longPoll.Load() != longPollNo:
			// On to the long-polls.
		case held && (changed || elapsed >= wait/2):
			// The server held the request until a change or its wait.
			interval = cfg.minPoll
			pause = minGap - elapsed
		default:
			// Polling: at once after a change, slower while nothing moves.
			if changed {
				interval = cfg.minPoll
			}
			pause = interval - elapsed
			interval = min(interval*3/2, cfg.maxPoll)
		}
		if pause > 0 {
			if err := c.sleep(ctx, pause); err != nil {
				return last, err
			}
		}
	}
}

// Generate creates a task and waits for it (see Create and Wait).
func (c *Client) Generate(ctx context.Context, r CreateRequest, opts ...WaitOption) (*Task, error) {
	id, err := c.Create(ctx, r)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, id, opts...)
}

// poll reads a task, long-polling for up to wait when the server can.
// held reports whether the request was a long-poll.
func (c *Client) poll(ctx context.Context, id string, wait time.Duration) (t *Task, held bool, err error) {
	if wait <= 0 || c.longPoll.Load() == longPollNo {
		t, err := c.Get(ctx, id)
		return t, false, err
	}
	secs := int((wait + time.Second/2) / time.Second)
	timeout := time.Duration(-1)
	if c.timeout > 0 {
		timeout = c.timeout + wait
	}
	var rec Task
	err = c.call(ctx, call{
		method:  http.MethodGet,
		path:    "/v1/task/query",
		query:   url.Values{"task_id": {id}, "wait": {strconv.Itoa(secs)}},
		replay:  true,
		timeout: timeout,
	}, &rec)
	switch {
	case err == nil:
		c.longPoll.CompareAndSwap(longPollUnknown, longPollYes)
		return &rec, true, nil
	case errors.Is(err, ErrBadRequest) && c.longPoll.Load() != longPollYes:
		// An older server, refusing the parameter: without it, the same
		// question must succeed.
		t, gerr := c.Get(ctx, id)
		if gerr != nil {
			return nil, false, gerr
		}
		c.longPoll.Store(longPollNo)
		return t, false, nil
	}
	return nil, false, err
}

func sameInt(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
