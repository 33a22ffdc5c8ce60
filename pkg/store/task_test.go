package store

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// stores are the stores of one DB, as the services make them.
type stores struct {
	rdb      redis.UniversalClient
	db       *DB
	tasks    *Tasks
	accounts *Accounts
	hooks    *Hooks
	queues   *Queues
	leases   *Leases
}

// storesOn returns every store on one DB on rdb.
func storesOn(rdb redis.UniversalClient, o Options) *stores {
	db := NewDB(rdb, o)
	return &stores{rdb: rdb, db: db, tasks: NewTasks(db), accounts: NewAccounts(db), hooks: NewHooks(db), queues: NewQueues(db), leases: NewLeases(db)}
}

// blankStore returns the stores on a private, empty Redis.
func blankStore(t *testing.T, o Options) (*stores, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	return storesOn(srv.Client(t), o), srv
}

// newStore returns the stores on a private Redis with accounts "a",
// "acct_a" and "acct_b" holding plenty of credits.
func newStore(t *testing.T) (*stores, *redistest.Server) {
	t.Helper()
	return newStoreWith(t, Options{})
}

// newStoreWith is newStore with options (a test clock, a share).
func newStoreWith(t *testing.T, o Options) (*stores, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for _, id := range []string{"a", "acct_a", "acct_b"} {
		seedAccount(t, rdb, id, 1_000_000, "")
	}
	return storesOn(rdb, o), srv
}

// seedAccount writes an account record as the account package does.
func seedAccount(t testing.TB, rdb redis.Cmdable, id string, credits int64, models string) {
	t.Helper()
	if err := rdb.HSet(context.Background(), accountKey(id), "name", id, "status", "active", "credits", credits, "models", models).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(context.Background(), accountsKey(), redis.Z{Score: 1, Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
}

// testModel is the model of the tasks the tests make.
const testModel = "lumen-2.5-flash-image"

var std = task.Charge{Price: 4, Tier: "standard", MaxInflight: 1000, CountUntil: time.Now().Add(time.Hour)}

func pending(acct, id string) *task.Task {
	return &task.Task{ID: id, AccountID: acct, Type: task.Type, Model: testModel, CreateTime: time.UnixMilli(1_700_000_000_123)}
}

func create(t *testing.T, s *stores, acct, id string) {
	t.Helper()
	if _, err := s.tasks.Create(context.Background(), pending(acct, id), std, nil); err != nil {
		t.Fatal(err)
	}
}

// start starts a task, for its change.
func start(s *stores, acct, id, run string) (Change, error) {
	st, err := s.tasks.Start(context.Background(), acct, id, run)
	return st.Change, err
}

// separateJobKey is a job payload kept apart from its task's record
// ("a:<account>:j:<task>"): a task keeps its input in its record, so no
// such key may exist.
func separateJobKey(acct, id string) string { return tag(acct) + "j:" + id }

// inputOf reads the input a task's record keeps (fTaskInput, over its
// chunks), and whether it keeps one.
func inputOf(t *testing.T, s *stores, acct, id string) (string, bool) {
	t.Helper()
	m, err := s.rdb.HGetAll(context.Background(), taskKey(acct, id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	_, ok := m[fTaskInput]
	return longField(m, fTaskInput), ok
}

// inputFields are the fields of a record that hold its input (fTaskInput
// and its chunks) or say over how many fields (fTaskInPieces).
func inputFields(m map[string]string) []string {
	var out []string
	for f := range m {
		if f == fTaskInput || f == fTaskInPieces || strings.HasPrefix(f, fTaskInput+"+") {
			out = append(out, f)
		}
	}
	return out
}

// progress sets a task's progress and returns whether a webhook is wanted.
func progress(t *testing.T, s *stores, acct, id, run string, pct int) bool {
	t.Helper()
	hook, err := s.tasks.Progress(context.Background(), acct, id, run, pct)
	if err != nil {
		t.Fatal(err)
	}
	return hook
}

func TestCreateAndGet(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	ctx := context.Background()
	created, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_1"), std, []byte("the job"))
	if err != nil || created.Balance != 1_000_000-4 || !created.Admitted || len(created.Others) != 0 {
		t.Fatalf("Create = %+v, %v", created, err)
	}
	got, err := s.tasks.Get(ctx, "acct_a", "task_lumen_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != task.Pending || got.Progress != 0 || got.Model != "lumen-2.5-flash-image" || got.Type != "image" ||
		got.CreateTime.UnixMilli() != 1_700_000_000_123 || !got.CompleteTime.IsZero() || len(got.Results) != 0 || got.Results == nil || got.Failure != nil ||
		got.Price != 4 || got.Refunded || got.Queue != "" || got.QueueSeq != 0 {
		t.Errorf("got %+v", got)
	}
	// A task that joins no queue holds no queue fields.
	if n := srv.Client(t).HExists(ctx, taskKey("acct_a", "task_lumen_1"), fTaskQueue).Val(); n {
		t.Error("a task with no queue holds a queue field")
	}
	// A pending record, with its input, lives until the task's deadline
	// and the result TTL after it; no job is kept apart from it.
	want := time.Until(std.CountUntil) + task.ResultTTL
	for _, k := range []string{taskKey("acct_a", "task_lumen_1")} {
		ttl := srv.Client(t).PTTL(ctx, k).Val()
		if ttl <= want-time.Minute || ttl > want+time.Second {
			t.Errorf("%s: TTL %v; want %v (the deadline, then 24h)", k, ttl, want)
		}
	}
	if n := srv.Client(t).Exists(ctx, separateJobKey("acct_a", "task_lumen_1")).Val(); n != 0 {
		t.Error("a job key was written beside the record")
	}
	if in, ok := inputOf(t, s, "acct_a", "task_lumen_1"); !ok || in != "the job" {
		t.Errorf("the record's input = %q (kept %v); want %q", in, ok, "the job")
	}
	// The run that starts it gets the input back, with its times.
	st, err := s.tasks.Start(ctx, "acct_a", "task_lumen_1", "task_lumen_1")
	if err != nil || st.Outcome != task.Applied || string(st.Input) != "the job" || st.Model != testModel ||
		st.Created.UnixMilli() != 1_700_000_000_123 || st.Deadline.UnixMilli() != std.CountUntil.UnixMilli() {
		t.Errorf("Start = %+v, %v; want applied with the input %q, created %d, deadline %v", st, err, "the job",
			int64(1_700_000_000_123), std.CountUntil)
	}
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_1"), std, nil); err == nil {
		t.Error("second Create of one id succeeded")
	}
}

func TestGetIsScopedToTheAccount(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	create(t, s, "acct_a", "task_lumen_1")
	for _, tc := range []struct{ acct, id string }{{"acct_b", "task_lumen_1"}, {"acct_a", "task_lumen_2"}} {
		_, err := s.tasks.Get(ctx, tc.acct, tc.id)
		if apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("Get(%s, %s) = %v; want NotFound", tc.acct, tc.id, err)
		}
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, s *stores)
		want task.Status
	}{
		{"complete", func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
			progress(t, s, "a", "t", "t", 40)
			c := mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "t", "t", []task.Result{{Key: "k/t-0-0123456789abcdef.png", ContentType: "image/png", Size: 10, Width: 2, Height: 3}}))
			if c.At.IsZero() {
				t.Error("Complete returned no time")
			}
		}, task.Completed},
		{"fail", func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "t", "t", task.Failure{Code: "content_blocked", Message: "no"}))
		}, task.Failed},
		{"fail while pending", func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "t", "t", task.Failure{Code: "timeout", Message: "late"}))
		}, task.Failed},
		{"completed is final", func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
			mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "t", "t", nil))
			mustOutcome(t, task.AlreadyFinal)(start(s, "a", "t", "t"))
			mustOutcome(t, task.AlreadyFinal)(s.tasks.Fail(ctx, "a", "t", "t", task.Failure{Code: "x", Message: "y"}))
			mustOutcome(t, task.AlreadyFinal)(s.tasks.Complete(ctx, "a", "t", "t", nil))
		}, task.Completed},
		{"failed is final", func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", "t", "t", task.Failure{Code: "x", Message: "y"}))
			mustOutcome(t, task.AlreadyFinal)(s.tasks.Complete(ctx, "a", "t", "t", nil))
			mustOutcome(t, task.AlreadyFinal)(start(s, "a", "t", "t"))
		}, task.Failed},
		{"restart keeps processing", func(t *testing.T, s *stores) {
			mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
			progress(t, s, "a", "t", "t", 50)
			mustOutcome(t, task.Applied)(start(s, "a", "t", "t")) // a retry after a crash
		}, task.Processing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, srv := newStore(t)
			create(t, s, "a", "t")
			// Shorten the TTL to see that a final state restarts it.
			srv.Client(t).PExpire(ctx, taskKey("a", "t"), time.Hour)
			tt.run(t, s)
			got, err := s.tasks.Get(ctx, "a", "t")
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tt.want {
				t.Fatalf("status %s; want %s", got.Status, tt.want)
			}
			ttl := srv.Client(t).PTTL(ctx, taskKey("a", "t")).Val()
			switch got.Status {
			case task.Completed:
				if got.Progress != 100 || got.CompleteTime.IsZero() {
					t.Errorf("completed task: progress %d complete_time %v", got.Progress, got.CompleteTime)
				}
				if ttl <= 23*time.Hour {
					t.Errorf("TTL %v after completion; want 24h from completion", ttl)
				}
			case task.Failed:
				if got.Failure == nil || got.Failure.Code == "" || got.Failure.Message == "" || got.CompleteTime.IsZero() || got.Progress == 100 {
					t.Errorf("failed task: %+v", got)
				}
				if ttl <= 23*time.Hour {
					t.Errorf("TTL %v after failure; want 24h from the end", ttl)
				}
			case task.Processing:
				if got.StartTime.IsZero() {
					t.Error("processing task without a start time")
				}
				if got.Progress != 50 {
					t.Errorf("progress %d after restart; want it kept at 50", got.Progress)
				}
			}
			// A task keeps its input, processing (for a run after a
			// crash) or ended (its record shows it). Neither holds a
			// job apart from its record.
			m := srv.Client(t).HGetAll(ctx, taskKey("a", "t")).Val()
			if f := inputFields(m); len(f) == 0 {
				t.Errorf("a %s task holds no input", got.Status)
			}
			if n := srv.Client(t).Exists(ctx, separateJobKey("a", "t")).Val(); n != 0 {
				t.Errorf("a %s task holds a job key", got.Status)
			}
		})
	}
}

var ctx = context.Background()

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustOutcome checks a change's outcome, and returns the change.
func mustOutcome(t *testing.T, want task.Outcome) func(Change, error) Change {
	t.Helper()
	return func(got Change, err error) Change {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if got.Outcome != want {
			t.Fatalf("outcome %s; want %s", got.Outcome, want)
		}
		return got
	}
}

// The record keeps each result's blob key; its content type follows from
// the key (blob.ContentType), and its size and dimensions are not kept.
func TestResultsRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	create(t, s, "a", "t")
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
	in := []task.Result{
		{Key: "2026112214/t-0-0123456789abcdef.png", ContentType: "image/png", Size: 1234, Width: 1024, Height: 768},
		{Key: "2026112214/t-1-fedcba9876543210.jpg", ContentType: "image/jpeg", Size: 99, Width: 10, Height: 20},
		{Key: "2026112214/t-2-00112233445566778899aabbccddeeff.webp", ContentType: "image/webp"},
	}
	mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "t", "t", in))
	got, err := s.tasks.Get(ctx, "a", "t")
	must(t, err)
	want := []task.Result{
		{Key: in[0].Key, ContentType: "image/png"},
		{Key: in[1].Key, ContentType: "image/jpeg"},
		{Key: in[2].Key, ContentType: "image/webp"},
	}
	if len(got.Results) != len(want) {
		t.Fatalf("results %+v; want %+v", got.Results, want)
	}
	for i := range want {
		if got.Results[i] != want[i] {
			t.Errorf("result %d %+v; want %+v", i, got.Results[i], want[i])
		}
	}
	// One field a result, the key alone.
	for i, r := range in {
		if v := s.rdb.HGet(ctx, taskKey("a", "t"), fTaskResult+string(rune('0'+i))).Val(); v != r.Key {
			t.Errorf("field r%d = %q; want the key %q", i, v, r.Key)
		}
	}
	// A key too long for one field is refused, and nothing changes.
	create(t, s, "a", "t2")
	mustOutcome(t, task.Applied)(start(s, "a", "t2", "t2"))
	long := task.Result{Key: "2026112214/" + string(make([]byte, 60)) + ".png"}
	if _, err := s.tasks.Complete(ctx, "a", "t2", "t2", []task.Result{long}); err == nil {
		t.Error("Complete took a result key longer than a field")
	}
	if got, _ := s.tasks.Get(ctx, "a", "t2"); got.Status != task.Processing {
		t.Errorf("a refused Complete changed the task to %s", got.Status)
	}
}

func TestProgressNeverGoesBack(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	create(t, s, "a", "t")
	// Not processing yet: progress is ignored.
	progress(t, s, "a", "t", "t", 30)
	if got, _ := s.tasks.Get(ctx, "a", "t"); got.Progress != 0 {
		t.Fatalf("pending task progress %d; want 0", got.Progress)
	}
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
	steps := []struct{ set, want int }{{10, 10}, {5, 10}, {40, 40}, {40, 40}, {100, 99}, {150, 99}, {-3, 99}}
	for _, st := range steps {
		progress(t, s, "a", "t", "t", st.set)
		got, err := s.tasks.Get(ctx, "a", "t")
		must(t, err)
		if got.Progress != st.want {
			t.Errorf("after Progress(%d): %d; want %d", st.set, got.Progress, st.want)
		}
	}
}

func TestConcurrentProgressIsMonotonic(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	create(t, s, "a", "t")
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := 1; p <= 90; p++ {
				_, _ = s.tasks.Progress(ctx, "a", "t", "t", p)
			}
		}()
	}
	last := 0
	for i := 0; i < 200; i++ {
		got, err := s.tasks.Get(ctx, "a", "t")
		must(t, err)
		if got.Progress < last {
			t.Fatalf("progress went back from %d to %d", last, got.Progress)
		}
		last = got.Progress
	}
	wg.Wait()
	if got, _ := s.tasks.Get(ctx, "a", "t"); got.Progress != 90 {
		t.Errorf("final progress %d; want 90", got.Progress)
	}
}

func TestMissingRecordIsNeverRecreated(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	mustOutcome(t, task.Missing)(start(s, "a", "gone", "gone"))
	if progress(t, s, "a", "gone", "gone", 50) {
		t.Error("progress of a missing task wants a webhook")
	}
	mustOutcome(t, task.Missing)(s.tasks.Complete(ctx, "a", "gone", "gone", nil))
	mustOutcome(t, task.Missing)(s.tasks.Fail(ctx, "a", "gone", "gone", task.Failure{Code: "x", Message: "y"}))
	mustOutcome(t, task.Missing)(s.tasks.Expire(ctx, "a", "gone"))
	c, _, err := s.tasks.Takeover(ctx, "a", "gone", "gone", runName)
	mustOutcome(t, task.Missing)(c, err)
	must(t, s.tasks.Release(ctx, "a", "gone", "gone"))
	for _, k := range []string{taskKey("a", "gone"), separateJobKey("a", "gone")} {
		if n := srv.Client(t).Exists(ctx, k).Val(); n != 0 {
			t.Errorf("a late worker recreated %s", k)
		}
	}
	// Nor did it touch the account's counters.
	if n, _ := s.tasks.Inflight(ctx, "a"); n != 0 {
		t.Errorf("Inflight = %d", n)
	}
	if n, _ := s.tasks.Running(ctx, "a"); n != 0 {
		t.Errorf("Running = %d", n)
	}
}

func TestAbort(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	create(t, s, "a", "p")
	create(t, s, "a", "q")
	mustOutcome(t, task.Applied)(start(s, "a", "q", "q"))

	if ok, admitted, err := s.tasks.Abort(ctx, "a", "p", ""); err != nil || !ok || len(admitted) != 0 {
		t.Errorf("Abort(pending) = %v, %v, %v; want true, nothing admitted", ok, admitted, err)
	}
	if _, err := s.tasks.Get(ctx, "a", "p"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("pending task still there: %v", err)
	}
	for _, k := range []string{taskKey("a", "p"), separateJobKey("a", "p")} {
		if srv.Client(t).Exists(ctx, k).Val() != 0 {
			t.Errorf("%s survived the abort", k)
		}
	}
	if _, err := srv.Client(t).ZScore(ctx, dueOf("a"), taskDue("a", "p")).Result(); err != redis.Nil {
		t.Errorf("the aborted task is still on the due work: %v", err)
	}
	if ok, _, err := s.tasks.Abort(ctx, "a", "q", ""); err != nil || ok {
		t.Errorf("Abort(processing) = %v, %v; want false", ok, err)
	}
	if _, err := s.tasks.Get(ctx, "a", "q"); err != nil {
		t.Errorf("processing task removed: %v", err)
	}
	if n, _ := s.tasks.Inflight(ctx, "a"); n != 1 {
		t.Errorf("Inflight = %d; want 1 (the processing task)", n)
	}
}

func TestGetReportsAStoreFailure(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	must(t, srv.Client(t).HSet(ctx, taskKey("a", "bad"), "status", "pending", "progress", "x", "ctime", "1").Err())
	if _, err := s.tasks.Get(ctx, "a", "bad"); err == nil || apperr.CodeOf(err) == apperr.NotFound {
		t.Errorf("corrupt record: %v; want an internal error", err)
	}
}

// BenchmarkDecode is the cost of turning a task hash into a task, its
// input shown: every query pays it.
func BenchmarkDecode(b *testing.B) {
	in, err := jobs.EncodeInput(task.Input{Model: catalog.Model{ID: testModel, Tier: catalog.Standard}, Prompt: "a watercolor fox in a snowy forest at dawn, soft light", AspectRatio: "16:9", ImageSize: "1K"})
	if err != nil {
		b.Fatal(err)
	}
	m := map[string]string{
		fTaskInput: string(in),
		fTaskType:  "image", fTaskModel: "lumen-2.5-flash-image", fTaskStatus: "completed", fTaskProgress: "100",
		fTaskCreated: "1795359098636", fTaskStarted: "1795359098700", fTaskEnded: "1795359100975", fTaskPrice: "4",
		fTaskResult + "0": "2026112214/0123456789abcdef0123456789abcdef.png",
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeTask("acct_x", "task_lumen_1", m); err != nil {
			b.Fatal(err)
		}
	}
}
