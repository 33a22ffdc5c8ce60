package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"

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

// newStoreWith is newStore with options (a test clock).
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

var std = task.Charge{Price: 4, Tier: "standard", MaxInflight: 1000, CountUntil: time.Now().Add(time.Hour)}

func pending(acct, id string) *task.Task {
	return &task.Task{ID: id, AccountID: acct, Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: time.UnixMilli(1_700_000_000_123)}
}

func create(t *testing.T, s *stores, acct, id string) {
	t.Helper()
	if _, err := s.tasks.Create(context.Background(), pending(acct, id), std, nil); err != nil {
		t.Fatal(err)
	}
}

// start starts a task with no limit on the account's places.
func start(s *stores, acct, id, run string) (Change, error) {
	return s.tasks.Start(context.Background(), acct, id, run, Place{})
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
	s, srv := newStore(t)
	ctx := context.Background()
	bal, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_1"), std, nil)
	if err != nil || bal != 1_000_000-4 {
		t.Fatalf("Create = %d, %v", bal, err)
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
	ttl := srv.Client(t).PTTL(ctx, taskKey("acct_a", "task_lumen_1")).Val()
	if ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("TTL %v; want 24h", ttl)
	}
	if _, err := s.tasks.Create(ctx, pending("acct_a", "task_lumen_1"), std, nil); err == nil {
		t.Error("second Create of one id succeeded")
	}
}

func TestGetIsScopedToTheAccount(t *testing.T) {
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

func TestResultsRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	create(t, s, "a", "t")
	mustOutcome(t, task.Applied)(start(s, "a", "t", "t"))
	want := []task.Result{
		{Key: "2026112214/t-0-0123456789abcdef.png", ContentType: "image/png", Size: 1234, Width: 1024, Height: 768},
		{Key: "2026112214/t-1-fedcba9876543210.jpg", ContentType: "image/jpeg", Size: 99, Width: 10, Height: 20},
	}
	mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "t", "t", want))
	got, err := s.tasks.Get(ctx, "a", "t")
	must(t, err)
	if len(got.Results) != 2 || got.Results[0] != want[0] || got.Results[1] != want[1] {
		t.Errorf("results %+v; want %+v", got.Results, want)
	}
}

func TestProgressNeverGoesBack(t *testing.T) {
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
	s, srv := newStore(t)
	mustOutcome(t, task.Missing)(start(s, "a", "gone", "gone"))
	if progress(t, s, "a", "gone", "gone", 50) {
		t.Error("progress of a missing task wants a webhook")
	}
	mustOutcome(t, task.Missing)(s.tasks.Complete(ctx, "a", "gone", "gone", nil))
	mustOutcome(t, task.Missing)(s.tasks.Fail(ctx, "a", "gone", "gone", task.Failure{Code: "x", Message: "y"}))
	if n := srv.Client(t).Exists(ctx, taskKey("a", "gone")).Val(); n != 0 {
		t.Errorf("a late worker recreated the record")
	}
}

func TestAbort(t *testing.T) {
	s, _ := newStore(t)
	create(t, s, "a", "p")
	create(t, s, "a", "q")
	mustOutcome(t, task.Applied)(start(s, "a", "q", "q"))

	if ok, err := s.tasks.Abort(ctx, "a", "p", ""); err != nil || !ok {
		t.Errorf("Abort(pending) = %v, %v; want true", ok, err)
	}
	if _, err := s.tasks.Get(ctx, "a", "p"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("pending task still there: %v", err)
	}
	if ok, err := s.tasks.Abort(ctx, "a", "q", ""); err != nil || ok {
		t.Errorf("Abort(processing) = %v, %v; want false", ok, err)
	}
	if _, err := s.tasks.Get(ctx, "a", "q"); err != nil {
		t.Errorf("processing task removed: %v", err)
	}
}

func TestGetReportsAStoreFailure(t *testing.T) {
	s, srv := newStore(t)
	must(t, srv.Client(t).HSet(ctx, taskKey("a", "bad"), "status", "pending", "progress", "x", "ctime", "1").Err())
	if _, err := s.tasks.Get(ctx, "a", "bad"); err == nil || apperr.CodeOf(err) == apperr.NotFound {
		t.Errorf("corrupt record: %v; want an internal error", err)
	}
}

// BenchmarkDecode is the cost of turning a task hash into a task: every
// query pays it.
func BenchmarkDecode(b *testing.B) {
	m := map[string]string{
		fTaskType: "image", fTaskModel: "lumen-2.5-flash-image", fTaskStatus: "completed", fTaskProgress: "100",
		fTaskCreated: "1795359098636", fTaskStarted: "1795359098700", fTaskEnded: "1795359100975", fTaskPrice: "4",
		fTaskResults: `[{"key":"2026112214/0123456789abcdef0123456789abcdef.png","type":"image/png","size":217887,"w":1344,"h":768}]`,
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeTask("acct_x", "task_lumen_1", m); err != nil {
			b.Fatal(err)
		}
	}
}
