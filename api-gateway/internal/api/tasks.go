package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/metrics"
	"github.com/easelhq/easel/api-gateway/internal/taskid"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
	"github.com/easelhq/easel/pkg/tracing"
)

type createData struct {
	TaskID string `json:"task_id"`
	// Task is the record when the create waited (Prefer: wait=N).
	Task *taskview.Record `json:"task,omitempty"`
}

// Create handles POST /v1/task/create, and counts it: by model (unknown
// until the body is read) and outcome, with the credits it debited. With
// Prefer: wait=N it then holds the answer until the task ends or N
// seconds pass (waitEnd), and answers with the record too.
func (h *Handlers) Create(c echo.Context) error {
	dry, err := dryRunParam(c.QueryParam("dry_run"))
	if err != nil {
		return err
	}
	if dry {
		return h.quote(c)
	}
	pref, err := preferWait(c.Request().Header.Values(HeaderPrefer))
	if err != nil {
		return err
	}
	model := metrics.UnknownModel
	created, err := h.createTask(c, &model)
	outcome := web.CreateOutcome(err)
	switch {
	case err == nil && created.Replayed:
		outcome = metrics.Replayed
	case err == nil:
		h.s.Metrics.Debited(model, created.Price)
	case errors.As(err, new(*apperr.InflightLimitError)):
		h.s.Metrics.RateLimited(metrics.LimitInflight)
	}
	h.s.Metrics.Create(model, outcome)
	if err != nil {
		return err
	}
	if created.Replayed {
		c.Response().Header().Set(HeaderIdempotentReplayed, "true")
	}
	data := createData{TaskID: created.ID}
	if pref.set {
		// The task stands: a read that fails now must not turn its create
		// into an error, so the answer then is the task id alone.
		t, pos, err := h.waitEnd(c, web.AccountOf(c).ID, created.ID, pref.wait)
		switch {
		case err == nil:
			rec := h.record(t, pos)
			data.Task = &rec
			c.Response().Header().Set(HeaderPreferenceApplied, "wait="+strconv.Itoa(int(pref.wait/time.Second)))
		case web.BaseContext(c).Err() != nil:
			return nil // the client went away
		default:
			logging.From(c.Request().Context()).Warn("the created task could not be read for Prefer: wait", zap.Error(err))
		}
		c.Response().Header().Set("Cache-Control", "no-store")
	}
	return c.JSON(http.StatusOK, web.Envelope{Code: http.StatusOK, Msg: "success", Data: data})
}

// createTask decodes a create and makes the task; *model is set once the
// body names one.
func (h *Handlers) createTask(c echo.Context, model *string) (task.Created, error) {
	r := c.Request()
	body, err := web.JSONBody(c)
	if err != nil {
		return task.Created{}, err
	}
	idem, err := idempotency(r.Header.Values(HeaderIdempotencyKey), body)
	if err != nil {
		return task.Created{}, err
	}
	by, req, err := h.admit(c, body)
	if err != nil {
		return task.Created{}, err
	}
	*model = req.Model.ID
	return h.Tasks.Create(r.Context(), by, req, idem)
}

// admit decodes a create's body and checks the caller's key may make it
// (its models, its networks): the caller, charged as its key says, and the
// task's input.
func (h *Handlers) admit(c echo.Context, body []byte) (task.Caller, task.Input, error) {
	req, err := h.Decoder.Decode(body)
	if err != nil {
		return task.Caller{}, task.Input{}, err
	}
	acct := web.AccountOf(c)
	by := task.Caller{AccountID: acct.ID}
	if k := acct.Via; k != nil {
		if err := k.Admit(account.KeyUse{Model: &req.Model}); err != nil {
			return task.Caller{}, task.Input{}, err
		}
		by.KeyHash, by.SpendLimit = web.BucketOf(c), k.SpendLimit
	}
	return by, req, nil
}

type quoteData struct {
	Price   int64 `json:"price"`
	Balance int64 `json:"balance"`
	Allowed bool  `json:"allowed"`
}

// quote answers POST /v1/task/create?dry_run=true: the create checked and
// priced as it would be made (its body, the key's limits, the account's
// rules and balance), nothing created or charged. A create that would be
// refused is refused the same way.
func (h *Handlers) quote(c echo.Context) error {
	body, err := web.JSONBody(c)
	if err != nil {
		return err
	}
	by, req, err := h.admit(c, body)
	if err != nil {
		return err
	}
	q, err := h.Tasks.Quote(c.Request().Context(), by, req)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, web.Envelope{Code: http.StatusOK, Msg: "success", Data: quoteData{Price: q.Price, Balance: q.Balance, Allowed: true}})
}

// dryRunParam reads create's dry_run parameter: true or 1 for a quote;
// false, 0 or absent for a create.
func dryRunParam(s string) (bool, error) {
	switch s {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, apperr.New(apperr.Invalid, "dry_run must be true or false")
}

// Idempotent creates: a client that sends the same Idempotency-Key again
// (a retry after a timeout) gets the first create's answer, with
// Idempotent-Replayed: true, instead of a second task and charge.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	maxIdempotencyKey        = 255
)

// A create may wait for its task (RFC 7240): Prefer: wait=N, N whole
// seconds up to MaxWait; the answer says it waited with
// Preference-Applied.
const (
	HeaderPrefer            = "Prefer"
	HeaderPreferenceApplied = "Preference-Applied"
)

// preference is what a create's Prefer headers ask.
type preference struct {
	set  bool // a wait preference was given (wait=0 included)
	wait time.Duration
}

// preferWait reads the wait preference of Prefer headers (RFC 7240: a
// comma-separated list of preferences, each token[=value] with optional
// ";" parameters; names case-insensitive, values possibly quoted).
// Preferences other than wait are ignored, as the RFC asks; a wait that is
// not whole seconds from 0 to MaxWait, or given twice, is refused.
func preferWait(values []string) (preference, error) {
	var p preference
	bad := apperr.Errorf(apperr.Invalid, "Prefer: wait must be a whole number of seconds from 0 to %d", int(MaxWait/time.Second))
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			pref, _, _ = strings.Cut(pref, ";")
			name, value, hasValue := strings.Cut(pref, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			if p.set {
				return preference{}, apperr.New(apperr.Invalid, "Prefer: give wait once")
			}
			value = strings.TrimSpace(value)
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			if !hasValue || value == "" || len(value) > 3 || strings.TrimLeft(value, "0123456789") != "" {
				return preference{}, bad
			}
			n, _ := strconv.Atoi(value)
			if time.Duration(n)*time.Second > MaxWait {
				return preference{}, bad
			}
			p = preference{set: true, wait: time.Duration(n) * time.Second}
		}
	}
	return p, nil
}

// idempotency reads an Idempotency-Key header ("" for none): 1 to 255
// printable ASCII characters. The body is compared by its SHA-256.
func idempotency(values []string, body []byte) (task.Idempotency, error) {
	switch len(values) {
	case 0:
		return task.Idempotency{}, nil
	case 1:
	default:
		return task.Idempotency{}, apperr.New(apperr.Invalid, "send one Idempotency-Key header")
	}
	key := values[0]
	if key == "" {
		return task.Idempotency{}, apperr.New(apperr.Invalid, "Idempotency-Key is empty: 1 to 255 printable characters")
	}
	if len(key) > maxIdempotencyKey {
		return task.Idempotency{}, apperr.Errorf(apperr.Invalid, "Idempotency-Key is %d characters long: at most %d", len(key), maxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return task.Idempotency{}, apperr.New(apperr.Invalid, "Idempotency-Key must be printable ASCII characters")
		}
	}
	sum := sha256.Sum256(body)
	return task.Idempotency{Key: key, BodyHash: hex.EncodeToString(sum[:])}, nil
}

// Query handles GET /v1/task/query, and with wait=N waits for a change
// (waitQuery).
func (h *Handlers) Query(c echo.Context) error {
	id, err := taskIDParam(c)
	if err != nil {
		return err
	}
	wait, err := waitParam(c.QueryParam("wait"))
	if err != nil {
		return err
	}
	if wait > 0 && c.Request().Method != http.MethodHead { // HEAD: the task's headers now
		return h.waitQuery(c, web.AccountOf(c).ID, id, wait)
	}
	t, pos, err := h.Tasks.GetPositioned(c.Request().Context(), web.AccountOf(c).ID, id)
	if err != nil {
		return err
	}
	return h.answerTask(c, t, pos)
}

// taskIDParam reads the task_id parameter of a GET: missing is 400; one
// that no task could have is 404, as an unknown task is.
func taskIDParam(c echo.Context) (string, error) {
	id := c.QueryParam("task_id")
	if id == "" {
		return "", apperr.Errorf(apperr.Invalid, "task_id is required: GET %s?task_id=<task id>", c.Path())
	}
	if !taskid.Valid(id) {
		return "", apperr.Errorf(apperr.NotFound, "task %s not found", web.ClipID(id))
	}
	if span := trace.SpanFromContext(c.Request().Context()); span.IsRecording() {
		span.SetAttributes(tracing.AttrTaskID.String(id))
	}
	return id, nil
}

type cancelData struct {
	TaskID          string      `json:"task_id"`
	Status          task.Status `json:"status"`
	Refunded        bool        `json:"refunded"`
	CreditsRefunded int64       `json:"credits_refunded"`
}

// Cancel handles POST /v1/task/cancel {"task_id": ...}.
func (h *Handlers) Cancel(c echo.Context) error {
	body, err := web.JSONBody(c)
	if err != nil {
		return err
	}
	var req struct {
		TaskID *string `json:"task_id"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return apperr.New(apperr.Invalid, `the body must be a JSON object: {"task_id": "<task id>"}`)
	}
	if req.TaskID == nil || *req.TaskID == "" {
		return apperr.New(apperr.Invalid, `task_id is required: {"task_id": "<task id>"}`)
	}
	id := *req.TaskID
	if !taskid.Valid(id) {
		return apperr.Errorf(apperr.NotFound, "task %s not found", web.ClipID(id))
	}
	res, err := h.Tasks.Cancel(c.Request().Context(), web.AccountOf(c).ID, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, web.Envelope{Code: http.StatusOK, Msg: "success", Data: cancelData{
		TaskID: id, Status: task.Canceled, Refunded: res.Refunded > 0, CreditsRefunded: res.Refunded,
	}})
}

// Listing limits.
const (
	listDefault = 20
	listMax     = 100
)

type listData struct {
	Tasks      []taskview.Record `json:"tasks"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

// List handles GET /v1/task/list?status=&model=&limit=&cursor=.
func (h *Handlers) List(c echo.Context) error {
	f := task.Filter{Limit: listDefault, Cursor: c.QueryParam("cursor")}
	if s := c.QueryParam("status"); s != "" {
		if !slices.Contains(task.Statuses, task.Status(s)) {
			return apperr.Errorf(apperr.Invalid, "status must be one of %s", joinStatuses())
		}
		f.Status = task.Status(s)
	}
	if m := c.QueryParam("model"); m != "" {
		if _, ok := h.Decoder.Catalog.Lookup(m); !ok {
			return apperr.Errorf(apperr.Invalid, "model %s is not a model of this service", web.ClipID(m))
		}
		f.Model = m
	}
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > listMax {
			return apperr.Errorf(apperr.Invalid, "limit must be a whole number from 1 to %d", listMax)
		}
		f.Limit = n
	}
	ctx := c.Request().Context()
	ts, next, err := h.Tasks.List(ctx, web.AccountOf(c).ID, f)
	if err != nil {
		return err
	}
	out := listData{Tasks: make([]taskview.Record, len(ts)), NextCursor: next}
	for i, t := range ts {
		out.Tasks[i] = h.view(t)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, out)
}

func joinStatuses() string {
	s := make([]string, len(task.Statuses))
	for i, st := range task.Statuses {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

func (h *Handlers) view(t *task.Task) taskview.Record { return taskview.New(t, h.Signer) }

// download handles GET and HEAD /v1/files/<key>?expires=...&sig=...: no
// Authorization, the signature is the credential.
//
// The signature covers the URL as signed, byte for byte: the path as sent
// (escaped: a %2F or any other escape spells another path, though r.URL.Path
// decodes it to the same one) and the expires and sig parameters as sent,
// each once and unescaped. Every other spelling of a result's URL is 403.
func (h *Handlers) download(c echo.Context) error {
	r := c.Request()
	now := h.s.Now()
	p := r.URL.EscapedPath()
	expires, sig := signedParams(r.URL.RawQuery)
	if err := h.Signer.Verify(p, expires, sig, now); err != nil {
		return err
	}
	// Verified, p is a path the gateway signed: FilesPrefix and a key, no
	// escapes (keys need none).
	key := strings.TrimPrefix(p, FilesPrefix)
	if h.Redirect != nil {
		return h.redirect(c, key, expires, now)
	}
	obj, info, err := h.Blobs.Open(r.Context(), key)
	if err != nil {
		return err
	}
	defer obj.Close()

	hdr := c.Response().Header()
	hdr.Set(echo.HeaderContentType, blob.ContentType(key))
	hdr.Set("ETag", etag(key, info.Size, info.ModTime.UnixNano()))
	if exp, err := strconv.ParseInt(expires, 10, 64); err == nil {
		hdr.Set("Cache-Control", "private, max-age="+strconv.FormatInt(max(exp-now.Unix(), 0), 10)+", immutable")
	}
	hdr.Set("X-Content-Type-Options", "nosniff")
	if rh := r.Header.Get("Range"); rh != "" {
		if lim := limitRange(rh, info.Size); lim != rh {
			r = r.Clone(r.Context())
			if lim == "" {
				r.Header.Del("Range")
			} else {
				r.Header.Set("Range", lim)
			}
		}
	}
	// ServeContent answers Range (as limitRange left it), the conditional
	// headers and HEAD, and sets Content-Length. Its own error replies (416
	// for a range past the end) are turned into the JSON envelope.
	http.ServeContent(&envelopeErrors{ResponseWriter: c.Response(), raw: c.Response().Writer, head: r.Method == http.MethodHead}, r, path.Base(key), info.ModTime, obj)
	return nil
}

// signedParams returns the raw values of the expires and sig parameters of
// a raw query, unescaped: what a signed URL holds needs no escaping, so an
// escaped value is not the one signed. A parameter missing or given more
// than once is "".
func signedParams(rawQuery string) (expires, sig string) {
	var nExp, nSig int
	for part := range strings.SplitSeq(rawQuery, "&") {
		name, value, _ := strings.Cut(part, "=")
		switch name {
		case "expires":
			expires = value
			nExp++
		case "sig":
			sig = value
			nSig++
		}
	}
	if nExp != 1 {
		expires = ""
	}
	if nSig != 1 {
		sig = ""
	}
	return expires, sig
}

// redirect answers a verified download with a 302 to the store's own URL of
// the blob, valid until the result URL expires: Range, conditional requests
// and HEAD are then the store's to answer, and so is a blob gone missing.
func (h *Handlers) redirect(c echo.Context, key, expires string, now time.Time) error {
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil { // Verify accepted it, so it is a number
		return apperr.Wrap(err, apperr.Internal, "internal error")
	}
	ttl := time.Unix(exp, 0).Sub(now)
	u, err := h.Redirect.Presign(c.Request().Context(), key, ttl)
	if err != nil {
		return err
	}
	hdr := c.Response().Header()
	// The presigned URL is good for ttl: a cache may keep the redirect no
	// longer than that.
	hdr.Set("Cache-Control", "private, max-age="+strconv.FormatInt(max(int64(ttl/time.Second), 0), 10))
	return c.Redirect(http.StatusFound, u)
}

// maxRanges is the most byte ranges a download serves. A client wants an
// image whole, or resumes it with one range; a few ranges cover the rare
// client that asks for several parts. Each range costs the server a seek and
// a multipart header, so a Range header naming thousands of tiny ranges turns
// a small request into a reply many times the file's size; with at most 8 the
// multipart overhead stays under a kilobyte.
const maxRanges = 8

// limitRange returns the Range header ServeContent is to see instead of h,
// for a file of size bytes ("" for none):
//
//   - more than maxRanges ranges: none, so the whole file is sent with 200.
//     RFC 9110 §14.2 lets a server ignore Range (and names many small ranges
//     as a reason to); coalescing would not help, since ranges that do not
//     touch stay apart, and ignoring caps the reply at a plain GET's.
//   - suffix ranges of length 0 ("-0"), which select nothing (RFC 9110
//     §14.1.1), are dropped, where net/http would send them as a malformed
//     part "bytes <size>-<size-1>/<size>". When nothing else is left, the
//     range set is unsatisfiable: it becomes one that starts at the end of
//     the file, for which ServeContent answers 416 with Content-Range
//     "bytes */<size>". Leaving that to ServeContent keeps the precedence
//     of its conditional checks (If-None-Match's 304, If-Range's 200).
//
// Anything else, including a malformed header, is ServeContent's to answer.
func limitRange(h string, size int64) string {
	const unit = "bytes="
	if !strings.HasPrefix(h, unit) {
		return h
	}
	set := h[len(unit):]
	n, zero := 0, 0
	for spec := range strings.SplitSeq(set, ",") {
		spec = textproto.TrimString(spec)
		if spec == "" {
			continue // as net/http does
		}
		if n++; n > maxRanges {
			return ""
		}
		if zeroSuffix(spec) {
			zero++
		}
	}
	switch zero {
	case 0:
		return h
	case n:
		return unit + strconv.FormatInt(size, 10) + "-"
	}
	kept := make([]string, 0, n-zero)
	for spec := range strings.SplitSeq(set, ",") {
		if spec = textproto.TrimString(spec); spec != "" && !zeroSuffix(spec) {
			kept = append(kept, spec)
		}
	}
	return unit + strings.Join(kept, ",")
}

// zeroSuffix reports whether a range-spec is a suffix range of length 0,
// read as net/http reads one.
func zeroSuffix(spec string) bool {
	start, end, ok := strings.Cut(spec, "-")
	if !ok || textproto.TrimString(start) != "" {
		return false
	}
	end = textproto.TrimString(end)
	if end == "" || end[0] == '-' {
		return false
	}
	n, err := strconv.ParseInt(end, 10, 64)
	return err == nil && n == 0
}

// envelopeErrors replaces the plain-text body of an error status written by
// net/http helpers with the JSON envelope.
type envelopeErrors struct {
	http.ResponseWriter
	// raw is the server's own writer under Echo's: the body goes to its
	// ReadFrom, which sends a file with sendfile.
	raw     http.ResponseWriter
	head    bool
	swallow bool
}

// ReadFrom copies a body (ServeContent's, after its headers) to the
// server's writer as it is: a file goes out with sendfile rather than
// through the process.
func (w *envelopeErrors) ReadFrom(src io.Reader) (int64, error) {
	if w.swallow {
		return io.Copy(io.Discard, src)
	}
	if rf, ok := w.raw.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{w.ResponseWriter}, src)
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
	body, _ := json.Marshal(web.Envelope{Code: status, Msg: strings.ToLower(http.StatusText(status)), Data: nil})
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
