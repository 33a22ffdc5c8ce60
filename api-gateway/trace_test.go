package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// A create that comes with a traceparent continues the client's trace: the
// gateway's spans (the request's, auth, store.create, queue.enqueue) are in
// it, the response names it (X-Trace-Id), the record keeps the request's
// span as the task's trace context (tp) and the query shows its trace id;
// the access log line carries it, and the request duration's exemplar too.
// With tracing off none of this is there, whatever the client sends.
func TestCreateTraced(t *testing.T) {
	const (
		clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientSpan  = "00f067aa0ba902b7"
	)
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		on   bool
	}{
		{"on", true},
		{"off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tr := tracing.Noop()
			if tc.on {
				tr = tracing.FromProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
			}
			core, logs := observer.New(zap.InfoLevel)
			base := startGatewayWith(t, srv.URL, map[string]string{"EASEL_METRICS_ON_API": "true"},
				func(ctx context.Context, cfg Config, ln net.Listener) error {
					return run(ctx, cfg, zap.New(core), ln, tr)
				})
			localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)

			body := `{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`
			hdr, data := call(t, "POST", base+"/v1/task/create", body, map[string]string{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01"})
			taskID, _ := data["task_id"].(string)
			if taskID == "" {
				t.Fatalf("create answered %v", data)
			}
			wantTrace := ""
			if tc.on {
				wantTrace = clientTrace
			}
			if got := hdr.Get("X-Trace-Id"); got != wantTrace {
				t.Errorf("X-Trace-Id %q, want %q", got, wantTrace)
			}

			// The record, and the query's view of it.
			accounts := store.NewAccounts(store.NewDB(srv.Client(t), store.Options{}))
			acct, err := accounts.Authenticate(context.Background(), devKey)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := store.NewTasks(store.NewDB(srv.Client(t), store.Options{})).Get(context.Background(), acct.ID, taskID)
			if err != nil {
				t.Fatal(err)
			}
			if got := tracing.TraceIDOf(rec.TraceParent); got != wantTrace || (!tc.on && rec.TraceParent != "") {
				t.Errorf("the record's traceparent %q, want one of trace %q", rec.TraceParent, wantTrace)
			}
			_, q := call(t, "GET", base+"/v1/task/query?task_id="+url.QueryEscape(taskID), "", nil)
			if got, _ := q["trace_id"].(string); got != wantTrace {
				t.Errorf("query's trace_id %q, want %q (%v)", got, wantTrace, q)
			}
			_, hasTraceID := q["trace_id"]
			if hasTraceID != tc.on {
				t.Errorf("the query shows trace_id: %v, want %v", hasTraceID, tc.on)
			}

			// The access line of the create.
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			deadline := time.Now().Add(10 * time.Second)
			var access map[string]any
			for access == nil && time.Now().Before(deadline) {
				for _, e := range logs.FilterMessage("request").All() {
					if m := e.ContextMap(); m["path"] == "/v1/task/create" {
						access = m
					}
				}
				if access == nil {
					<-tick.C
				}
			}
			if access == nil {
				t.Fatal("no access line for the create")
			}
			if got, _ := access["trace_id"].(string); got != wantTrace {
				t.Errorf("access line trace_id %q, want %q (%v)", got, wantTrace, access)
			}
			if _, ok := access["span_id"]; ok != tc.on {
				t.Errorf("access line has span_id: %v, want %v", ok, tc.on)
			}

			// The duration's exemplar, in OpenMetrics.
			req, _ := http.NewRequest("GET", base+"/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := strings.Contains(string(metrics), `trace_id="`+clientTrace+`"`); got != tc.on {
				t.Errorf("an exemplar of the client's trace: %v, want %v", got, tc.on)
			}

			if !tc.on {
				if n := len(exp.GetSpans()); n != 0 {
					t.Errorf("%d spans recorded with tracing off", n)
				}
				return
			}
			// The create's spans, once its server span has ended.
			var spans tracetest.SpanStubs
			byName := map[string]tracetest.SpanStub{}
			for time.Now().Before(deadline) {
				spans = exp.GetSpans()
				clear(byName)
				for _, s := range spans {
					if s.SpanContext.TraceID().String() == clientTrace {
						byName[s.Name] = s
					}
				}
				if _, ok := byName["POST /v1/task/create"]; ok {
					break
				}
				<-tick.C
			}
			server, ok := byName["POST /v1/task/create"]
			if !ok {
				t.Fatalf("no span POST /v1/task/create in the client's trace; spans: %v", names(spans))
			}
			if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID().String() != clientSpan || !server.Parent.IsRemote() {
				t.Errorf("server span: kind %v, parent %v; want a server span under the client's", server.SpanKind, server.Parent)
			}
			if got := attr(server, "http.route"); got != "/v1/task/create" {
				t.Errorf("http.route %q", got)
			}
			if got := attr(server, "easel.task_id"); got != taskID {
				t.Errorf("server span easel.task_id %q, want %q", got, taskID)
			}
			if got := attr(server, "easel.account_id"); got != acct.ID {
				t.Errorf("server span easel.account_id %q, want %q", got, acct.ID)
			}
			for _, name := range []string{"auth", "store.create", "queue.enqueue"} {
				s, ok := byName[name]
				if !ok {
					t.Errorf("no span %q in the trace; spans: %v", name, names(spans))
					continue
				}
				if s.Parent.SpanID() != server.SpanContext.SpanID() {
					t.Errorf("%s: parent %s, want the server span %s", name, s.Parent.SpanID(), server.SpanContext.SpanID())
				}
				if got := attr(s, "easel.account_id"); got != acct.ID {
					t.Errorf("%s: easel.account_id %q, want %q", name, got, acct.ID)
				}
				if name != "auth" && attr(s, "easel.task_id") != taskID {
					t.Errorf("%s: easel.task_id %q, want %q", name, attr(s, "easel.task_id"), taskID)
				}
			}
			// The task's trace context is the request's span: its run joins
			// the trace under it.
			if want := "00-" + clientTrace + "-" + server.SpanContext.SpanID().String() + "-01"; rec.TraceParent != want {
				t.Errorf("the record's traceparent %q, want %q", rec.TraceParent, want)
			}
			// The query is a trace of its own, named after its route.
			if q, ok := findSpan(exp, "GET /v1/task/query"); !ok {
				t.Errorf("no span GET /v1/task/query; spans: %v", names(exp.GetSpans()))
			} else if attr(q, "easel.task_id") != taskID || q.SpanContext.TraceID() == server.SpanContext.TraceID() {
				t.Errorf("the query's span: easel.task_id %q, trace %s; want %q in a trace of its own", attr(q, "easel.task_id"), q.SpanContext.TraceID(), taskID)
			}
		})
	}
}

// call sends a request with the dev key and headers hdr, and returns the
// answer's headers and its data (the envelope's, or the record a query
// answers).
func call(t *testing.T, method, u, body string, hdr map[string]string) (http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+devKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d, %v", method, u, resp.StatusCode, err)
	}
	if data, ok := m["data"].(map[string]any); ok { // the envelope: {"code", "msg", "data"}
		return resp.Header, data
	}
	return resp.Header, m
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func findSpan(exp *tracetest.InMemoryExporter, name string) (tracetest.SpanStub, bool) {
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}
