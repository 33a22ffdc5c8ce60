package api

import (
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/task"
)

type createData struct {
	TaskID string `json:"task_id"`
}

// create handles POST /v1/task/create.
func (h *handlers) create(c echo.Context) error {
	r := c.Request()
	body, err := jsonBody(c)
	if err != nil {
		return err
	}
	req, err := h.Decoder.Decode(body)
	if err != nil {
		return err
	}
	id, err := h.Tasks.Create(r.Context(), accountOf(c).ID, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, envelope{Code: http.StatusOK, Msg: "success", Data: createData{TaskID: id}})
}

// jsonBody checks a request carries JSON and reads its body, within the
// size limit.
func jsonBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	if err := createreq.CheckContentType(r.Header.Get(echo.HeaderContentType)); err != nil {
		return nil, err
	}
	return createreq.ReadBody(r.Body, r.ContentLength)
}

// taskView is the public task record.
type taskView struct {
	TaskID       string        `json:"task_id"`
	TaskType     string        `json:"task_type"`
	Model        string        `json:"model"`
	Status       task.Status   `json:"status"`
	Progress     int           `json:"progress"`
	CreateTime   int64         `json:"create_time"`
	CompleteTime int64         `json:"complete_time"`
	Results      []string      `json:"results"`
	Error        *task.Failure `json:"error,omitempty"`
}

// query handles GET /v1/task/query.
func (h *handlers) query(c echo.Context) error {
	id := c.QueryParam("task_id")
	if id == "" {
		return apperr.New(apperr.Invalid, "task_id is required: GET /v1/task/query?task_id=<task id>")
	}
	if !taskid.Valid(id) {
		return apperr.Errorf(apperr.NotFound, "task %s not found", clipID(id))
	}
	t, err := h.Tasks.Get(c.Request().Context(), accountOf(c).ID, id)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, h.view(t))
}

func (h *handlers) view(t *task.Task) taskView {
	v := taskView{
		TaskID:     t.ID,
		TaskType:   t.Type,
		Model:      t.Model,
		Status:     t.Status,
		Progress:   t.Progress,
		CreateTime: t.CreateTime.UnixMilli(),
		Results:    []string{},
	}
	if !t.CompleteTime.IsZero() {
		v.CompleteTime = t.CompleteTime.UnixMilli()
	}
	if t.Status == task.Completed {
		v.Results = make([]string, len(t.Results))
		exp := t.ResultsExpire()
		for i, r := range t.Results {
			v.Results[i] = h.Signer.Sign(FilesPrefix+r.Key, exp)
		}
	}
	if t.Status == task.Failed {
		v.Error = t.Failure
		if v.Error == nil {
			v.Error = &task.Failure{Code: string(apperr.Internal), Message: "the task failed"}
		}
	}
	return v
}

func clipID(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80] + "...")
	}
	return strconv.Quote(s)
}

// download handles GET and HEAD /v1/files/<key>?expires=...&sig=...: no
// Authorization, the signature is the credential.
func (h *handlers) download(c echo.Context) error {
	r := c.Request()
	q := r.URL.Query()
	now := h.Now()
	if err := h.Signer.Verify(r.URL.Path, q.Get("expires"), q.Get("sig"), now); err != nil {
		return err
	}
	key := strings.TrimPrefix(r.URL.Path, FilesPrefix)
	obj, info, err := h.Blobs.Open(r.Context(), key)
	if err != nil {
		return err
	}
	defer obj.Close()

	hdr := c.Response().Header()
	hdr.Set(echo.HeaderContentType, blob.ContentType(key))
	hdr.Set("ETag", etag(key, info.Size, info.ModTime.UnixNano()))
	if exp, err := strconv.ParseInt(q.Get("expires"), 10, 64); err == nil {
		hdr.Set("Cache-Control", "private, max-age="+strconv.FormatInt(max(exp-now.Unix(), 0), 10)+", immutable")
	}
	hdr.Set("X-Content-Type-Options", "nosniff")
	// ServeContent answers Range, If-None-Match and HEAD, and sets
	// Content-Length. Its own error replies (416 for a range past the end)
	// are turned into the JSON envelope.
	http.ServeContent(&envelopeErrors{ResponseWriter: c.Response(), head: r.Method == http.MethodHead}, r, path.Base(key), info.ModTime, obj)
	return nil
}

// envelopeErrors replaces the plain-text body of an error status written by
// net/http helpers with the JSON envelope.
type envelopeErrors struct {
	http.ResponseWriter
	head    bool
	swallow bool
}

func (w *envelopeErrors) WriteHeader(status int) {
	if status < 400 {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.swallow = true
	hdr := w.Header()
	hdr.Del("Content-Length")
	hdr.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	body, _ := json.Marshal(envelope{Code: status, Msg: strings.ToLower(http.StatusText(status)), Data: nil})
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.ResponseWriter.WriteHeader(status)
	if !w.head {
		_, _ = w.ResponseWriter.Write(body)
	}
}

func (w *envelopeErrors) Write(p []byte) (int, error) {
	if w.swallow {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// etag is the content hash result keys are named by (blob.ResultKey), else
// a size-and-time tag.
func etag(key string, size, mtime int64) string {
	if sum, ok := blob.ContentHash(key); ok {
		return `"` + sum + `"`
	}
	return `"` + strconv.FormatInt(size, 16) + "-" + strconv.FormatInt(mtime, 16) + `"`
}
