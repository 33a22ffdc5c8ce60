package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/pb33f/go-yaml"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/admin"
	"github.com/easelhq/easel/api-gateway/internal/api"
	"github.com/easelhq/easel/api-gateway/internal/gatewaytest"
	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
	"github.com/easelhq/easel/pkg/webhook"
)

// openapiHandler is the gateway's handler with the admin API and /metrics
// on, so that the route checks see what they must leave out.
func openapiHandler(t *testing.T) *echo.Echo {
	t.Helper()
	cat, err := catalog.New("lumen")
	if err != nil {
		t.Fatal(err)
	}
	return gatewaytest.Server(gatewaytest.Deps{
		Config: web.Config{Log: zap.NewNop()},
		Deps:   api.Deps{MetricsHandler: http.NotFoundHandler()},
		Admin:  &admin.Deps{Token: gatewaytest.AdminToken, Catalog: cat},
	}).Echo
}

// served fetches /openapi.json from the handler.
func served(t *testing.T, e *echo.Echo, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/openapi.json", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// loadDocument parses the served document into libopenapi's model.
func loadDocument(t *testing.T) (libopenapi.Document, *v3.Document) {
	t.Helper()
	rec := served(t, openapiHandler(t), nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", rec.Code)
	}
	doc, err := libopenapi.NewDocument(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("building the model (unresolved or circular references?): %v", err)
	}
	return doc, &m.Model
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := openapiHandler(t)
	rec := served(t, e, nil)
	etag := rec.Header().Get("ETag")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" ||
		!strings.HasPrefix(etag, `"`) || !strings.Contains(rec.Header().Get("Cache-Control"), "max-age=") || rec.Header().Get("X-Request-Id") == "" {
		t.Fatalf("GET /openapi.json: %d %v", rec.Code, rec.Header())
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatal("the document is not JSON")
	}
	for _, tt := range []struct {
		ifNoneMatch string
		status      int
	}{
		{etag, http.StatusNotModified},
		{"W/" + etag, http.StatusNotModified},
		{`"other", ` + etag, http.StatusNotModified},
		{"*", http.StatusNotModified},
		{`"other"`, http.StatusOK},
	} {
		got := served(t, e, map[string]string{"If-None-Match": tt.ifNoneMatch})
		if got.Code != tt.status || got.Header().Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d (ETag %s); want %d", tt.ifNoneMatch, got.Code, got.Header().Get("ETag"), tt.status)
		}
		if tt.status == http.StatusNotModified && got.Body.Len() != 0 {
			t.Errorf("If-None-Match %s: a 304 with a body", tt.ifNoneMatch)
		}
	}
}

func TestOpenAPIDocumentIsValid31(t *testing.T) {
	t.Parallel()
	doc, m := loadDocument(t)
	if m.Version != "3.1.0" || doc.GetSpecInfo().VersionNumeric != 3.1 {
		t.Fatalf("openapi %q; want 3.1.0", m.Version)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s (%s): %s", se.FieldPath, se.KeywordLocation, se.Reason)
			}
		}
	}
	// The check is not vacuous: a document that breaks the 3.1 schema (an
	// operation without responses, an unknown top-level field) fails it.
	rec := served(t, openapiHandler(t), nil)
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw["paths"].(map[string]any)["/healthz"].(map[string]any)["get"].(map[string]any), "responses")
	raw["bogus"] = true
	broken, _ := json.Marshal(raw)
	bdoc, err := libopenapi.NewDocument(broken)
	if err != nil {
		t.Fatal(err)
	}
	bv, _ := validator.NewValidator(bdoc)
	if ok, _ := bv.ValidateDocument(); ok {
		t.Error("a document without an operation's responses passed validation")
	}
}

// route is a method and a path pattern with its parameters blanked, "/v1/files/*" for
// Echo's wildcard.
type route struct{ method, path string }

// undocumented are the routes the document leaves out on purpose (its
// info.description says so).
func undocumented(r *echo.Route) bool {
	switch {
	case r.Method == echo.RouteNotFound:
		return true // Echo's own 404 handlers of groups
	case r.Path == "/admin" || strings.HasPrefix(r.Path, "/admin/"):
		return true // the operators' admin API
	case r.Path == "/metrics":
		return true // Prometheus, for operators
	case r.Path == "/playground" || strings.HasPrefix(r.Path, "/playground/"):
		return true // a web page, not API
	case r.Path == "/console" || strings.HasPrefix(r.Path, "/console/"):
		return true // the console page and its own API (docs/console.md; the document's description says why)
	}
	return false
}

// blank replaces each {param} of an OpenAPI path or :param of an Echo path
// by "{}".
func blank(p string) string {
	seg := strings.Split(p, "/")
	for i, s := range seg {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			seg[i] = "{}"
		}
	}
	return strings.Join(seg, "/")
}

// matches reports whether an Echo route pattern serves an OpenAPI path
// (both blanked): equal, or under the prefix of an Echo wildcard.
func matches(echoPath, docPath string) bool {
	if prefix, ok := strings.CutSuffix(echoPath, "*"); ok {
		return strings.HasPrefix(docPath, prefix) && len(docPath) > len(prefix)
	}
	return echoPath == docPath
}

func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	var documented []route
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented = append(documented, route{strings.ToUpper(method), blank(path)})
		}
	}
	var registered []route
	for _, r := range openapiHandler(t).Routes() {
		if !undocumented(r) {
			registered = append(registered, route{r.Method, blank(r.Path)})
		}
	}
	if len(registered) < 5 || len(documented) < 5 {
		t.Fatalf("%d routes, %d documented operations", len(registered), len(documented))
	}
	for _, r := range registered {
		if !slices.ContainsFunc(documented, func(d route) bool { return d.method == r.method && matches(r.path, d.path) }) {
			t.Errorf("route %s %s is not in openapi.json", r.method, r.path)
		}
	}
	for _, d := range documented {
		if !slices.ContainsFunc(registered, func(r route) bool { return d.method == r.method && matches(r.path, d.path) }) {
			t.Errorf("openapi.json documents %s %s, which the gateway does not route", d.method, d.path)
		}
	}
	// The blanking and matching themselves.
	for _, tt := range []struct {
		echo, doc string
		want      bool
	}{
		{"/v1/files/*", "/v1/files/{}/{}", true},
		{"/v1/files/*", "/v1/files/", false},
		{"/v1/task/query", "/v1/task/query", true},
		{"/v1/task/query", "/v1/task/list", false},
		{blank("/a/:id/b"), blank("/a/{x}/b"), true},
	} {
		if got := matches(tt.echo, tt.doc); got != tt.want {
			t.Errorf("matches(%s, %s) = %v", tt.echo, tt.doc, got)
		}
	}
}

// exampleSite is one example and the schema it must satisfy.
type exampleSite struct {
	where  string
	schema *base.Schema
	value  *yaml.Node
}

// collectExamples gathers every example of the document with its schema:
// those of parameters, headers and media types (inline or from
// components.examples) in paths, webhooks and components, and the
// `examples` of component schemas.
func collectExamples(m *v3.Document) []exampleSite {
	var out []exampleSite
	add := func(where string, sp *base.SchemaProxy, ex *yaml.Node, exs *orderedmap.Map[string, *base.Example]) {
		if sp == nil {
			return
		}
		s := sp.Schema()
		if ex != nil {
			out = append(out, exampleSite{where, s, ex})
		}
		for name, e := range exs.FromOldest() {
			out = append(out, exampleSite{where + " examples." + name, s, e.Value})
		}
	}
	params := func(where string, ps []*v3.Parameter) {
		for _, p := range ps {
			add(where+" parameter "+p.Name, p.Schema, p.Example, p.Examples)
		}
	}
	headers := func(where string, hs *orderedmap.Map[string, *v3.Header]) {
		for name, h := range hs.FromOldest() {
			add(where+" header "+name, h.Schema, h.Example, h.Examples)
		}
	}
	content := func(where string, c *orderedmap.Map[string, *v3.MediaType]) {
		for mt, media := range c.FromOldest() {
			add(where+" "+mt, media.Schema, media.Example, media.Examples)
		}
	}
	response := func(where string, r *v3.Response) {
		headers(where, r.Headers)
		content(where, r.Content)
	}
	item := func(where string, pi *v3.PathItem) {
		params(where, pi.Parameters)
		for method, op := range pi.GetOperations().FromOldest() {
			w := where + " " + method
			params(w, op.Parameters)
			if op.RequestBody != nil {
				content(w+" request", op.RequestBody.Content)
			}
			if op.Responses != nil {
				for code, r := range op.Responses.Codes.FromOldest() {
					response(w+" "+code, r)
				}
				if op.Responses.Default != nil {
					response(w+" default", op.Responses.Default)
				}
			}
		}
	}
	for path, pi := range m.Paths.PathItems.FromOldest() {
		item(path, pi)
	}
	for name, pi := range m.Webhooks.FromOldest() {
		item("webhook "+name, pi)
	}
	c := m.Components
	for name, sp := range c.Schemas.FromOldest() {
		for i, ex := range sp.Schema().Examples {
			out = append(out, exampleSite{fmt.Sprintf("schema %s examples[%d]", name, i), sp.Schema(), ex})
		}
	}
	var ps []*v3.Parameter
	for _, p := range c.Parameters.FromOldest() {
		ps = append(ps, p)
	}
	params("components", ps)
	headers("components", c.Headers)
	for name, r := range c.Responses.FromOldest() {
		response("components response "+name, r)
	}
	return out
}

// checkAgainst validates a JSON value against a schema, returning the
// failures.
func checkAgainst(sv schema_validation.SchemaValidator, s *base.Schema, value []byte) []string {
	ok, errs := sv.ValidateSchemaBytes(s, value)
	if ok {
		return nil
	}
	var out []string
	for _, e := range errs {
		out = append(out, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			out = append(out, se.FieldPath+" ("+se.KeywordLocation+"): "+se.Reason)
		}
	}
	return out
}

func TestOpenAPIExamplesMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	sv := schema_validation.NewSchemaValidator()
	sites := collectExamples(m)
	if len(sites) < 60 {
		t.Fatalf("only %d examples found", len(sites))
	}
	for _, s := range sites {
		var v any
		if err := s.value.Decode(&v); err != nil {
			t.Errorf("%s: %v", s.where, err)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Errorf("%s: %v", s.where, err)
			continue
		}
		if errs := checkAgainst(sv, s.schema, b); errs != nil {
			t.Errorf("example %s does not match its schema: %s", s.where, strings.Join(errs, "; "))
		}
	}
	// The check is not vacuous: wrong values fail it.
	record := m.Components.Schemas.GetOrZero("TaskRecord").Schema()
	for name, bad := range map[string]string{
		"completed without results": `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"completed","progress":100,"create_time":1,"complete_time":2,"results":[]}`,
		"failed without error":      `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"failed","progress":3,"create_time":1,"complete_time":2,"results":[]}`,
		"unknown status":            `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"lost","progress":0,"create_time":1,"complete_time":0,"results":[]}`,
		"queue position when done":  `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"canceled","progress":0,"create_time":1,"complete_time":2,"results":[],"queue_position":1}`,
		"undocumented field":        `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1,"complete_time":0,"results":[],"extra":1}`,
	} {
		if checkAgainst(sv, record, []byte(bad)) == nil {
			t.Errorf("TaskRecord accepts a record %s", name)
		}
	}
	errSchema := m.Components.Schemas.GetOrZero("Error").Schema()
	if checkAgainst(sv, errSchema, []byte(`{"code":400,"msg":"x","data":{}}`)) == nil {
		t.Error("Error accepts data that is not null")
	}
}

// TestOpenAPIJSONBodiesHaveExamples: every JSON request and response body
// the API documents comes with an example.
func TestOpenAPIJSONBodiesHaveExamples(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	check := func(where string, c *orderedmap.Map[string, *v3.MediaType]) {
		if c == nil {
			return
		}
		if media := c.GetOrZero("application/json"); media != nil && media.Example == nil && orderedmap.Len(media.Examples) == 0 {
			t.Errorf("%s: a JSON body without an example", where)
		}
	}
	n := 0
	for path, pi := range m.Paths.PathItems.FromOldest() {
		for method, op := range pi.GetOperations().FromOldest() {
			if op.OperationId == "getOpenAPIDocument" {
				continue // this document itself
			}
			if op.RequestBody != nil {
				check(method+" "+path+" request", op.RequestBody.Content)
				n++
			}
			for code, r := range op.Responses.Codes.FromOldest() {
				if r.Content != nil {
					check(method+" "+path+" "+code, r.Content)
					n++
				}
			}
		}
	}
	for name, pi := range m.Webhooks.FromOldest() {
		for method, op := range pi.GetOperations().FromOldest() {
			check("webhook "+name+" "+method, op.RequestBody.Content)
			n++
		}
	}
	if n < 40 {
		t.Fatalf("only %d bodies checked", n)
	}
}

// TestOpenAPIErrorsShareTheEnvelope: every 4xx and 5xx response with a
// body is the Error schema.
func TestOpenAPIErrorsShareTheEnvelope(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	errSchema := m.Components.Schemas.GetOrZero("Error").Schema()
	for path, pi := range m.Paths.PathItems.FromOldest() {
		for method, op := range pi.GetOperations().FromOldest() {
			for code, r := range op.Responses.Codes.FromOldest() {
				if code[0] != '4' && code[0] != '5' {
					continue
				}
				if method == "head" {
					if orderedmap.Len(r.Content) > 0 {
						t.Errorf("%s %s %s: a HEAD answer with a body", method, path, code)
					}
					continue
				}
				if orderedmap.Len(r.Content) != 1 {
					t.Errorf("%s %s %s: not the Error envelope alone", method, path, code)
					continue
				}
				media := r.Content.GetOrZero("application/json")
				if media == nil || media.Schema.Schema() != errSchema && media.Schema.GetReference() != "#/components/schemas/Error" {
					t.Errorf("%s %s %s: not the Error envelope", method, path, code)
				}
			}
		}
	}
}

// TestOpenAPIRecordMatchesTaskview renders records of tasks in every status
// with the code the API uses and checks them against TaskRecord, so the Go
// type and the document cannot part.
func TestOpenAPIRecordMatchesTaskview(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	sv := schema_validation.NewSchemaValidator()
	record := m.Components.Schemas.GetOrZero("TaskRecord").Schema()
	signer := signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "http://localhost:8080")
	created := time.UnixMilli(1795359098636)
	base := task.Task{ID: "task_lumen_2170455969821192122696478843056611060", Type: task.Type, Model: "lumen-3-pro-image-preview", CreateTime: created}
	pos, eta := int64(3), int64(4200)
	cases := map[string]func(*task.Task, *taskview.Record){
		"pending": func(t *task.Task, r *taskview.Record) {
			t.Status = task.Pending
		},
		"pending in a queue": func(t *task.Task, r *taskview.Record) {
			t.Status = task.Pending
			r.QueuePosition, r.EtaMs = &pos, &eta
		},
		"processing": func(t *task.Task, r *taskview.Record) {
			t.Status, t.Progress = task.Processing, 40
		},
		"completed": func(t *task.Task, r *taskview.Record) {
			t.Status, t.Progress, t.CompleteTime = task.Completed, 100, created.Add(2*time.Second)
			t.Results = []task.Result{{Key: "2026112214/a75d6ee8b6feafeb0c3a0b5c1e0f9d21.png", ContentType: "image/png"}}
		},
		"failed": func(t *task.Task, r *taskview.Record) {
			t.Status, t.Progress, t.CompleteTime = task.Failed, 35, created.Add(time.Minute)
			t.Failure = &task.Failure{Code: string(task.UpstreamUnavailable), Message: "the image model is unavailable"}
		},
		"failed without a failure": func(t *task.Task, r *taskview.Record) {
			t.Status, t.CompleteTime = task.Failed, created.Add(time.Minute)
		},
		"canceled": func(t *task.Task, r *taskview.Record) {
			t.Status, t.CompleteTime = task.Canceled, created.Add(time.Second)
		},
	}
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		tk := base
		var extra taskview.Record
		cases[name](&tk, &extra)
		rec := taskview.New(&tk, signer)
		rec.QueuePosition, rec.EtaMs = extra.QueuePosition, extra.EtaMs
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if errs := checkAgainst(sv, record, b); errs != nil {
			t.Errorf("%s: %s does not match TaskRecord: %s", name, b, strings.Join(errs, "; "))
		}
	}
}

// TestOpenAPIErrorEnvelopeMatchesHandler checks the errors Echo itself
// raises (no route, wrong method) against the Error schema.
func TestOpenAPIErrorEnvelopeMatchesHandler(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	sv := schema_validation.NewSchemaValidator()
	errSchema := m.Components.Schemas.GetOrZero("Error").Schema()
	e := openapiHandler(t)
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/v1/nothing", http.StatusNotFound},
		{http.MethodDelete, "/v1/task/create", http.StatusMethodNotAllowed},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed},
	} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.status {
			t.Errorf("%s %s: %d; want %d", tt.method, tt.path, rec.Code, tt.status)
		}
		if errs := checkAgainst(sv, errSchema, rec.Body.Bytes()); errs != nil {
			t.Errorf("%s %s: %s does not match Error: %s", tt.method, tt.path, rec.Body.Bytes(), strings.Join(errs, "; "))
		}
	}
}

// TestOpenAPIWebhooksMatchPkgWebhook checks the bodies and ids the workers
// deliver (package webhook) against the document's webhooks.
func TestOpenAPIWebhooksMatchPkgWebhook(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	sv := schema_validation.NewSchemaValidator()
	event := m.Components.Schemas.GetOrZero("WebhookEvent").Schema()
	idSchema := m.Components.Parameters.GetOrZero("webhook-id").Schema.Schema()
	sigSchema := m.Components.Parameters.GetOrZero("webhook-signature").Schema.Schema()
	// Two secrets, as for a day after a rotation: two signatures.
	secretA := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	secretB := "whsec_" + base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
	signer := signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "http://localhost:8080")
	created := time.UnixMilli(1795359098636)
	for _, ev := range task.Events {
		tk := task.Task{ID: "task_lumen_2170455969821192122696478843056611060", Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: created}
		switch ev {
		case task.EventCompleted:
			tk.Status, tk.Progress, tk.CompleteTime = task.Completed, 100, created.Add(time.Second)
			tk.Results = []task.Result{{Key: "2026112214/a75d6ee8b6feafeb0c3a0b5c1e0f9d21.png", ContentType: "image/png"}}
		case task.EventFailed:
			tk.Status, tk.CompleteTime = task.Failed, created.Add(time.Second)
			tk.Failure = &task.Failure{Code: string(task.SourceFetchFailed), Message: "input.image_urls[0]: HTTP 404"}
		case task.EventCanceled:
			tk.Status, tk.CompleteTime = task.Canceled, created.Add(time.Second)
		case task.EventProgress:
			tk.Status, tk.Progress = task.Processing, 40
		}
		if got := task.EventOf(tk.Status); got != "" && got != ev {
			t.Fatalf("the task made for %s is a %s", ev, got)
		}
		body, err := webhook.Body(ev, created.Add(time.Second), taskview.New(&tk, signer))
		if err != nil {
			t.Fatal(err)
		}
		if errs := checkAgainst(sv, event, body); errs != nil {
			t.Errorf("%s: %s does not match WebhookEvent: %s", ev, body, strings.Join(errs, "; "))
		}
		msg, err := webhook.NewMessage([]string{secretA, secretB}, webhook.MessageID(tk.ID, ev, 3), created, body)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []struct {
			schema *base.Schema
			value  string
		}{{idSchema, msg.ID}, {sigSchema, msg.Signature}} {
			v, _ := json.Marshal(h.value)
			if errs := checkAgainst(sv, h.schema, v); errs != nil {
				t.Errorf("%s: header %s does not match: %s", ev, v, strings.Join(errs, "; "))
			}
		}
	}
	// Every event type is a webhook of the document, and an enum value.
	for _, ev := range task.Events {
		if m.Webhooks.GetOrZero(ev) == nil {
			t.Errorf("no webhook %s in the document", ev)
		}
	}
	// The delivery states of the log are package webhook's.
	var states []string
	for _, n := range m.Components.Schemas.GetOrZero("WebhookDelivery").Schema().Properties.GetOrZero("state").Schema().Enum {
		states = append(states, n.Value)
	}
	want := []string{string(webhook.StatePending), string(webhook.StateDelivered), string(webhook.StateRetrying), string(webhook.StateFailed)}
	slices.Sort(states)
	slices.Sort(want)
	if !slices.Equal(states, want) {
		t.Errorf("WebhookDelivery.state enum %v; the delivery states are %v", states, want)
	}
	types := m.Components.Schemas.GetOrZero("EventType").Schema()
	var enum []string
	for _, n := range types.Enum {
		enum = append(enum, n.Value)
	}
	if !slices.Equal(enum, task.Events) {
		t.Errorf("EventType enum %v; the events are %v", enum, task.Events)
	}
}

// TestOpenAPIStatusesMatchTask: TaskStatus is the statuses of package task.
func TestOpenAPIStatusesMatchTask(t *testing.T) {
	t.Parallel()
	_, m := loadDocument(t)
	var enum []string
	for _, n := range m.Components.Schemas.GetOrZero("TaskStatus").Schema().Enum {
		enum = append(enum, n.Value)
	}
	var want []string
	for _, s := range task.Statuses {
		want = append(want, string(s))
	}
	if !slices.Equal(enum, want) {
		t.Errorf("TaskStatus enum %v; package task has %v", enum, want)
	}
}
