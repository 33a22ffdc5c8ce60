package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/taskview"
	"github.com/easelhq/easel/pkg/webhook"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen/procedural"
	"github.com/easelhq/easel/worker/internal/fetch"
	"github.com/easelhq/easel/worker/internal/processor"
)

// hookReceiver is a webhook endpoint answering its scripted statuses in
// turn (the last one again once they run out), recording each request.
type hookReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	// answers are "status" or "status,retry-after seconds".
	answers []string
	got     []hookRequest
}

type hookRequest struct {
	header http.Header
	body   []byte
}

func newHookReceiver(t *testing.T, answers ...string) *hookReceiver {
	t.Helper()
	r := &hookReceiver{answers: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(req.Body)
		b := body.Bytes()
		r.mu.Lock()
		i := len(r.got)
		r.got = append(r.got, hookRequest{header: req.Header.Clone(), body: b})
		a := r.answers[min(i, len(r.answers)-1)]
		r.mu.Unlock()
		code, after, _ := bytes.Cut([]byte(a), []byte(","))
		if len(after) > 0 {
			w.Header().Set("Retry-After", string(after))
		}
		n, _ := strconv.Atoi(string(code))
		w.WriteHeader(n)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) requests() []hookRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookRequest(nil), r.got...)
}

type hookEnv struct {
	tasks  *store.Tasks
	hooks  *store.Hooks
	leases *store.Leases
	rdb    *redis.Client
	q      *jobs.Enqueuer
	acct   string
	signer *signedurl.Signer
	h      *hooks
}

func newHookEnv(t *testing.T) *hookEnv {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	db := store.NewDB(rdb, store.Options{})
	a, err := store.NewAccounts(db).Create(context.Background(), account.Spec{Name: "hooks", Credits: 1000})
	if err != nil {
		t.Fatal(err)
	}
	e := &hookEnv{tasks: store.NewTasks(db), hooks: store.NewHooks(db), leases: store.NewLeases(db), rdb: rdb, q: jobs.NewEnqueuer(rdb), acct: a.ID,
		signer: signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "https://img.example.com")}
	client := webhook.NewClient(webhook.Options{Policy: egress.Policy{AllowPrivate: true}, Timeout: time.Second})
	e.h = newHooks(e.hooks, e.tasks, e.q, client, e.signer, webhook.Schedule{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond, Span: 100 * time.Millisecond}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	return e
}

// completed makes a task of the account with a callback to url wanting
// events, and completes it; the store must say the completion's webhook
// event is due exactly when the callback wants it.
func (e *hookEnv) completed(t *testing.T, id, url string, events ...string) *task.Task {
	t.Helper()
	ctx := context.Background()
	rec := &task.Task{ID: id, AccountID: e.acct, Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: time.Now(),
		Callback: task.Callback{URL: url, Events: events}}
	if _, err := e.tasks.Create(ctx, rec, task.Charge{Price: 4, Tier: "standard", CountUntil: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := e.tasks.Start(ctx, e.acct, id, id); c.Outcome != task.Applied || err != nil {
		t.Fatal(c, err)
	}
	results := []task.Result{{Key: "2026112214/abc.png", ContentType: "image/png", Size: 10, Width: 1, Height: 1}}
	c, err := e.tasks.Complete(ctx, e.acct, id, id, results)
	if c.Outcome != task.Applied || err != nil {
		t.Fatal(c, err)
	}
	if want := url != "" && slices.Contains(events, task.EventCompleted); c.Hooked != want {
		t.Fatalf("completion of a task whose callback wants %v: hooked %v, want %v", events, c.Hooked, want)
	}
	got, err := e.tasks.Get(ctx, e.acct, id)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (e *hookEnv) deliveries(t *testing.T, id string) []webhook.Delivery {
	t.Helper()
	ds, err := e.hooks.Deliveries(context.Background(), e.acct, id)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// Each attempt's outcome and what deliver does with it: the state it
// records, and whether Asynq is to retry, give up (errGiveUp) or stop.
func TestHookDeliver(t *testing.T) {
	type step struct {
		retried   int
		wantErr   string // "" nil, "retry", "skip"
		wantState webhook.State
		after     time.Duration // a retry's Retry-After
	}
	tests := []struct {
		name    string
		answers []string
		steps   []step
		hits    int
	}{
		{"delivered at once", []string{"200"}, []step{{0, "", webhook.StateDelivered, 0}}, 1},
		{"503, then 204", []string{"503", "204"}, []step{{0, "retry", webhook.StateRetrying, 0}, {1, "", webhook.StateDelivered, 0}}, 2},
		{"429 with Retry-After, then 200", []string{"429,30", "200"}, []step{{0, "retry", webhook.StateRetrying, 30 * time.Second}, {1, "", webhook.StateDelivered, 0}}, 2},
		{"400 is not retried", []string{"400"}, []step{{0, "skip", webhook.StateFailed, 0}}, 1},
		{"302 is not followed", []string{"302"}, []step{{0, "skip", webhook.StateFailed, 0}}, 1},
		{"500 until the retries run out", []string{"500"}, []step{{0, "retry", webhook.StateRetrying, 0}, {1, "retry", webhook.StateRetrying, 0}, {2, "retry", webhook.StateRetrying, 0}, {3, "retry", webhook.StateRetrying, 0}, {4, "skip", webhook.StateFailed, 0}}, 5},
		{"a duplicate job after the end does nothing", []string{"200"}, []step{{0, "", webhook.StateDelivered, 0}, {0, "", webhook.StateDelivered, 0}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newHookEnv(t)
			if n := e.h.schedule.Retries(); n != 4 {
				t.Fatalf("the test schedule makes %d retries; the cases assume 4", n)
			}
			rc := newHookReceiver(t, tt.answers...)
			tk := e.completed(t, "task_lumen_1", rc.srv.URL+"/hook", task.DefaultEvents...)
			d := jobs.DeliverWebhook{AccountID: e.acct, TaskID: tk.ID, Event: task.EventCompleted}
			for i, s := range tt.steps {
				err := e.h.deliver(context.Background(), d, s.retried)
				var rl *retryLater
				switch {
				case s.wantErr == "" && err != nil,
					s.wantErr == "retry" && !errors.As(err, &rl),
					s.wantErr == "skip" && !errors.Is(err, errGiveUp):
					t.Fatalf("step %d: deliver = %v; want %s", i, err, s.wantErr)
				}
				if s.after > 0 && (rl.after != s.after || e.h.retryDelay(s.retried, err) != s.after) {
					t.Errorf("step %d: retry after %v (delay %v); want %v", i, rl.after, e.h.retryDelay(s.retried, err), s.after)
				}
				if ds := e.deliveries(t, tk.ID); len(ds) != 1 || ds[0].State != s.wantState {
					t.Fatalf("step %d: deliveries %+v; want one %s", i, ds, s.wantState)
				}
			}
			reqs := rc.requests()
			if len(reqs) != tt.hits {
				t.Fatalf("%d requests; want %d", len(reqs), tt.hits)
			}
			ds := e.deliveries(t, tk.ID)
			if len(ds[0].Attempts) != tt.hits {
				t.Errorf("%d attempts recorded; want %d", len(ds[0].Attempts), tt.hits)
			}
			secret, _ := e.hooks.Secret(context.Background(), e.acct)
			want, _ := json.Marshal(taskview.New(tk, e.signer))
			for i, r := range reqs {
				if err := webhook.Verify(secret, r.header, r.body, time.Now()); err != nil {
					t.Errorf("request %d does not verify: %v", i, err)
				}
				if id := r.header.Get(webhook.HeaderID); id != "msg_task_lumen_1_completed" {
					t.Errorf("request %d: webhook-id %q", i, id)
				}
				if !bytes.Equal(r.body, reqs[0].body) {
					t.Errorf("request %d's body differs from the first's:\n%s\n%s", i, r.body, reqs[0].body)
				}
				var p struct {
					Type      string          `json:"type"`
					Timestamp string          `json:"timestamp"`
					Data      json.RawMessage `json:"data"`
				}
				if err := json.Unmarshal(r.body, &p); err != nil || p.Type != task.EventCompleted || string(p.Data) != string(want) {
					t.Errorf("request %d: %s; want data %s (%v)", i, r.body, want, err)
				}
				if ts, err := time.Parse(time.RFC3339Nano, p.Timestamp); err != nil || !ts.Equal(tk.CompleteTime) {
					t.Errorf("timestamp %q; want the completion time %v", p.Timestamp, tk.CompleteTime)
				}
			}
			for i, a := range ds[0].Attempts {
				code, _ := strconv.Atoi(tt.answers[min(i, len(tt.answers)-1)][:3])
				if a.StatusCode != code || a.Time.IsZero() || (code >= 300) != (a.Error != "") {
					t.Errorf("attempt %d = %+v; want status %d", i, a, code)
				}
			}
		})
	}
}

// A rotated secret signs beside the new one for a day.
func TestHookDeliverRotatedSecret(t *testing.T) {
	e := newHookEnv(t)
	ctx := context.Background()
	old, _ := e.hooks.Secret(ctx, e.acct)
	cur, _, err := e.hooks.RotateSecret(ctx, e.acct)
	if err != nil {
		t.Fatal(err)
	}
	rc := newHookReceiver(t, "200")
	tk := e.completed(t, "task_lumen_1", rc.srv.URL, task.DefaultEvents...)
	if err := e.h.deliver(ctx, jobs.DeliverWebhook{AccountID: e.acct, TaskID: tk.ID, Event: task.EventCompleted}, 0); err != nil {
		t.Fatal(err)
	}
	r := rc.requests()[0]
	for _, s := range []string{old, cur} {
		if err := webhook.Verify(s, r.header, r.body, time.Now()); err != nil {
			t.Errorf("not verified by %s: %v (signature %q)", s[:10], err, r.header.Get(webhook.HeaderSignature))
		}
	}
}

// pending makes a pending task of the account with a callback to url
// wanting events (the record keeps it), its input kept as the gateway
// keeps it, and returns its job.
func (e *hookEnv) pending(t *testing.T, id, url string, events ...string) jobs.GenerateImage {
	t.Helper()
	now := time.Now()
	j := jobs.GenerateImage{TaskID: id, AccountID: e.acct, CreateTime: now, Deadline: now.Add(time.Hour),
		Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
	input, err := jobs.EncodeInput(j.Input)
	if err != nil {
		t.Fatal(err)
	}
	rec := &task.Task{ID: id, AccountID: e.acct, Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: now,
		Callback: task.Callback{URL: url, Events: events}}
	if _, err := e.tasks.Create(context.Background(), rec, task.Charge{Price: 4, Tier: "standard", CountUntil: now.Add(time.Hour)}, input); err != nil {
		t.Fatal(err)
	}
	return j
}

// processor is the worker's processor on e's task store, queueing webhook
// events through e.h, as Run wires it.
func (e *hookEnv) processor(t *testing.T) *processor.Processor {
	t.Helper()
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
	return processor.New(e.tasks, blobs, gen, fetch.New(fetch.Options{}), cat, zap.NewNop(), processor.Options{Hooks: e.h, Admitter: e.q})
}

// webhookJobs lists the ids of the deliveries waiting on the webhook
// queue.
func (e *hookEnv) webhookJobs(t *testing.T) map[string]bool {
	t.Helper()
	infos, err := asynq.NewInspectorFromRedisClient(e.rdb).ListPendingTasks(jobs.WebhookQueue)
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, ti := range infos {
		out[ti.ID] = true
	}
	return out
}

// Nothing is queued, or sent, for an event the callback does not want:
// the store decides which events are due as it ends the task, and the run
// that ended it queues those only. A task whose record is gone is given up
// on, recorded.
func TestHookDeliverNothingToSend(t *testing.T) {
	e := newHookEnv(t)
	ctx := context.Background()
	rc := newHookReceiver(t, "200")
	proc := e.processor(t)
	unwanted := e.pending(t, "task_lumen_1", rc.srv.URL, task.EventFailed)
	wanted := e.pending(t, "task_lumen_2", rc.srv.URL, task.DefaultEvents...)
	for _, j := range []jobs.GenerateImage{unwanted, wanted} {
		if err := proc.Process(ctx, jobs.RefOf(j), processor.Attempt{Run: j.TaskID, MaxRetry: 3}); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.tasks.Get(ctx, e.acct, j.TaskID); got.Status != task.Completed {
			t.Fatalf("%s: %s; want completed", j.TaskID, got.Status)
		}
	}
	if q := e.webhookJobs(t); len(q) != 1 || !q[jobs.WebhookID("task_lumen_2", task.EventCompleted, 0)] {
		t.Errorf("queued %v; want task_lumen_2's completion only", q)
	}
	if ds := e.deliveries(t, "task_lumen_1"); len(ds) != 0 {
		t.Errorf("deliveries of an event the callback does not want: %+v", ds)
	}
	if due := e.outbox(t, time.Now().Add(time.Hour)); len(due) != 0 {
		t.Errorf("outbox %+v; want nothing left", due)
	}
	err := e.h.deliver(ctx, jobs.DeliverWebhook{AccountID: e.acct, TaskID: "task_lumen_gone", Event: task.EventCompleted}, 0)
	if !errors.Is(err, errGiveUp) {
		t.Errorf("deliver for a task gone = %v; want errGiveUp", err)
	}
	if n := len(rc.requests()); n != 0 {
		t.Errorf("%d requests", n)
	}
	if ds := e.deliveries(t, "task_lumen_gone"); len(ds) != 1 || ds[0].State != webhook.StateFailed || ds[0].Attempts[0].Error == "" {
		t.Errorf("deliveries of the task gone: %+v", ds)
	}
}

type failingQueue struct{}

func (failingQueue) QueueHook(context.Context, jobs.Outbox, jobs.DeliverWebhook) error {
	return errors.New("queue down")
}

// outbox returns the final webhook events of the account's tasks left
// unqueued on its shard's due work, due by at. Reading moves them on
// (store.Tasks.Due): a later read or poll must look later still.
func (e *hookEnv) outbox(t *testing.T, at time.Time) []store.DueEntry {
	t.Helper()
	w, err := e.tasks.Due(context.Background(), store.ShardOf(e.acct), at, 100)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(w.Entries, func(d store.DueEntry) bool { return d.Kind != store.DueHook })
}

// recovery is the worker's recovery on e's stores, queueing webhook events
// through e.h, as Run wires it.
func (e *hookEnv) recovery(holder string) *recovery {
	return newRecovery(e.tasks, e.leases, e.q, e.h, nil, holder, e.h.log)
}

// Notify queues the event and takes a final one off the outbox; when it
// cannot queue, the event stays in the outbox and the recovery's poll
// queues it once it is store.HookGrace old, once.
func TestHookNotifyAndRecovery(t *testing.T) {
	e := newHookEnv(t)
	ctx := context.Background()
	queued := func() map[string]bool { return e.webhookJobs(t) }
	e.completed(t, "task_lumen_1", "https://hooks.example.com/", task.Events...)
	e.completed(t, "task_lumen_2", "https://hooks.example.com/", task.Events...)

	e.h.Notify(ctx, e.acct, "task_lumen_1", task.EventCompleted, 0)
	e.h.Notify(ctx, e.acct, "task_lumen_1", task.EventProgress, 50)
	if q := queued(); len(q) != 2 || !q["wh:task_lumen_1:task.completed:0"] || !q["wh:task_lumen_1:task.progress:50"] {
		t.Errorf("queued %v", q)
	}
	if ds := e.deliveries(t, "task_lumen_1"); len(ds) != 2 || ds[0].State != webhook.StatePending || ds[1].State != webhook.StatePending {
		t.Errorf("deliveries %+v; want two pending", ds)
	}

	down := newHooks(e.hooks, e.tasks, failingQueue{}, nil, e.signer, e.h.schedule, e.h.log)
	down.Notify(ctx, e.acct, "task_lumen_2", task.EventCompleted, 0)

	// Too young for the recovery; then old enough: task_lumen_2's event
	// only (task_lumen_1's left the outbox when it was queued).
	r := e.recovery("w1")
	r.lease(ctx)
	if rep := r.poll(ctx); rep.hooked != 0 {
		t.Errorf("recovery queued %d events younger than %v", rep.hooked, store.HookGrace)
	}
	clock := time.Now().Add(store.HookGrace + time.Second)
	if due := e.outbox(t, clock); len(due) != 1 || due[0].TaskID != "task_lumen_2" || due[0].Event != task.EventCompleted {
		t.Fatalf("outbox after a failed Notify %+v; want task_lumen_2's completion", due)
	}
	clock = clock.Add(time.Minute) // past the read's retry
	r.now = func() time.Time { return clock }
	readAll(r)
	if rep := r.poll(ctx); rep.hooked != 1 {
		t.Errorf("recovery queued %d events; want 1", rep.hooked)
	}
	if q := queued(); !q["wh:task_lumen_2:task.completed:0"] || len(q) != 3 {
		t.Errorf("queued %v after the recovery; want task_lumen_2's completion added", q)
	}
	if ds := e.deliveries(t, "task_lumen_2"); len(ds) != 1 || ds[0].State != webhook.StatePending {
		t.Errorf("deliveries of task_lumen_2 %+v; want one pending", ds)
	}
	// Queued, it left the outbox: no later poll queues it again.
	clock = clock.Add(time.Hour)
	readAll(r)
	if rep := r.poll(ctx); rep.hooked != 0 {
		t.Errorf("a later poll queued %d events; want none left", rep.hooked)
	}
	if due := e.outbox(t, clock.Add(time.Hour)); len(due) != 0 {
		t.Errorf("outbox after the recovery %+v", due)
	}
	r.giveBack(ctx)

	// One worker at a time: a shard's events are queued by the worker that
	// holds its lease; while another holds it, a recovery does nothing
	// there, and once that lease runs out it takes the shard and queues
	// what its outbox holds.
	e.completed(t, "task_lumen_3", "https://hooks.example.com/", task.Events...)
	const held = 300 * time.Millisecond
	if got, err := e.leases.TakeShards(ctx, "another-worker", []int{store.ShardOf(e.acct)}, held); err != nil || len(got) != 1 {
		t.Fatalf("TakeShards = %v, %v", got, err)
	}
	taken := time.Now()
	r2 := e.recovery("w2")
	r2.leaseEvery, r2.leaseTTL, r2.pollEvery = 20*time.Millisecond, 200*time.Millisecond, 10*time.Millisecond
	later := time.Now().Add(store.HookGrace + time.Second)
	r2.now = func() time.Time { return later } // the event is due at once
	loopCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r2.run(loopCtx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !queued()["wh:task_lumen_3:task.completed:0"] {
		if time.Now().After(deadline) {
			t.Fatal("the recovery never queued the event once the other worker's lease ran out")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first := time.Since(taken)
	// Queued, then recorded queued (off the outbox) in a second step:
	// stopping the loop between the two would leave it for a later poll.
	for ds := e.deliveries(t, "task_lumen_3"); len(ds) != 1 || ds[0].State != webhook.StatePending; ds = e.deliveries(t, "task_lumen_3") {
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of task_lumen_3 %+v; want one pending", ds)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-done
	if first < held-5*time.Millisecond {
		t.Errorf("the event was queued %v after another worker took its shard's lease for %v", first, held)
	}
	if due := e.outbox(t, later.Add(time.Hour)); len(due) != 0 {
		t.Errorf("outbox after the recovery loop %+v", due)
	}
}

// The webhook server takes deliveries off their queue, retries them on
// the schedule, and leaves the generation queues alone.
func TestHookServer(t *testing.T) {
	e := newHookEnv(t)
	ctx := context.Background()
	rc := newHookReceiver(t, "500", "500", "200")
	e.completed(t, "task_lumen_1", rc.srv.URL, task.DefaultEvents...)
	bad := newHookReceiver(t, "404")
	e.completed(t, "task_lumen_2", bad.srv.URL, task.DefaultEvents...)
	cfg, err := LoadConfig(environ("EASEL_WEBHOOK_CONCURRENCY", "2", "EASEL_SHUTDOWN_TIMEOUT", "1s"))
	if err != nil {
		t.Fatal(err)
	}
	hs := newHookServer(e.rdb, cfg, e.h, e.h.log)
	if err := hs.start(); err != nil {
		t.Fatal(err)
	}
	defer hs.srv.Shutdown()
	e.h.Notify(ctx, e.acct, "task_lumen_1", task.EventCompleted, 0)
	deadline := time.Now().Add(15 * time.Second)
	for {
		ds := e.deliveries(t, "task_lumen_1")
		if len(ds) == 1 && ds[0].State == webhook.StateDelivered {
			if len(ds[0].Attempts) != 3 || ds[0].Attempts[0].StatusCode != 500 || ds[0].Attempts[2].StatusCode != 200 {
				t.Errorf("attempts %+v", ds[0].Attempts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered: %+v", ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(rc.requests()); n != 3 {
		t.Errorf("%d requests; want 3", n)
	}

	// A delivery given up on is not retried: its job is archived.
	e.h.Notify(ctx, e.acct, "task_lumen_2", task.EventCompleted, 0)
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	for {
		archived, _ := insp.ListArchivedTasks(jobs.WebhookQueue)
		if len(archived) == 1 && archived[0].ID == jobs.WebhookID("task_lumen_2", task.EventCompleted, 0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("archived %+v", archived)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // past the check for due retries
	if n := len(bad.requests()); n != 1 {
		t.Errorf("%d requests to a receiver answering 404; want 1", n)
	}
	if ds := e.deliveries(t, "task_lumen_2"); len(ds) != 1 || ds[0].State != webhook.StateFailed {
		t.Errorf("deliveries %+v", ds)
	}
}
