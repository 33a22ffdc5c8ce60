package easel

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	mrand "math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Version is the SDK's version, sent in its User-Agent.
const Version = "0.1.0"

// Defaults of the Options.
const (
	DefaultRetries        = 4
	DefaultMaxRetryWait   = 30 * time.Second
	DefaultRequestTimeout = time.Minute
)

// Client calls the Easel API. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	key       string
	http      *http.Client
	userAgent string
	retries   int
	maxWait   time.Duration
	timeout   time.Duration

	// longPoll is whether the server takes GET /v1/task/query?wait=N:
	// unknown, yes, or no (an older server answered it 400).
	longPoll atomic.Int32

	// sleep waits d or until ctx ends; now is the clock Wait times its
	// requests with. Tests replace them.
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

const (
	longPollUnknown int32 = iota
	longPollYes
	longPollNo
)

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a new http.Client with no
// overall timeout; each call has its own, see WithRequestTimeout). A
// client with a Timeout shorter than a long-poll cuts Wait's requests.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetries sets how many times a call answered 429 or 503 (or, when it
// is safe to repeat, cut by a network error) is tried again (default 4;
// 0: never).
func WithRetries(n int) Option { return func(c *Client) { c.retries = max(n, 0) } }

// WithMaxRetryWait sets the longest Retry-After the client waits before a
// retry (default 30 s); a longer one returns the error at once, with
// APIError.RetryAfter set.
func WithMaxRetryWait(d time.Duration) Option { return func(c *Client) { c.maxWait = d } }

// WithRequestTimeout bounds each HTTP request (default 1 minute; a
// long-poll gets its wait on top). The context bounds the whole call.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithUserAgent puts a product in front of the SDK's own User-Agent.
func WithUserAgent(product string) Option {
	return func(c *Client) { c.userAgent = product + " " + c.userAgent }
}

// New returns a client of the API at baseURL (e.g. http://127.0.0.1:8080,
// what `make run` prints) using an API key (esk_...).
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("easel: the API URL %q is not an absolute http or https URL", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("easel: no API key")
	}
	c := &Client{
		base:      u,
		key:       apiKey,
		http:      &http.Client{},
		userAgent: "easel-go/" + Version,
		retries:   DefaultRetries,
		maxWait:   DefaultMaxRetryWait,
		timeout:   DefaultRequestTimeout,
		sleep:     sleepCtx,
		now:       time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// BaseURL is the API's URL the client was made with.
func (c *Client) BaseURL() string { return c.base.String() }

// Create creates a task and returns its id. Creating costs credits; a
// refused create (400, 402, 429, ...) costs none.
func (c *Client) Create(ctx context.Context, r CreateRequest) (string, error) {
	id, _, err := c.create(ctx, r, -1)
	return id, err
}

// CreateAndWait creates a task and has the server hold the answer until
// the task ends or wait passes (Prefer: wait=N, whole seconds from 0 to
// 60), and returns the task's record then: final, or still pending or
// processing (follow it with Wait). From a server that does not wait on a
// create the record is read once after the create.
func (c *Client) CreateAndWait(ctx context.Context, r CreateRequest, wait time.Duration) (*Task, error) {
	wait = min(max(wait, 0), MaxCreateWait)
	id, t, err := c.create(ctx, r, wait)
	if err != nil || t != nil {
		return t, err
	}
	return c.Get(ctx, id)
}

// MaxCreateWait is the longest a create may wait for its task.
const MaxCreateWait = 60 * time.Second

// create creates a task; with wait >= 0 it asks the server to wait for
// the task's end and returns the record it answers with (nil from a
// server that does not).
func (c *Client) create(ctx context.Context, r CreateRequest, wait time.Duration) (string, *Task, error) {
	body, err := json.Marshal(r.body())
	if err != nil {
		return "", nil, err
	}
	key := r.IdempotencyKey
	if key == "" {
		key, err = newIdempotencyKey()
		if err != nil {
			return "", nil, err
		}
	}
	var out struct {
		Data struct {
			TaskID string `json:"task_id"`
			Task   *Task  `json:"task"`
		} `json:"data"`
	}
	k := call{
		method:    http.MethodPost,
		path:      "/v1/task/create",
		body:      body,
		header:    http.Header{"Idempotency-Key": {key}},
		replay:    true, // the key makes a repeat answer the first one
		conflicts: true, // 409: the first attempt is still being created
	}
	if wait >= 0 {
		secs := int(wait / time.Second)
		k.header.Set("Prefer", "wait="+strconv.Itoa(secs))
		if c.timeout > 0 {
			k.timeout = c.timeout + time.Duration(secs)*time.Second
		}
	}
	if err := c.call(ctx, k, &out); err != nil {
		return "", nil, err
	}
	if out.Data.TaskID == "" {
		return "", nil, errors.New("easel: the create answered no task_id")
	}
	return out.Data.TaskID, out.Data.Task, nil
}

// MaxUploadBytes is the largest image Upload sends.
const MaxUploadBytes = 20 << 20

// Upload stores an image for CreateRequest.ImageURLs (POST /v1/uploads)
// and returns its URL, valid 24 hours. The image is a PNG, JPEG, WebP or
// GIF of at most MaxUploadBytes (the server reads its type from its bytes;
// else ErrUnsupportedMediaType or ErrTooLarge, see APIError); name is the
// file name sent with it, for the server's logs only. Uploads count
// against the account's bytes of the day (429, not retried past the
// client's longest wait). It is not repeated after a network error: a
// repeat would count twice.
func (c *Client) Upload(ctx context.Context, name string, image []byte) (*Upload, error) {
	if len(image) > MaxUploadBytes {
		return nil, fmt.Errorf("easel: the image is %d bytes; the largest upload is %d MB", len(image), MaxUploadBytes>>20)
	}
	if name == "" {
		name = "image"
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", filepath.Base(name))
	if err != nil {
		return nil, err
	}
	if _, err := fw.Write(image); err != nil {
		return nil, err
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	var out struct {
		Data Upload `json:"data"`
	}
	k := call{method: http.MethodPost, path: "/v1/uploads", body: body.Bytes(), contentType: mw.FormDataContentType()}
	if err := c.call(ctx, k, &out); err != nil {
		return nil, err
	}
	if out.Data.URL == "" {
		return nil, errors.New("easel: the upload answered no url")
	}
	return &out.Data, nil
}

// Get returns a task's current record (GET /v1/task/query).
func (c *Client) Get(ctx context.Context, taskID string) (*Task, error) {
	var t Task
	err := c.call(ctx, call{method: http.MethodGet, path: "/v1/task/query", query: url.Values{"task_id": {taskID}}, replay: true}, &t)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Cancel cancels a task that is pending or processing. A task already
// final is ErrConflict.
func (c *Client) Cancel(ctx context.Context, taskID string) (*CancelResult, error) {
	body, err := json.Marshal(map[string]string{"task_id": taskID})
	if err != nil {
		return nil, err
	}
	var out struct {
		Data CancelResult `json:"data"`
	}
	if err := c.call(ctx, call{method: http.MethodPost, path: "/v1/task/cancel", body: body}, &out); err != nil {
		return nil, err
	}
	return &out.Data, nil
}

// List returns one page of the account's tasks of the last 24 hours,
// newest first.
func (c *Client) List(ctx context.Context, o ListOptions) (*TaskPage, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", string(o.Status))
	}
	if o.Model != "" {
		q.Set("model", o.Model)
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var p TaskPage
	if err := c.call(ctx, call{method: http.MethodGet, path: "/v1/task/list", query: q, replay: true}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Tasks lists every task matching o, page after page; o.Limit is the size
// of a page. It stops at the first error, which it yields.
func (c *Client) Tasks(ctx context.Context, o ListOptions) iter.Seq2[*Task, error] {
	return func(yield func(*Task, error) bool) {
		for {
			p, err := c.List(ctx, o)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range p.Tasks {
				if !yield(&p.Tasks[i], nil) {
					return
				}
			}
			if p.NextCursor == "" {
				return
			}
			o.Cursor = p.NextCursor
		}
	}
}

// Download writes the image at a result URL (Task.Results) to w and
// returns the bytes written. Result URLs are signed: no API key is sent.
// A URL past its expiry is ErrGone.
func (c *Client) Download(ctx context.Context, resultURL string, w io.Writer) (int64, error) {
	u, err := c.base.Parse(resultURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return 0, fmt.Errorf("easel: %q is not an http or https URL", resultURL)
	}
	var n int64
	err = c.call(ctx, call{method: http.MethodGet, url: u, anonymous: true, replay: true, timeout: -1, stream: func(r io.Reader) error {
		var cerr error
		n, cerr = io.Copy(w, r)
		return cerr
	}}, nil)
	return n, err
}

// call is one API call, tried again on 429 and 503.
type call struct {
	method string
	path   string // under the base URL
	url    *url.URL
	query  url.Values
	body   []byte
	// contentType is the body's type (default application/json).
	contentType string
	header      http.Header
	// anonymous: no Authorization (signed result URLs go to no one else
	// with the key).
	anonymous bool
	// replay: the request may be repeated after a network error (a read,
	// or a create with its Idempotency-Key).
	replay bool
	// conflicts: a 409 on a repeat is tried again (the first attempt is
	// still under way).
	conflicts bool
	// timeout, if set, replaces the client's request timeout; negative:
	// none but the context's.
	timeout time.Duration
	// stream, if set, reads a 2xx body instead of decoding JSON.
	stream func(io.Reader) error
}

// call runs a call, decoding a 2xx JSON body into out.
func (c *Client) call(ctx context.Context, k call, out any) error {
	u := k.url
	if u == nil {
		u = new(url.URL)
		*u = *c.base
		u.Path = strings.TrimRight(u.Path, "/") + k.path
		u.RawPath = ""
		if len(k.query) > 0 {
			u.RawQuery = k.query.Encode()
		}
	}
	for attempt := 0; ; attempt++ {
		retry, wait, err := c.attempt(ctx, k, u, out, attempt)
		if !retry || attempt >= c.retries {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if wait == 0 {
			wait = backoff(attempt)
		}
		if wait > c.maxWait {
			return err
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (not retried: %w)", err, serr)
		}
	}
}

// attempt sends a call once. retry says whether it may be tried again,
// wait how long the server asked for (0: not said).
func (c *Client) attempt(ctx context.Context, k call, u *url.URL, out any, attempt int) (retry bool, wait time.Duration, err error) {
	timeout := c.timeout
	if k.timeout != 0 {
		timeout = k.timeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var body io.Reader
	if k.body != nil {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u.String(), body)
	if err != nil {
		return false, 0, err
	}
	for name, v := range k.header {
		req.Header[name] = v
	}
	req.Header.Set("User-Agent", c.userAgent)
	if k.body != nil {
		ct := k.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if !k.anonymous {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if k.stream == nil {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return k.replay, 0, fmt.Errorf("easel: %s %s: %w", k.method, u.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		e := apiError(resp, b)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			return true, e.RetryAfter, e
		case resp.StatusCode == http.StatusConflict && k.conflicts && attempt > 0:
			return true, e.RetryAfter, e
		case resp.StatusCode == http.StatusGatewayTimeout && k.conflicts && e.TaskID != "":
			// A create whose outcome the server does not know yet: after
			// Retry-After it is settled, and the same Idempotency-Key
			// answers the task it made, or makes it.
			return true, e.RetryAfter, e
		}
		return false, 0, e
	}
	if k.stream != nil {
		if err := k.stream(resp.Body); err != nil {
			return false, 0, fmt.Errorf("easel: %s %s: %w", k.method, u.Path, err)
		}
		return false, 0, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return k.replay, 0, fmt.Errorf("easel: %s %s: %w", k.method, u.Path, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return false, 0, fmt.Errorf("easel: %s %s: the answer is not the expected JSON: %w", k.method, u.Path, err)
		}
	}
	return false, 0, nil
}

// backoff is the wait before retry n+1 when the server named none:
// 500 ms doubling to at most 8 s, with a quarter of jitter.
func backoff(n int) time.Duration {
	d := 500 * time.Millisecond << min(n, 4)
	return d - time.Duration(mrand.Int64N(int64(d/4)))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func newIdempotencyKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "easel-go-" + hex.EncodeToString(b[:]), nil
}
