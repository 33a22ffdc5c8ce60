package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
)

// MaxWait is the longest a query may wait for its task to change.
const MaxWait = 60 * time.Second

// streamKeepalive is how often a quiet stream sends a comment, so that
// proxies and clients see the connection alive.
const streamKeepalive = 15 * time.Second

// waitParam reads the query's wait parameter: whole seconds, 0 to 60.
func waitParam(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || time.Duration(n)*time.Second > MaxWait {
		return 0, apperr.Errorf(apperr.Invalid, "wait must be a whole number of seconds from 0 to %d", int(MaxWait/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// readContext gives one read of a waiting request (its context base:
// web.BaseContext, which ends when the client goes away) a budget of its
// own.
func (h *Handlers) readContext(base context.Context) (context.Context, context.CancelFunc) {
	if h.s.RequestTimeout <= 0 {
		return context.WithCancel(base)
	}
	return context.WithTimeout(base, h.s.RequestTimeout)
}

// read reads a task and its queue position, with a budget of its own.
func (h *Handlers) read(base context.Context, accountID, id string) (*task.Task, *task.QueuePosition, error) {
	ctx, cancel := h.readContext(base)
	defer cancel()
	return h.Tasks.GetPositioned(ctx, accountID, id)
}

// changed reports whether a client that saw a would want to see b.
func changed(a, b *task.Task) bool { return a.Status != b.Status || a.Progress != b.Progress }

// waitQuery answers GET /v1/task/query?wait=N: at once if the task is final,
// else when its status or progress changes, or after N seconds with the
// record as it is.
func (h *Handlers) waitQuery(c echo.Context, accountID, id string, wait time.Duration) error {
	base := web.BaseContext(c)
	t, pos, err := h.waitUntil(base, accountID, id, wait, changed)
	if err != nil {
		return h.readFailed(base, err)
	}
	return h.answerTask(c, t, pos)
}

// waitEnd waits until a task just created ends, for at most wait, and
// returns it as it then is, with its queue position (Prefer: wait=N).
func (h *Handlers) waitEnd(c echo.Context, accountID, id string, wait time.Duration) (*task.Task, *task.QueuePosition, error) {
	base := web.BaseContext(c)
	if wait <= 0 {
		return h.read(base, accountID, id)
	}
	return h.waitUntil(base, accountID, id, wait, func(_, now *task.Task) bool { return now.Status.Final() })
}

// waitUntil returns a task, with its queue position, once it is final,
// once done(first, now) holds of the task as first read and as it is
// now, after wait, or at once when the gateway is closing. The wait is
// woken by the store's task events (one subscription per gateway), never
// by polling Redis. A client gone ends it with base's error.
func (h *Handlers) waitUntil(base context.Context, accountID, id string, wait time.Duration, done func(first, now *task.Task) bool) (*task.Task, *task.QueuePosition, error) {
	w := h.Watch.Watch(accountID, id)
	defer w.Stop()
	// Read after registering: a change between the two is not missed. The
	// plain read (no queue position): a waiting request keeps the stack
	// its first read grew, and ten thousand of them add up
	// (BENCHMARKS.md); the answer reads the position.
	first, err := h.readPlain(base, accountID, id)
	if err != nil {
		return nil, nil, err
	}
	if first.Status.Final() || w.Closed() {
		return h.read(base, accountID, id)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-w.C:
			now, pos, err := h.read(base, accountID, id)
			if err != nil || now.Status.Final() || done(first, now) || w.Closed() {
				return now, pos, err
			}
		case <-timer.C:
			return h.read(base, accountID, id)
		case <-base.Done():
			return nil, nil, base.Err()
		}
	}
}

func (h *Handlers) readPlain(base context.Context, accountID, id string) (*task.Task, error) {
	ctx, cancel := h.readContext(base)
	defer cancel()
	return h.Tasks.Get(ctx, accountID, id)
}

// answerNow reads the task with its position and answers with it.
func (h *Handlers) answerNow(c echo.Context, base context.Context, accountID, id string) error {
	t, pos, err := h.read(base, accountID, id)
	if err != nil {
		return h.readFailed(base, err)
	}
	return h.answerTask(c, t, pos)
}

// readFailed is a waiting request's read error, unless its client has gone
// (nothing to answer, nothing to log: a gateway stopping while clients
// disconnect would log thousands).
func (h *Handlers) readFailed(base context.Context, err error) error {
	if base.Err() != nil {
		return nil
	}
	return err
}

// answerTask writes a task record, with its queue position if pending.
func (h *Handlers) answerTask(c echo.Context, t *task.Task, pos *task.QueuePosition) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, h.record(t, pos))
}

func (h *Handlers) record(t *task.Task, p *task.QueuePosition) taskview.Record {
	v := h.view(t)
	if p != nil && t.Status == task.Pending {
		pos := p.Position
		v.QueuePosition = &pos
		if p.Known {
			eta := p.ETA.Milliseconds()
			v.EtaMs = &eta
		}
	}
	return v
}

// Stream handles GET /v1/task/stream?task_id=: Server-Sent Events of the
// task's record, the first at once and one at each change of status or
// progress, until the task ends.
func (h *Handlers) Stream(c echo.Context) error {
	id, err := taskIDParam(c)
	if err != nil {
		return err
	}
	acct := web.AccountOf(c).ID
	base := web.BaseContext(c)
	w := h.Watch.Watch(acct, id)
	defer w.Stop()
	t, pos, err := h.read(base, acct, id)
	if err != nil {
		return err
	}
	res := c.Response()
	hdr := res.Header()
	hdr.Set(echo.HeaderContentType, "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	res.WriteHeader(http.StatusOK)
	if c.Request().Method == http.MethodHead { // the stream's headers, no events
		return nil
	}
	rc := http.NewResponseController(res)
	log := logging.From(c.Request().Context())
	seq := 0
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as every other response: result URLs keep their "&"
	send := func(event string, v any) bool {
		seq++
		buf.Reset()
		buf.WriteString("event: " + event + "\nid: " + strconv.Itoa(seq) + "\ndata: ")
		if err := enc.Encode(v); err != nil { // one line, ending in "\n"
			log.Error("stream: encode", zap.Error(err))
			return false
		}
		buf.WriteString("\n")
		_ = rc.SetWriteDeadline(time.Now().Add(time.Minute))
		if _, err := res.Write(buf.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("task", h.record(t, pos)) || t.Status.Final() {
		return nil
	}
	keepalive := time.NewTicker(streamKeepalive)
	defer keepalive.Stop()
	for {
		select {
		case <-w.C:
			now, pos, err := h.read(base, acct, id)
			if err != nil {
				if base.Err() != nil {
					return nil // the client went away
				}
				status, msg := web.Classify(err)
				log.Warn("stream: could not read the task; the stream ends", zap.Error(err))
				send("error", web.Envelope{Code: status, Msg: msg})
				return nil
			}
			if changed(t, now) {
				t = now
				if !send("task", h.record(t, pos)) || t.Status.Final() {
					return nil
				}
			}
			if w.Closed() {
				return nil // shutting down: the client reconnects elsewhere
			}
		case <-keepalive.C:
			_ = rc.SetWriteDeadline(time.Now().Add(time.Minute))
			if _, err := res.Write([]byte(": keepalive\n\n")); err != nil || rc.Flush() != nil {
				return nil
			}
		case <-base.Done():
			return nil
		}
	}
}
