package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen"
	"github.com/easelhq/easel/worker/imagegen/procedural"
	"github.com/easelhq/easel/worker/internal/fetch"
	"github.com/easelhq/easel/worker/internal/processor"
)

// traceReceiver is a webhook receiver: the traceparent header of the first
// delivery to each path ("/<task id>"), "" for one without.
type traceReceiver struct {
	mu  sync.Mutex
	got map[string]string
}

func (h *traceReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, seen := h.got[r.URL.Path]; !seen {
		h.got[r.URL.Path] = r.Header.Get("traceparent")
	}
}

func (h *traceReceiver) header(id string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.got["/"+id]
	return v, ok
}

// waitTraced polls cond on a ticker until it holds, failing the test after
// within.
func waitTraced(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("%s: not within %v", what, within)
		case <-tick.C:
		}
	}
}

func spanAttr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// A traced task's run joins the trace of its create, whether its job
// carries the create's trace context or (queued by a recovery or a
// promotion) only the task's record does: the queue's wait, the run, its
// source fetch, its upstream call, its result's storing and its webhook
// delivery are spans of it, and the delivery carries it to the receiver.
// An untraced task makes no span and sends no traceparent; with tracing
// off, neither does a traced one.
func TestRunTrace(t *testing.T) {
	var src bytes.Buffer
	if err := png.Encode(&src, image.NewRGBA(image.Rect(0, 0, 64, 48))); err != nil {
		t.Fatal(err)
	}
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(src.Bytes())
	}))
	t.Cleanup(images.Close)

	type run struct {
		name               string
		recordTP, recordTS string // the task record's trace context
		jobTP              string // the job's
	}
	const tp1, tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	runs := []run{
		{name: "the job carries the trace", recordTP: tp1, jobTP: tp1},
		{name: "queued by a recovery: the job carries none", recordTP: tp2},
		{name: "untraced"},
	}
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("tracing on %v", on), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			tr := tracing.Noop()
			if on {
				tr = tracing.FromProvider(tp)
			}
			hooks := &traceReceiver{got: map[string]string{}}
			receiver := httptest.NewServer(hooks)
			t.Cleanup(receiver.Close)
			var ports []string
			for _, u := range []string{images.URL, receiver.URL} {
				pu, _ := url.Parse(u)
				ports = append(ports, pu.Port())
			}
			gen, err := procedural.New(procedural.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv := redistest.Start(t)
			addr := runWorkerWith(t, srv.URL, map[string]string{
				"EASEL_FETCH_ALLOW_PRIVATE": "true", "EASEL_FETCH_PORTS": strings.Join(ports, ","), "EASEL_QUEUES": "standard",
			}, Options{Generator: gen, Tracing: tr})
			localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 10*time.Second)

			ctx := context.Background()
			rdb := srv.Client(t)
			db := store.NewDB(rdb, store.Options{})
			tasks, q := store.NewTasks(db), jobs.NewEnqueuer(rdb)
			acct, err := store.NewAccounts(db).Create(ctx, account.Spec{Name: "traced", Credits: 100})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range runs {
				id := fmt.Sprintf("task_lumen_%d", i+1)
				now := time.Now()
				j := jobs.GenerateImage{TaskID: id, AccountID: acct.ID, CreateTime: now, Deadline: now.Add(time.Hour),
					Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", ImageSize: "1K",
						ImageURLs: []string{images.URL + "/src.png"}}}
				input, err := jobs.EncodeInput(j.Input)
				if err != nil {
					t.Fatal(err)
				}
				rec := &task.Task{ID: id, AccountID: acct.ID, Type: task.Type, Model: j.Input.Model.ID, CreateTime: now, TraceParent: r.recordTP,
					Callback: task.Callback{URL: receiver.URL + "/" + id, Events: []string{task.EventCompleted}}}
				if _, err := tasks.Create(ctx, rec, task.Charge{Price: 1, Tier: "standard", CountUntil: j.Deadline.Add(jobs.CountMargin), Queue: jobs.Queue(catalog.Standard)}, input); err != nil {
					t.Fatal(err)
				}
				ref := jobs.RefOf(j)
				ref.TraceParent = r.jobTP
				if err := q.EnqueueGenerateImage(ctx, ref, id); err != nil {
					t.Fatal(err)
				}
			}

			for i, r := range runs {
				t.Run(r.name, func(t *testing.T) {
					id := fmt.Sprintf("task_lumen_%d", i+1)
					waitTraced(t, 20*time.Second, "the task's webhook delivered", func() bool { _, ok := hooks.header(id); return ok })
					header, _ := hooks.header(id)
					traced := on && r.recordTP != ""
					if !traced {
						if header != "" {
							t.Errorf("the delivery carries traceparent %q; want none", header)
						}
						for _, s := range exp.GetSpans() {
							if spanAttr(s, "easel.task_id") == id {
								t.Errorf("span %s of an untraced run", s.Name)
							}
						}
						return
					}
					create := tracing.Extract(ctx, r.recordTP, r.recordTS)
					parent := trace.SpanContextFromContext(create)
					if got := tracing.TraceIDOf(header); got != parent.TraceID().String() {
						t.Errorf("the delivery carries traceparent %q; want one of trace %s", header, parent.TraceID())
					}
					// The delivery's span ends once its answer is read.
					var spans map[string][]tracetest.SpanStub
					waitTraced(t, 10*time.Second, "the delivery's span", func() bool {
						spans = map[string][]tracetest.SpanStub{}
						for _, s := range exp.GetSpans() {
							if s.SpanContext.TraceID() == parent.TraceID() {
								spans[s.Name] = append(spans[s.Name], s)
							}
						}
						return len(spans["webhook.deliver"]) > 0
					})
					for _, name := range []string{"task.run", "queue.wait", "source.fetch", "upstream.call", "result.store", "webhook.deliver"} {
						if len(spans[name]) != 1 {
							t.Fatalf("%d %q spans in the task's trace; want 1 (spans: %v)", len(spans[name]), name, slices.Sorted(maps.Keys(spans)))
						}
						if s := spans[name][0]; s.Status.Code == codes.Error {
							t.Errorf("%s: status %v", name, s.Status)
						}
					}
					runSpan := spans["task.run"][0]
					if runSpan.SpanKind != trace.SpanKindConsumer || runSpan.Parent.SpanID() != parent.SpanID() {
						t.Errorf("task.run: kind %v, parent %v; want a consumer span, child of the create %v", runSpan.SpanKind, runSpan.Parent.SpanID(), parent.SpanID())
					}
					for k, want := range map[string]string{"easel.task_id": id, "easel.run": id} {
						if got := spanAttr(runSpan, k); got != want {
							t.Errorf("task.run: %s %q; want %q", k, got, want)
						}
					}
					if spanAttr(runSpan, "easel.worker") == "" {
						t.Error("task.run names no worker")
					}
					if w := spans["queue.wait"][0]; w.Parent.SpanID() != parent.SpanID() || w.EndTime.After(runSpan.EndTime) || w.StartTime.After(w.EndTime) {
						t.Errorf("queue.wait: parent %v, %v to %v; want a child of the create, before the run ends", w.Parent.SpanID(), w.StartTime, w.EndTime)
					}
					for _, name := range []string{"source.fetch", "upstream.call", "result.store"} {
						if s := spans[name][0]; s.Parent.SpanID() != runSpan.SpanContext.SpanID() {
							t.Errorf("%s is not a child of task.run", name)
						}
					}
					if up := spans["upstream.call"][0]; spanAttr(up, "easel.upstream") == "" || spanAttr(up, "easel.breaker") == "" {
						t.Errorf("upstream.call names no upstream or breaker: %v", up.Attributes)
					}
					d := spans["webhook.deliver"][0]
					if spanAttr(d, "easel.task_id") != id || spanAttr(d, "easel.event") != task.EventCompleted || spanAttr(d, "http.response.status_code") != "200" {
						t.Errorf("webhook.deliver attributes %v", d.Attributes)
					}
				})
			}

			// The stages' histograms name a traced run's trace in their
			// exemplars, which the metrics endpoint serves in OpenMetrics.
			req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			// A bucket keeps its latest exemplar: either traced run's may be
			// the one a bucket shows.
			has := false
			for _, tp := range []string{tp1, tp2} {
				has = has || bytes.Contains(body, []byte(`trace_id="`+tracing.TraceIDOf(tp)+`"`))
			}
			if has != on {
				t.Errorf("the OpenMetrics exposition names a traced run's trace: %v; want %v", has, on)
			}
		})
	}
}

// Every line a traced run logs names its trace and its span (task.run),
// beside its task; an untraced run's name neither.
func TestRunLogsNameTheTrace(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for name, traced := range map[string]bool{"traced": true, "untraced": false} {
		t.Run(name, func(t *testing.T) {
			e := newHookEnv(t)
			exp := tracetest.NewInMemoryExporter()
			provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
			blobs, err := blob.OpenFS(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = blobs.Close() })
			gen, err := procedural.New(procedural.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cat, err := catalog.New("lumen")
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			p := processor.New(e.tasks, blobs, gen, fetch.New(fetch.Options{}), cat, zap.New(core),
				processor.Options{Tracing: tracing.FromProvider(provider), Upstream: "procedural"})
			j := e.pending(t, "task_lumen_1", "")
			ref := jobs.RefOf(j)
			if traced {
				ref.TraceParent = tp
			}
			if err := p.Process(context.Background(), ref, processor.Attempt{Run: j.TaskID}); err != nil {
				t.Fatal(err)
			}
			var run tracetest.SpanStub
			for _, s := range exp.GetSpans() {
				if s.Name == processor.SpanRun {
					run = s
				}
			}
			if traced != run.SpanContext.IsValid() {
				t.Fatalf("a task.run span: %v; want %v", run.SpanContext.IsValid(), traced)
			}
			if logs.Len() == 0 {
				t.Fatal("the run logged nothing")
			}
			for _, l := range logs.All() {
				f := l.ContextMap()
				want := map[string]any{"task_id": j.TaskID, "trace_id": nil, "span_id": nil}
				if traced {
					want["trace_id"], want["span_id"] = run.SpanContext.TraceID().String(), run.SpanContext.SpanID().String()
				}
				for k, v := range want {
					if f[k] != v {
						t.Errorf("%q logs %s=%v; want %v", l.Message, k, f[k], v)
					}
				}
			}
		})
	}
}

// A traced task parked for a place, then admitted when another task of
// its account ends (the worker that ended it queues its run, with no
// trace context), joins its create's trace: its time parked (creation to
// admission) and queued (admission to start) are spans of it, one after
// the other, before its run.
func TestParkedRunTrace(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exp := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	srv := redistest.Start(t)
	gen := &heldGenerator{release: map[string]chan struct{}{}}
	addr := runWorkerWith(t, srv.URL, map[string]string{"EASEL_ACCOUNT_MAX_RUNNING": "1", "EASEL_QUEUES": "standard"},
		Options{Generator: gen, Tracing: tracing.FromProvider(provider)})
	localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 10*time.Second)
	ctx := context.Background()
	rdb := srv.Client(t)
	db := store.NewDB(rdb, store.Options{Share: 1})
	tasks, q := store.NewTasks(db), jobs.NewEnqueuer(rdb)
	acct, err := store.NewAccounts(db).Create(ctx, account.Spec{Name: "parked", Credits: 100})
	if err != nil {
		t.Fatal(err)
	}
	create := func(id, traceparent string) bool {
		t.Helper()
		now := time.Now()
		j := jobs.GenerateImage{TaskID: id, AccountID: acct.ID, CreateTime: now, Deadline: now.Add(time.Hour),
			Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
		input, err := jobs.EncodeInput(j.Input)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tasks.Create(ctx, &task.Task{ID: id, AccountID: acct.ID, Type: task.Type, Model: j.Input.Model.ID, CreateTime: now, TraceParent: traceparent},
			task.Charge{Price: 1, Tier: "standard", CountUntil: j.Deadline.Add(jobs.CountMargin), Queue: jobs.Queue(catalog.Standard)}, input)
		if err != nil {
			t.Fatal(err)
		}
		if c.Admitted {
			if err := q.EnqueueGenerateImage(ctx, jobs.RefOf(j), id); err != nil {
				t.Fatal(err)
			}
		}
		return c.Admitted
	}
	if !create("task_lumen_1", "") {
		t.Fatal("the account's first task was parked")
	}
	t.Cleanup(func() {
		for _, id := range []string{"task_lumen_1", "task_lumen_2"} {
			select {
			case <-gen.gate(id):
			default:
				gen.let(id)
			}
		}
	})
	waitTraced(t, 10*time.Second, "the first task running", func() bool { return slices.Contains(gen.began(), "task_lumen_1") })
	if create("task_lumen_2", tp) {
		t.Fatal("the account's second task was admitted; want it parked")
	}
	gen.let("task_lumen_1")
	waitTraced(t, 10*time.Second, "the parked task running", func() bool { return slices.Contains(gen.began(), "task_lumen_2") })
	gen.let("task_lumen_2")

	parent := trace.SpanContextFromContext(tracing.Extract(ctx, tp, ""))
	spans := map[string]tracetest.SpanStub{}
	waitTraced(t, 10*time.Second, "the parked task's run ended", func() bool {
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == parent.TraceID() {
				spans[s.Name] = s
			}
		}
		_, ok := spans["task.run"]
		return ok
	})
	parked, wait, run := spans["queue.parked"], spans["queue.wait"], spans["task.run"]
	for name, s := range map[string]tracetest.SpanStub{"queue.parked": parked, "queue.wait": wait} {
		if s.Parent.SpanID() != parent.SpanID() {
			t.Errorf("%s: parent %v; want the create %v", name, s.Parent.SpanID(), parent.SpanID())
		}
	}
	if run.Parent.SpanID() != parent.SpanID() {
		t.Errorf("task.run: parent %v; want the create %v", run.Parent.SpanID(), parent.SpanID())
	}
	if parked.StartTime.IsZero() || !parked.EndTime.Equal(wait.StartTime) || parked.EndTime.Before(parked.StartTime) || wait.EndTime.Before(wait.StartTime) {
		t.Errorf("parked %v to %v, then queued %v to %v; want one after the other", parked.StartTime, parked.EndTime, wait.StartTime, wait.EndTime)
	}
	for _, s := range exp.GetSpans() {
		if spanAttr(s, "easel.task_id") == "task_lumen_1" {
			t.Errorf("span %s of the untraced first task", s.Name)
		}
	}
}

// flakyGenerator fails its first call with a retryable upstream error,
// then makes an image.
type flakyGenerator struct {
	imagegen.Generator
	calls atomic.Int32
}

func (g *flakyGenerator) Generate(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error) {
	if g.calls.Add(1) == 1 {
		return nil, apperr.Transient(errors.New("503"), task.UpstreamUnavailable, "the image model is unavailable")
	}
	return g.Generator.Generate(ctx, req, progress)
}

// Outside the pool, each call to the generator is an "upstream.call" span
// of the run: a failed call an error, the retry after it another span.
func TestUpstreamCallRetried(t *testing.T) {
	e := newHookEnv(t)
	exp := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	blobs, err := blob.OpenFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blobs.Close() })
	proc, err := procedural.New(procedural.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New("lumen")
	if err != nil {
		t.Fatal(err)
	}
	p := processor.New(e.tasks, blobs, &flakyGenerator{Generator: proc}, fetch.New(fetch.Options{}), cat, zap.NewNop(),
		processor.Options{Tracing: tracing.FromProvider(provider), Upstream: "procedural",
			Retry: processor.Retry{MaxAttempts: 2, MaxElapsed: time.Minute, Initial: time.Millisecond, MaxInterval: time.Millisecond}})
	j := e.pending(t, "task_lumen_1", "")
	ref := jobs.RefOf(j)
	ref.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if err := p.Process(context.Background(), ref, processor.Attempt{Run: j.TaskID}); err != nil {
		t.Fatal(err)
	}
	var calls []tracetest.SpanStub
	var run tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case processor.SpanCall:
			calls = append(calls, s)
		case processor.SpanRun:
			run = s
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d upstream.call spans; want 2", len(calls))
	}
	for i, wantErr := range []bool{true, false} {
		s := calls[i]
		if (s.Status.Code == codes.Error) != wantErr || s.Parent.SpanID() != run.SpanContext.SpanID() {
			t.Errorf("call %d: status %v, parent %v; want an error %v, child of task.run", i+1, s.Status, s.Parent.SpanID(), wantErr)
		}
		if spanAttr(s, "easel.upstream") != "procedural" || spanAttr(s, "easel.breaker") != processor.BreakerNone {
			t.Errorf("call %d: attributes %v", i+1, s.Attributes)
		}
	}
	if run.Status.Code == codes.Error {
		t.Errorf("task.run of a completed task: status %v", run.Status)
	}
}
