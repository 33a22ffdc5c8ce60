package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/tools/testkit/jaegerproc"
	"github.com/easelhq/easel/tools/testkit/localnet"
)

// scriptedUpstreams are Gemini API stand-ins sharing one script of answers,
// by the order calls arrive whichever upstream gets them: the first call
// hangs until released, the second until its caller goes away (its worker
// is killed), the third fails with a 500, the rest succeed.
type scriptedUpstreams struct {
	mu       sync.Mutex
	calls    []string // the upstream of each call, in order
	release  chan struct{}
	released sync.Once
	ok, bad  *poolUpstream // answer writers: 200 with an image, 500
}

func newScriptedUpstreams(t *testing.T, names ...string) (*scriptedUpstreams, []*poolUpstream) {
	s := &scriptedUpstreams{release: make(chan struct{}), ok: &poolUpstream{name: "ok"}, bad: &poolUpstream{name: "scripted"}}
	s.ok.status.Store(http.StatusOK)
	s.bad.status.Store(http.StatusInternalServerError)
	var ups []*poolUpstream
	for _, name := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(name, w, r) }))
		ups = append(ups, &poolUpstream{name: name, url: srv.URL})
		t.Cleanup(srv.Close)
	}
	t.Cleanup(s.releaseFirst) // before the servers close (cleanups run last first)
	return s, ups
}

// releaseFirst lets the first call answer.
func (s *scriptedUpstreams) releaseFirst() { s.released.Do(func() { close(s.release) }) }

func (s *scriptedUpstreams) serve(name string, w http.ResponseWriter, r *http.Request) {
	// The request read to its end: only then does the server watch the
	// connection, and end r's context when its caller goes away.
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	s.calls = append(s.calls, name)
	n := len(s.calls)
	s.mu.Unlock()
	switch n {
	case 1:
		select {
		case <-s.release:
		case <-r.Context().Done():
			return
		}
	case 2:
		select {
		case <-r.Context().Done():
			return
		case <-time.After(3 * time.Minute): // the test has failed by then
		}
	case 3:
		s.bad.ServeHTTP(w, r)
		return
	}
	s.ok.ServeHTTP(w, r)
}

func (s *scriptedUpstreams) called() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// TestTracingEndToEnd follows one task through everything that can happen
// to it, on the real gateway and worker binaries exporting to a private
// Jaeger, and reads its trace back: a create sent with a client's
// traceparent waits parked behind its account's running task (one place,
// EASEL_ACCOUNT_MAX_RUNNING=1), its first run's worker is killed -9 while
// the upstream answers nothing, the recovery's run fails on one upstream
// (500) and fails over to the other, the result is stored and a webhook
// delivered. The trace is the client's, one trace across both services,
// with its spans in that order, the failed upstream call marked Error; the
// X-Trace-Id header, the record's trace_id, the gateway's log lines and
// the webhook's traceparent all name it.
func TestTracingEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("tracing end to end: a private Jaeger and the real binaries, a worker killed -9 and its task recovered (about a minute)")
	}
	ctx := context.Background()
	jaeger, err := jaegerproc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("start Jaeger: %v", err)
	}
	t.Cleanup(jaeger.Stop)
	bin, dir, rp, rdb := faultStack(t)

	script, ups := newScriptedUpstreams(t, "first", "second")
	sink := newHookSink(t, nil)
	gwAddr := localnet.FreeAddr(t)
	base := "http://" + gwAddr
	env := append(cleanEnv(),
		"EASEL_REDIS_URL="+rp.URL,
		"EASEL_BLOB_URL=file://"+filepath.Join(dir, "blobs"),
		"EASEL_SIGNING_SECRET="+secret,
		"EASEL_LOG_LEVEL=info", // the gateway's access log
		"EASEL_FETCH_ALLOW_PRIVATE=true",
		"EASEL_ACCOUNT_MAX_RUNNING=1",
		"EASEL_TASK_CHECK_INTERVAL=20ms",
		"EASEL_SHUTDOWN_TIMEOUT=5s",
		"EASEL_GENERATOR=gemini",
		"EASEL_UPSTREAMS_FILE="+poolFile(t, "", ups...),
		"EASEL_RETRY_INITIAL_INTERVAL=100ms",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+jaeger.OTLPEndpoint,
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	)
	// Two gateways and two workers: the create goes through one gateway,
	// its queries through the other; the second worker starts once the
	// first holds the traced task's run, and recovers it when the first is
	// killed (never restarted).
	gw := startProc(t, dir, "gateway", filepath.Join(bin, "gateway"), slices.Concat(env, []string{"EASEL_HTTP_ADDR=" + gwAddr, "EASEL_PUBLIC_URL=" + base, "EASEL_METRICS_ADDR=off"}))
	gw2Addr := localnet.FreeAddr(t)
	base2 := "http://" + gw2Addr
	startProc(t, dir, "gateway2", filepath.Join(bin, "gateway"), slices.Concat(env, []string{"EASEL_HTTP_ADDR=" + gw2Addr, "EASEL_PUBLIC_URL=" + base, "EASEL_METRICS_ADDR=off"}))
	w := startProc(t, dir, "worker", filepath.Join(bin, "worker"), slices.Concat(env, []string{"EASEL_PUBLIC_URL=" + base, "EASEL_WORKER_HTTP_ADDR=" + localnet.FreeAddr(t)}))
	waitHTTP(t, base+"/readyz")
	waitHTTP(t, base2+"/readyz")

	accounts := store.NewAccounts(store.NewDB(rdb, store.Options{}))
	acct, err := accounts.Create(ctx, account.Spec{Name: "traced", Credits: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := accounts.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, base, key)
	c2 := newClient(t, base2, key) // the other gateway

	waitUntil := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.After(timeout)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !ok() {
			select {
			case <-deadline:
				t.Fatalf("%s: not within %s; upstream calls %v\n--- gateway\n%s\n--- worker\n%s", what, timeout, script.called(), gw.tail(), w.tail())
			case <-tick.C:
			}
		}
	}
	status := func(id string) string { _, rec, _ := c2.query(id); return rec.Status }

	// The account's one place, taken by a task whose upstream call hangs.
	first := c.create(stdBody("the task ahead"))
	waitUntil("the first task calls the upstream", 30*time.Second, func() bool { return len(script.called()) == 1 })

	// The traced create: parked behind it.
	const (
		clientTrace = "0af7651916cd43dd8448eb211c80319c"
		clientSpan  = "b7ad6b7169203331"
		requestID   = "e2e-traced-create"
	)
	body := `{"model":"` + std + `","task_type":"image","input":{"prompt":"a traced lighthouse"},"callback_url":"` + sink.srv.URL + `/traced"}`
	st, hdr, b := c.do("POST", "/v1/task/create", body, map[string]string{
		"traceparent":  "00-" + clientTrace + "-" + clientSpan + "-01",
		"X-Request-Id": requestID,
	})
	if st != http.StatusOK {
		t.Fatalf("create: %d %s", st, b)
	}
	var created struct {
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &created); err != nil || created.Data.TaskID == "" {
		t.Fatalf("create: %s", b)
	}
	id := created.Data.TaskID
	if got := hdr.Get("X-Trace-Id"); got != clientTrace {
		t.Errorf("create's X-Trace-Id %q; want the client's trace %s", got, clientTrace)
	}
	if s := status(id); s != "pending" {
		t.Errorf("the traced task is %s behind the account's running task; want pending (parked)", s)
	}

	// The first task ends; the traced one is admitted and its run calls the
	// upstream, which answers nothing: its worker is killed -9 meanwhile.
	script.releaseFirst()
	waitUntil("the traced task's first run calls the upstream", 30*time.Second, func() bool { return len(script.called()) == 2 })
	if s := status(first); s != "completed" {
		t.Errorf("the first task is %s; want completed", s)
	}
	// The worker reports the queue's spans when the run starts, so they
	// outlive it once exported: the kill waits for them.
	jc := jaeger.Client()
	waitUntil("the first run's queue spans in Jaeger", 30*time.Second, func() bool {
		tr, _ := jc.Trace(ctx, clientTrace)
		return tr != nil && len(tr.Named("queue.parked")) > 0 && len(tr.Named("queue.wait")) > 0
	})
	// A second worker starts, then the first (the only one that could have
	// taken the run) is killed: the second recovers the task.
	w2 := startProc(t, dir, "worker2", filepath.Join(bin, "worker"), slices.Concat(env, []string{"EASEL_PUBLIC_URL=" + base, "EASEL_WORKER_HTTP_ADDR=" + localnet.FreeAddr(t)}))
	w.signal(t, syscall.SIGKILL)
	w = w2 // the one whose log a failure shows
	killed := time.Now()

	// The recovery gives it a new run (once the dead run's 30 s lease is
	// out): a 500 from one upstream, a failover to the other, the result.
	rec, _, _ := c2.poll(id, 120*time.Second)
	if rec.Status != "completed" {
		t.Fatalf("the traced task ended %s (%+v); upstream calls %v\n--- worker\n%s", rec.Status, rec.Error, script.called(), w.tail())
	}
	t.Logf("recovered and completed %v after the kill", time.Since(killed).Round(time.Millisecond))
	calls := script.called()
	if len(calls) != 4 || calls[2] == calls[3] {
		t.Fatalf("upstream calls %v; want 4, the last two on different upstreams (a failover)", calls)
	}
	hooks := sink.waitCalls(t, "/traced", 1, ofType("task.completed"))

	// The trace, once its last spans are in Jaeger.
	var tr *jaegerproc.Trace
	waitUntil("the trace's spans in Jaeger", 60*time.Second, func() bool {
		tr, err = jc.Trace(ctx, clientTrace)
		if err != nil && !errors.Is(err, jaegerproc.ErrNotFound) {
			t.Fatal(err)
		}
		if tr == nil {
			return false
		}
		for _, name := range []string{"POST /v1/task/create", "queue.parked", "queue.wait", "task.run", "upstream.call", "result.store", "webhook.deliver"} {
			if len(tr.Named(name)) == 0 {
				return false
			}
		}
		return true
	})
	checkTaskTrace(t, tr, id, clientSpan, calls[2])
	// Both workers are in it: the killed one started the task (its queue
	// spans), the other ran the recovered run.
	seen := map[any]bool{}
	for _, s := range tr.Spans {
		if v, ok := s.Attributes["easel.worker"]; ok {
			seen[v] = true
		}
	}
	if len(seen) != 2 {
		t.Errorf("the trace names workers %v; want both (the killed one's queue spans, the other's run)", seen)
	}

	// One trace: every span of the task's create and of its runs and
	// deliveries, in any trace of either service, is in the client's (a
	// query of it is a request of its own, in a trace of its own).
	for _, svc := range []string{"easel-gateway", "easel-worker"} {
		found, err := jc.Find(ctx, svc, time.Hour, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range found {
			for _, s := range other.Spans {
				if s.Service == "easel-gateway" && s.Name != "POST /v1/task/create" {
					continue
				}
				if s.Attributes["easel.task_id"] == id && s.TraceID != clientTrace {
					t.Errorf("span %s (%s) of the task is in trace %s; want all in %s", s.Name, s.Service, s.TraceID, clientTrace)
				}
			}
		}
	}

	// The trace id where people look for it: the record, the webhook (its
	// body and its traceparent), the gateway's log lines of the create.
	_, _, raw := c2.query(id)
	var record struct {
		TraceID string `json:"trace_id"`
	}
	if err := json.Unmarshal(raw, &record); err != nil || record.TraceID != clientTrace {
		t.Errorf("the record's trace_id %q (%v); want %s", record.TraceID, err, clientTrace)
	}
	if tp := hooks[0].header.Get("traceparent"); !strings.HasPrefix(tp, "00-"+clientTrace+"-") {
		t.Errorf("the webhook's traceparent %q; want one of trace %s", tp, clientTrace)
	}
	var delivered struct {
		Data struct {
			TraceID string `json:"trace_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(hooks[0].body, &delivered); err != nil || delivered.Data.TraceID != clientTrace {
		t.Errorf("the webhook body's trace_id %q (%v); want %s", delivered.Data.TraceID, err, clientTrace)
	}
	checkGatewayLogTrace(t, gw.log.Name(), requestID, clientTrace)
}

// checkTaskTrace: the trace of task id has both services' spans, each
// where it belongs and in the task's order, the failed upstream call (on
// failedUpstream) marked Error.
func checkTaskTrace(t *testing.T, tr *jaegerproc.Trace, id, clientSpan, failedUpstream string) {
	t.Helper()
	var names []string
	for _, s := range tr.Spans {
		names = append(names, s.Service+"/"+s.Name)
	}
	t.Logf("trace %s: %d spans: %v", tr.TraceID, len(tr.Spans), names)
	if svcs := tr.Services(); !slices.Contains(svcs, "easel-gateway") || !slices.Contains(svcs, "easel-worker") {
		t.Errorf("services %v; want easel-gateway and easel-worker", svcs)
	}
	one := func(name, service string) jaegerproc.Span {
		t.Helper()
		var out []jaegerproc.Span
		for _, s := range tr.Named(name) {
			if s.Service == service {
				out = append(out, s)
			}
		}
		if len(out) != 1 {
			t.Fatalf("%d spans %s of %s; want 1 (spans: %v)", len(out), name, service, names)
		}
		return out[0]
	}
	gatewaySpan := func(s jaegerproc.Span) bool {
		p, ok := tr.Span(s.ParentID)
		return ok && p.Service == "easel-gateway"
	}

	create := one("POST /v1/task/create", "easel-gateway")
	if create.Kind != "server" || create.ParentID != clientSpan || create.Attributes["easel.task_id"] != id {
		t.Errorf("create span: kind %s, parent %s, task %v; want server, the client's %s, %s", create.Kind, create.ParentID, create.Attributes["easel.task_id"], clientSpan, id)
	}
	parked := one("queue.parked", "easel-worker")
	wait := one("queue.wait", "easel-worker")
	for _, s := range []jaegerproc.Span{parked, wait} {
		if !gatewaySpan(s) {
			t.Errorf("%s's parent %s is not a span of the create", s.Name, s.ParentID)
		}
	}

	// The run that completed it: the one whose upstream calls are in the
	// trace (the killed run's spans died with its worker).
	var run jaegerproc.Span
	var upstreamCalls []jaegerproc.Span
	for _, r := range tr.Named("task.run") {
		var ucs []jaegerproc.Span
		for _, u := range tr.Named("upstream.call") {
			if u.ParentID == r.SpanID {
				ucs = append(ucs, u)
			}
		}
		if len(ucs) > 0 {
			run, upstreamCalls = r, ucs
		}
	}
	if run.SpanID == "" {
		t.Fatalf("no task.run span with upstream.call children (spans: %v)", names)
	}
	if run.Service != "easel-worker" || run.Kind != "consumer" || run.Attributes["easel.task_id"] != id || !gatewaySpan(run) {
		t.Errorf("task.run: service %s, kind %s, task %v, parent %s; want easel-worker, consumer, %s, a span of the create", run.Service, run.Kind, run.Attributes["easel.task_id"], run.ParentID, id)
	}
	if r, _ := run.Attributes["easel.run"].(string); !strings.HasPrefix(r, id+".r") {
		t.Errorf("task.run's easel.run %q; want a later run than the first, %s (it died with its worker)", r, id)
	}
	if len(upstreamCalls) != 2 {
		t.Fatalf("%d upstream.call spans under the run; want 2 (a 500, then the other upstream)", len(upstreamCalls))
	}
	failed, succeeded := upstreamCalls[0], upstreamCalls[1]
	if !failed.Error || succeeded.Error {
		t.Errorf("upstream.call errors: %v then %v; want the first (a 500) marked Error, the second not", failed.Error, succeeded.Error)
	}
	if failed.Attributes["easel.upstream"] != failedUpstream || succeeded.Attributes["easel.upstream"] == failedUpstream {
		t.Errorf("upstream.call upstreams %v then %v; want %s then the other", failed.Attributes["easel.upstream"], succeeded.Attributes["easel.upstream"], failedUpstream)
	}
	for _, u := range upstreamCalls {
		if v := u.Attributes["easel.breaker"]; !slices.Contains([]any{"closed", "open", "half-open", "skipped"}, v) {
			t.Errorf("upstream.call on %v: easel.breaker %v; want the breaker's verdict", u.Attributes["easel.upstream"], v)
		}
	}
	failover := false
	for _, u := range upstreamCalls {
		for _, ev := range u.Events {
			failover = failover || ev.Name == "failover"
		}
	}
	if !failover {
		t.Errorf("no failover event on the run's upstream calls: %+v", upstreamCalls)
	}
	store := one("result.store", "easel-worker")
	if store.ParentID != run.SpanID {
		t.Errorf("result.store's parent %s; want the run %s", store.ParentID, run.SpanID)
	}
	deliver := one("webhook.deliver", "easel-worker")
	if deliver.Attributes["easel.task_id"] != id {
		t.Errorf("webhook.deliver's task %v; want %s", deliver.Attributes["easel.task_id"], id)
	}

	// In the task's order. The queue spans start at times the store keeps
	// (milliseconds): a millisecond's slack.
	order := []jaegerproc.Span{create, parked, wait, run, failed, succeeded, store, deliver}
	for i := 1; i < len(order); i++ {
		a, b := order[i-1], order[i]
		if b.Start.Before(a.Start.Add(-time.Millisecond)) {
			t.Errorf("%s starts at %s, before %s at %s", b.Name, b.Start.Format(time.StampMicro), a.Name, a.Start.Format(time.StampMicro))
		}
	}
	if parked.Start.Add(parked.Duration).After(wait.Start.Add(time.Millisecond)) {
		t.Errorf("queue.parked ends at %s, after queue.wait starts at %s", parked.Start.Add(parked.Duration).Format(time.StampMicro), wait.Start.Format(time.StampMicro))
	}
}

// checkGatewayLogTrace: the gateway's JSON log lines of the request with
// X-Request-Id requestID (its access log line at least) carry trace.
func checkGatewayLogTrace(t *testing.T, path, requestID, trace string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	access := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg             string `json:"msg"`
			Path            string `json:"path"`
			ClientRequestID string `json:"client_request_id"`
			TraceID         string `json:"trace_id"`
			SpanID          string `json:"span_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.ClientRequestID != requestID {
			continue
		}
		if line.TraceID != trace || len(line.SpanID) != 16 {
			t.Errorf("gateway log line of the create with trace_id %q, span_id %q; want trace %s: %s", line.TraceID, line.SpanID, trace, sc.Bytes())
		}
		access = access || line.Msg == "request" && line.Path == "/v1/task/create"
	}
	if !access {
		t.Errorf("no access log line of the create (client_request_id %s) in %s", requestID, path)
	}
}
