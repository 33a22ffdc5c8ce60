package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// client is what a user of the API does with curl. Every request it sends
// to a gateway, and every response it receives, redirects included, is
// checked against the OpenAPI document the gateway serves at
// /openapi.json (see contractCheck): a mismatch fails the test.
type client struct {
	t    testing.TB
	base string
	key  string
	http *http.Client
	// invalidOnPurpose (raw()): the test sends its requests invalid on
	// purpose; only the responses are checked.
	invalidOnPurpose bool
}

type taskRecord struct {
	TaskID       string   `json:"task_id"`
	TaskType     string   `json:"task_type"`
	Model        string   `json:"model"`
	Status       string   `json:"status"`
	Progress     int      `json:"progress"`
	CreateTime   int64    `json:"create_time"`
	StartTime    int64    `json:"start_time"`
	CompleteTime int64    `json:"complete_time"`
	Results      []string `json:"results"`
	Error        *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Price int64        `json:"price"`
	Input *recordInput `json:"input"`
}

// recordInput is the input a task record shows.
type recordInput struct {
	Prompt        string   `json:"prompt"`
	AspectRatio   string   `json:"aspect_ratio"`
	ImageSize     string   `json:"image_size"`
	ImageURLs     []string `json:"image_urls"`
	OutputFormat  string   `json:"output_format"`
	OutputQuality int      `json:"output_quality"`
	NumImages     int      `json:"num_images"`
}

type envelope struct {
	Code int             `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
}

func newClient(t testing.TB, base, key string) *client {
	if base != "" {
		registerGateway(base)
	}
	c := &client{t: t, base: base, key: key}
	c.http = &http.Client{Timeout: 30 * time.Second, Transport: contractCheck{c: c, next: http.DefaultTransport}}
	return c
}

// raw returns a client for requests a test sends invalid on purpose (bad
// JSON, wrong types, missing parameters): their responses are checked
// against the document, the requests themselves are not. Without it an
// invalid request is still accepted when the gateway answers it with a 4xx
// the document declares for the operation, and logged.
func (c *client) raw() *client {
	cp := *c
	cp.invalidOnPurpose = true
	cp.http = &http.Client{Timeout: c.http.Timeout, Transport: contractCheck{c: &cp, next: http.DefaultTransport}}
	return &cp
}

func (c *client) do(method, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// create returns the task id of a new task, failing the test otherwise.
func (c *client) create(body string) string {
	c.t.Helper()
	status, _, b := c.do("POST", "/v1/task/create", body, nil)
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil || status != 200 || env.Code != 200 || env.Msg != "success" {
		c.t.Fatalf("create: %d %s", status, b)
	}
	var data struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(env.Data, &data)
	return data.TaskID
}

func (c *client) query(id string) (int, taskRecord, []byte) {
	c.t.Helper()
	status, _, b := c.do("GET", "/v1/task/query?task_id="+url.QueryEscape(id), "", nil)
	var rec taskRecord
	if status == 200 {
		if err := json.Unmarshal(b, &rec); err != nil {
			c.t.Fatalf("query body %s: %v", b, err)
		}
	}
	return status, rec, b
}

// poll queries until the task ends, checking on the way that progress never
// goes back, and returns the final record and the statuses and progress
// values seen.
func (c *client) poll(id string, timeout time.Duration) (taskRecord, []string, []int) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var statuses []string
	var progress []int
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		status, rec, b := c.query(id)
		if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) && time.Now().Before(deadline) {
			// Tests polling side by side with one key can pass its
			// query rate, and a query whose Redis call outlasts
			// EASEL_REDIS_TIMEOUT on a loaded machine is answered 503:
			// a client waits and asks again, as docs/api.md says to (and
			// the SDK does).
			continue
		}
		if status != 200 {
			c.t.Fatalf("query %s: %d %s", id, status, b)
		}
		if len(progress) > 0 && rec.Progress < progress[len(progress)-1] {
			c.t.Fatalf("progress went back: %v then %d", progress, rec.Progress)
		}
		if rec.Progress == 100 && rec.Status != "completed" {
			c.t.Fatalf("progress 100 while %s", rec.Status)
		}
		if rec.Status != "completed" && (rec.CompleteTime != 0 && rec.Status != "failed" && rec.Status != "canceled" || len(rec.Results) != 0) {
			c.t.Fatalf("%s task with complete_time %d and %d results", rec.Status, rec.CompleteTime, len(rec.Results))
		}
		if len(statuses) == 0 || statuses[len(statuses)-1] != rec.Status {
			statuses = append(statuses, rec.Status)
		}
		if len(progress) == 0 || progress[len(progress)-1] != rec.Progress {
			progress = append(progress, rec.Progress)
		}
		if rec.Status == "completed" || rec.Status == "failed" || rec.Status == "canceled" {
			return rec, statuses, progress
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s not done after %v: %+v", id, timeout, rec)
		}
	}
}

// sseEvent is one event of a text/event-stream.
type sseEvent struct {
	Event, ID string
	Data      []byte
}

// stream reads GET /v1/task/stream?task_id= to its end (the server closes
// it after a final record) and returns its events; the stream, each event
// and each record are checked against the document on the way.
func (c *client) stream(id string, timeout time.Duration) (int, []sseEvent, []byte) {
	c.t.Helper()
	cc := *c
	cc.http = &http.Client{Timeout: timeout, Transport: contractCheck{c: &cc, next: http.DefaultTransport}}
	status, hdr, b := cc.do("GET", "/v1/task/stream?task_id="+url.QueryEscape(id), "", nil)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		return status, nil, b
	}
	events, err := parseSSE(b)
	if err != nil {
		c.t.Fatalf("stream: %v", err)
	}
	return status, events, b
}

// download fetches a result URL without credentials and decodes the image.
func (c *client) download(u string) (image.Config, string, []byte) {
	c.t.Helper()
	resp, err := c.http.Get(u)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		c.t.Fatalf("download %s: %d %s", u, resp.StatusCode, b)
	}
	if resp.Header.Get("Content-Length") != fmt.Sprint(len(b)) || resp.Header.Get("ETag") == "" {
		c.t.Errorf("download headers %v", resp.Header)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		c.t.Fatalf("download is not an image: %v", err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "image/"+format {
		c.t.Errorf("Content-Type %s for a %s", ct, format)
	}
	return cfg, format, b
}

func createBody(model, input string) string {
	return `{"model":"` + model + `","task_type":"image","input":` + input + `}`
}

// The contract: the OpenAPI document the gateways serve, fetched from the
// first gateway a client talks to and kept for the whole test process (the
// gateways of one run are one binary).

// gateways are the origins (scheme://host:port) clients were made for:
// only their exchanges are checked, not those with a bucket a download
// redirects to, say.
var gateways sync.Map

func registerGateway(base string) {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		gateways.Store(u.Scheme+"://"+u.Host, true)
	}
}

// apiContract checks exchanges against the document. Validation is
// serialized: the validator's caches are shared.
type apiContract struct {
	mu        sync.Mutex
	v         validator.Validator
	model     *v3.Document
	schemas   schema_validation.SchemaValidator
	errSchema *base.Schema
	record    *base.Schema
}

var contractCache struct {
	sync.Mutex
	c *apiContract
}

// contractOf returns the document's checker, fetching it from origin the
// first time. A gateway that cannot be reached gives nil (the exchange
// itself fails the same way); a document that cannot be read or is not
// valid OpenAPI 3.1 is an error.
func contractOf(origin string) (*apiContract, error) {
	contractCache.Lock()
	defer contractCache.Unlock()
	if contractCache.c != nil {
		return contractCache.c, nil
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(origin + "/openapi.json")
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s/openapi.json: %d %s", origin, resp.StatusCode, b)
	}
	doc, err := libopenapi.NewDocument(b)
	if err != nil {
		return nil, fmt.Errorf("/openapi.json: %w", err)
	}
	if v := doc.GetSpecInfo().VersionNumeric; v != 3.1 {
		return nil, fmt.Errorf("/openapi.json is OpenAPI %v, not 3.1", v)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("/openapi.json: %w", err)
	}
	v, verrs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(verrs) > 0 {
		return nil, fmt.Errorf("/openapi.json: %v", verrs)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("/openapi.json is not a valid OpenAPI 3.1 document: %s", describe(errs))
	}
	c := &apiContract{v: v, model: &m.Model, schemas: schema_validation.NewSchemaValidator(config.WithFormatAssertions())}
	if c.errSchema = componentSchema(&m.Model, "Error"); c.errSchema == nil {
		return nil, fmt.Errorf("/openapi.json has no Error schema")
	}
	if c.record = componentSchema(&m.Model, "TaskRecord"); c.record == nil {
		return nil, fmt.Errorf("/openapi.json has no TaskRecord schema")
	}
	contractCache.c = c
	return c, nil
}

func componentSchema(m *v3.Document, name string) *base.Schema {
	if m.Components == nil || m.Components.Schemas == nil {
		return nil
	}
	if sp := m.Components.Schemas.GetOrZero(name); sp != nil {
		return sp.Schema()
	}
	return nil
}

func describe(errs []*verrors.ValidationError) string {
	var parts []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" && e.Reason != e.Message {
			s += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			s += fmt.Sprintf(" [%s %s: %s]", f.FieldPath, f.KeywordLocation, f.Reason)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// undocumentedPath: the routes the document leaves out on purpose (its
// info.description says so); their exchanges are not checked.
func undocumentedPath(p string) bool {
	return p == "/metrics" || p == "/admin" || strings.HasPrefix(p, "/admin/") || p == "/playground" || strings.HasPrefix(p, "/playground/")
}

// contractCheck is the clients' transport: it sends each request on and
// checks it and its response against the document.
//
//   - A request the document does not accept is still sent, and is
//     accepted only when the gateway refuses it with a 4xx the document
//     declares for the operation (a test of error handling; logged). The
//     client's raw() skips the request's check for tests that send invalid
//     requests on purpose.
//   - A path the document does not have must be a 404, and a method its
//     path does not have a 405, with the Error body.
//   - Every response is checked: status, headers, content type and body
//     (JSON against its schema; a text/event-stream event by event, each
//     task record a TaskRecord and each error an Error).
type contractCheck struct {
	c    *client
	next http.RoundTripper
}

func (cc contractCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	origin := req.URL.Scheme + "://" + req.URL.Host
	if _, ok := gateways.Load(origin); !ok || undocumentedPath(req.URL.Path) {
		return cc.next.RoundTrip(req)
	}
	contract, err := contractOf(origin)
	if err != nil {
		cc.c.t.Errorf("openapi: %v", err)
	}
	if contract == nil {
		return cc.next.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil {
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	sent := req.Clone(req.Context())
	sent.Body = io.NopCloser(bytes.NewReader(reqBody))
	resp, err := cc.next.RoundTrip(sent)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if err != nil {
		return resp, nil // the caller meets the same error reading it
	}
	for _, problem := range contract.check(req, reqBody, resp, respBody, cc.c.invalidOnPurpose) {
		if strings.HasPrefix(problem, "tolerated: ") {
			cc.c.t.Logf("openapi: %s", strings.TrimPrefix(problem, "tolerated: "))
			continue
		}
		cc.c.t.Errorf("openapi: %s %s answered %d: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, problem)
	}
	return resp, nil
}

// check returns what is wrong with an exchange; a note that starts with
// "tolerated: " is a request the document refuses, refused by the gateway
// with a declared 4xx.
func (a *apiContract) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte, raw bool) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	clone := func() *http.Request {
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		return r
	}
	received := *resp
	received.Body = io.NopCloser(bytes.NewReader(respBody))
	received.Request = clone()

	var problems []string
	pathItem, errs, _ := paths.FindPath(clone(), a.model, nil)
	if pathItem == nil || len(errs) > 0 && errs[0].ValidationSubType == helpers.ValidationMissingOperation {
		// Not an operation of the document: the gateway must refuse it as
		// the document says unknown paths and methods are refused.
		want, what := http.StatusNotFound, "a path the document does not have"
		switch {
		case pathItem != nil && req.Method == http.MethodOptions:
			want, what = http.StatusNoContent, "OPTIONS of a path of the document"
		case pathItem != nil:
			want, what = http.StatusMethodNotAllowed, "a method the document does not have for this path"
		}
		if resp.StatusCode != want {
			return []string{fmt.Sprintf("%s; want %d", what, want)}
		}
		if want == http.StatusNoContent {
			if resp.Header.Get("Allow") == "" {
				problems = append(problems, "OPTIONS without Allow")
			}
		} else if req.Method != http.MethodHead {
			problems = append(problems, a.checkError(resp, respBody)...)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			problems = append(problems, "no X-Request-Id")
		}
		return append(problems, fmt.Sprintf("tolerated: %s %s is %s: answered %d as documented", req.Method, req.URL.Path, what, resp.StatusCode))
	}

	if ok, errs := a.v.ValidateHttpResponse(clone(), &received); !ok {
		problems = append(problems, "the response does not match the document: "+describe(errs))
	}
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		problems = append(problems, a.checkStream(respBody)...)
	}
	if raw {
		return problems
	}
	if ok, errs := a.v.ValidateHttpRequest(clone()); !ok {
		why := describe(errs)
		op := helpers.ExtractOperation(req, pathItem)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && op != nil && op.Responses != nil &&
			(op.Responses.Codes.GetOrZero(strconv.Itoa(resp.StatusCode)) != nil || op.Responses.Codes.GetOrZero(fmt.Sprintf("%dXX", resp.StatusCode/100)) != nil) {
			return append(problems, fmt.Sprintf("tolerated: %s %s does not match the document (%s); refused with %d, which the document declares", req.Method, req.URL.RequestURI(), why, resp.StatusCode))
		}
		problems = append(problems, "the request does not match the document, and was not refused with a declared 4xx: "+why)
	}
	return problems
}

func (a *apiContract) checkError(resp *http.Response, body []byte) []string {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return []string{fmt.Sprintf("error with Content-Type %q, not application/json", resp.Header.Get("Content-Type"))}
	}
	if ok, errs := a.schemas.ValidateSchemaBytes(a.errSchema, body); !ok {
		return []string{fmt.Sprintf("error body %s is not an Error: %s", body, describe(errs))}
	}
	return nil
}

// checkStream checks a task stream: events "task" with a TaskRecord and
// increasing ids, and at most one "error" event with an Error, last.
func (a *apiContract) checkStream(body []byte) []string {
	events, err := parseSSE(body)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	last := 0
	for i, ev := range events {
		id, err := strconv.Atoi(ev.ID)
		if err != nil || id <= last {
			problems = append(problems, fmt.Sprintf("event %d: id %q after %d", i, ev.ID, last))
		}
		last = id
		var s *base.Schema
		switch ev.Event {
		case "task":
			s = a.record
		case "error":
			s = a.errSchema
			if i != len(events)-1 {
				problems = append(problems, fmt.Sprintf("event %d: an error event that is not the last", i))
			}
		default:
			problems = append(problems, fmt.Sprintf("event %d: type %q, not task or error", i, ev.Event))
			continue
		}
		if ok, errs := a.schemas.ValidateSchemaBytes(s, ev.Data); !ok {
			problems = append(problems, fmt.Sprintf("event %d (%s) %s: %s", i, ev.Event, ev.Data, describe(errs)))
		}
	}
	if len(events) == 0 {
		problems = append(problems, "a stream without events")
	}
	return problems
}

// checkWebhook checks a webhook delivery that a test's receiver got, from
// the gateway at base's deployment, against the document's webhooks: the
// event its body names, the Standard Webhooks headers and the body.
func checkWebhook(t testing.TB, base string, hdr http.Header, body []byte) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	a, err := contractOf(u.Scheme + "://" + u.Host)
	if err != nil || a == nil {
		t.Errorf("openapi: no document to check a webhook against: %v", err)
		return
	}
	for _, p := range a.checkWebhook(hdr, body) {
		t.Errorf("openapi: webhook %s: %s", body, p)
	}
}

func (a *apiContract) checkWebhook(hdr http.Header, body []byte) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ev struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return []string{"the body is not a JSON object with a type"}
	}
	item := a.model.Webhooks.GetOrZero(ev.Type)
	if item == nil || item.Post == nil {
		return []string{fmt.Sprintf("the document has no webhook %q", ev.Type)}
	}
	op := item.Post
	var problems []string
	for _, p := range op.Parameters {
		if p.In != "header" {
			continue
		}
		v := hdr.Get(p.Name)
		if v == "" {
			if p.Required != nil && *p.Required {
				problems = append(problems, "no "+p.Name+" header")
			}
			continue
		}
		jv, _ := json.Marshal(v)
		if ok, errs := a.schemas.ValidateSchemaBytes(p.Schema.Schema(), jv); !ok {
			problems = append(problems, fmt.Sprintf("header %s: %q: %s", p.Name, v, describe(errs)))
		}
	}
	media, ok := helpers.FindMediaType(op.RequestBody.Content, hdr.Get("Content-Type"))
	if !ok {
		return append(problems, fmt.Sprintf("Content-Type %q is not the document's", hdr.Get("Content-Type")))
	}
	if ok, errs := a.schemas.ValidateSchemaBytes(media.Schema.Schema(), body); !ok {
		problems = append(problems, describe(errs))
	}
	return problems
}

// parseSSE splits a text/event-stream into its events; comment lines
// (": keepalive") are skipped. Each event must have one data line.
func parseSSE(b []byte) ([]sseEvent, error) {
	var events []sseEvent
	var cur sseEvent
	data := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data > 0 || cur.Event != "" || cur.ID != "" {
				if data != 1 {
					return nil, fmt.Errorf("event %d has %d data lines", len(events), data)
				}
				events = append(events, cur)
			}
			cur, data = sseEvent{}, 0
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = []byte(strings.TrimPrefix(line, "data: "))
			data++
		default:
			return nil, fmt.Errorf("stream line %q is not an event field", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if data > 0 || cur.Event != "" {
		return nil, fmt.Errorf("the stream ends inside an event")
	}
	return events, nil
}

// reportRecorder is a testing.TB that keeps what a client reports.
type reportRecorder struct {
	testing.TB
	mu           sync.Mutex
	errors, logs []string
}

func (r *reportRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *reportRecorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// TestContractCheck runs the clients' checks against a server that serves
// the gateway's document and answers as told, right and wrong.
func TestContractCheck(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "api-gateway", "internal", "api", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	const id = "task_lumen_2170455969821192122696478843056611060"
	record := `{"task_id":"` + id + `","task_type":"image","model":"lumen-2.5-flash-image","status":"processing","progress":40,"create_time":1795359098636,"start_time":1795359098700,"price":4,"complete_time":0,"results":[]}`
	final := `{"task_id":"` + id + `","task_type":"image","model":"lumen-2.5-flash-image","status":"canceled","progress":40,"create_time":1795359098636,"start_time":1795359098700,"price":4,"complete_time":1795359099002,"results":[]}`
	var answer struct {
		sync.Mutex
		status int
		ctype  string
		body   string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "test")
		if r.URL.Path == "/openapi.json" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(doc)
			return
		}
		answer.Lock()
		defer answer.Unlock()
		w.Header().Set("Content-Type", answer.ctype)
		if answer.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="easel"`)
		}
		w.WriteHeader(answer.status)
		_, _ = io.WriteString(w, answer.body)
	}))
	defer srv.Close()

	const (
		jsonType = "application/json"
		okError  = `{"code":400,"msg":"task_id is required","data":null}`
	)
	for _, tt := range []struct {
		name, method, path string
		raw                bool
		status             int
		ctype, body        string
		wantError          string // in the reported error; "" for none
		wantLog            string // in the log
	}{
		{name: "a record", method: "GET", path: "/v1/task/query?task_id=" + id, status: 200, ctype: jsonType, body: record},
		{name: "a record without its progress", method: "GET", path: "/v1/task/query?task_id=" + id, status: 200, ctype: jsonType,
			body: strings.Replace(record, `"progress":40,`, "", 1), wantError: "progress"},
		{name: "an undocumented field", method: "GET", path: "/v1/task/query?task_id=" + id, status: 200, ctype: jsonType,
			body: strings.Replace(record, `"progress":40,`, `"progress":40,"extra":1,`, 1), wantError: "extra"},
		{name: "another content type", method: "GET", path: "/v1/task/query?task_id=" + id, status: 200, ctype: "text/plain", body: record, wantError: "text/plain"},
		{name: "an undeclared status", method: "GET", path: "/v1/task/query?task_id=" + id, status: http.StatusTeapot, ctype: jsonType, body: okError, wantError: "418"},
		{name: "a missing parameter refused", method: "GET", path: "/v1/task/query", status: 400, ctype: jsonType, body: okError, wantLog: "task_id"},
		{name: "a missing parameter accepted", method: "GET", path: "/v1/task/query", status: 200, ctype: jsonType, body: record, wantError: "not refused"},
		{name: "a missing parameter, raw", method: "GET", path: "/v1/task/query", raw: true, status: 400, ctype: jsonType, body: okError},
		{name: "a bad error body", method: "GET", path: "/v1/task/query?task_id=x", status: 404, ctype: jsonType, body: `{"code":404,"msg":"x"}`, wantError: "data"},
		{name: "an unknown path", method: "GET", path: "/v1/nothing", status: 404, ctype: jsonType, body: `{"code":404,"msg":"no such endpoint","data":null}`, wantLog: "does not have"},
		{name: "an unknown path served", method: "GET", path: "/v1/nothing", status: 200, ctype: jsonType, body: `{}`, wantError: "want 404"},
		{name: "a wrong method", method: "DELETE", path: "/v1/task/query", status: 405, ctype: jsonType, body: `{"code":405,"msg":"method not allowed on this endpoint","data":null}`, wantLog: "method"},
		{name: "options", method: "OPTIONS", path: "/v1/task/query", status: 204, ctype: "", body: "", wantError: "Allow"},
		{name: "a wrong method served", method: "DELETE", path: "/v1/task/query", status: 200, ctype: jsonType, body: record, wantError: "want 405"},
		{name: "a stream", method: "GET", path: "/v1/task/stream?task_id=" + id, status: 200, ctype: "text/event-stream",
			body: "event: task\nid: 1\ndata: " + record + "\n\n: keepalive\n\nevent: task\nid: 2\ndata: " + final + "\n\n"},
		{name: "a stream with a bad record", method: "GET", path: "/v1/task/stream?task_id=" + id, status: 200, ctype: "text/event-stream",
			body: "event: task\nid: 1\ndata: {\"task_id\":1}\n\n", wantError: "event 0"},
		{name: "a stream with ids going back", method: "GET", path: "/v1/task/stream?task_id=" + id, status: 200, ctype: "text/event-stream",
			body: "event: task\nid: 2\ndata: " + record + "\n\nevent: task\nid: 1\ndata: " + final + "\n\n", wantError: "id"},
		{name: "a download without its ETag", method: "GET", path: "/v1/files/2026112214/a75d6ee8b6feafeb0c3a0b5c1e0f9d21.png?expires=1795445500&sig=gD6FtKECRI5cULPPo6EDbVeHguubExQnR2AcbvJI7xA",
			status: 200, ctype: "image/png", body: "\x89PNG", wantError: "ETag"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			answer.Lock()
			answer.status, answer.ctype, answer.body = tt.status, tt.ctype, tt.body
			answer.Unlock()
			rec := &reportRecorder{TB: t}
			c := newClient(rec, srv.URL, "esk_0123456789012345678901234567890123456789")
			if tt.raw {
				c = c.raw()
			}
			if st, _, _ := c.do(tt.method, tt.path, "", nil); st != tt.status {
				t.Fatalf("status %d", st)
			}
			errs, logs := strings.Join(rec.errors, "\n"), strings.Join(rec.logs, "\n")
			switch {
			case tt.wantError == "" && errs != "":
				t.Errorf("reported: %s", errs)
			case tt.wantError != "" && !strings.Contains(errs, tt.wantError):
				t.Errorf("reported %q; want an error about %q", errs, tt.wantError)
			}
			if tt.wantLog != "" && !strings.Contains(logs, tt.wantLog) {
				t.Errorf("logged %q; want a note about %q", logs, tt.wantLog)
			}
			if tt.raw && logs != "" {
				t.Errorf("a raw request's check was logged: %s", logs)
			}
		})
	}

	// Webhook deliveries, as a receiver gets them.
	delivery := []byte(`{"type":"task.canceled","timestamp":"2026-11-22T14:38:19.002Z","data":` + final + `}`)
	goodHeaders := http.Header{
		"Content-Type":      {"application/json"},
		"User-Agent":        {"Easel-Webhooks/1.0"},
		"Webhook-Id":        {"msg_" + id + "_canceled"},
		"Webhook-Timestamp": {"1795359101"},
		"Webhook-Signature": {"v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
	}
	wrec := &reportRecorder{TB: t}
	checkWebhook(wrec, srv.URL, goodHeaders, delivery)
	if len(wrec.errors) != 0 {
		t.Errorf("a good delivery: %v", wrec.errors)
	}
	unsigned := goodHeaders.Clone()
	unsigned.Del("Webhook-Signature")
	for name, tt := range map[string]struct {
		hdr  http.Header
		body []byte
		want string
	}{
		"unsigned":      {unsigned, delivery, "webhook-signature"},
		"unknown event": {goodHeaders, bytes.Replace(delivery, []byte("task.canceled"), []byte("task.lost"), 1), "task.lost"},
		"a bad record":  {goodHeaders, bytes.Replace(delivery, []byte(`"results":[]`), []byte(`"results":["x"]`), 1), "results"},
		"another type":  {http.Header{"Content-Type": {"text/plain"}}, delivery, "text/plain"},
	} {
		wrec := &reportRecorder{TB: t}
		checkWebhook(wrec, srv.URL, tt.hdr, tt.body)
		if errs := strings.Join(wrec.errors, "\n"); !strings.Contains(errs, tt.want) {
			t.Errorf("delivery %s: reported %q; want an error about %q", name, errs, tt.want)
		}
	}

	// A stream read with the client's stream, checked on the way.
	answer.Lock()
	answer.status, answer.ctype = 200, "text/event-stream"
	answer.body = "event: task\nid: 1\ndata: " + record + "\n\n: keepalive\n\nevent: task\nid: 2\ndata: " + final + "\n\n"
	answer.Unlock()
	rec := &reportRecorder{TB: t}
	st, events, _ := newClient(rec, srv.URL, "esk_0123456789012345678901234567890123456789").stream(id, 5*time.Second)
	if st != 200 || len(events) != 2 || events[1].ID != "2" || events[1].Event != "task" || string(events[1].Data) != final || len(rec.errors) != 0 {
		t.Errorf("stream: %d %+v, reported %v", st, events, rec.errors)
	}
}
