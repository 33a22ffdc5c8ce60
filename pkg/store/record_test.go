package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redisproc"
)

// A record keeps every value in at most pieceLen bytes (a longer one is
// split over field, field+1, ...), so it stays a compact listpack whatever
// it holds, and reads back whole: the task's input too, kept in the
// record until the task ends.
func TestCompactRecords(t *testing.T) {
	t.Parallel()
	long := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString("déjà vu, ")
		}
		return b.String()[:n]
	}
	tests := []struct {
		name     string
		callback string
		message  string // "" completes the task
		results  int
	}{
		{"a plain completed task", "", "", 1},
		{"a 300-character callback URL", "https://hooks.example.com/" + long(274), "", 2},
		{"a 300-character failure message", "", long(300), 0},
		{"both, failed", "https://hooks.example.com/" + long(274), long(300), 0},
		{"a message of exactly a piece", "", long(pieceLen), 0},
		{"a message of exactly two pieces", "", long(2 * pieceLen), 0},
		{"a message one past a piece", "", long(pieceLen + 1), 0},
		{"a 2,000-character message", "https://hooks.example.com/x", long(2000), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			tk := pending("a", "task_lumen_0123456789")
			if tt.callback != "" {
				tk.Callback = task.Callback{URL: tt.callback, Events: task.Events}
			}
			c := std
			c.Queue = "standard"
			_, err := s.tasks.Create(ctx, tk, c, []byte(strings.Repeat("j", 500)))
			must(t, err)
			key := taskKey("a", tk.ID)
			checkListpack(t, s, key, "pending")
			if v := s.rdb.HGetAll(ctx, key).Val(); len(v[fTaskCallback]) > pieceLen {
				t.Errorf("the callback held in one field of %d bytes", len(v[fTaskCallback]))
			}
			if in, _ := inputOf(t, s, "a", tk.ID); in != strings.Repeat("j", 500) {
				t.Errorf("the record's input: %d bytes", len(in))
			}
			st, err := s.tasks.Start(ctx, "a", tk.ID, tk.ID)
			mustOutcome(t, task.Applied)(st.Change, err)
			if string(st.Input) != strings.Repeat("j", 500) {
				t.Errorf("the input Start read back: %d bytes; want 500", len(st.Input))
			}
			checkListpack(t, s, key, "processing")
			if tt.message == "" {
				var rs []task.Result
				for i := 0; i < tt.results; i++ {
					rs = append(rs, task.Result{Key: "2026112214/0123456789abcdef0123456789abcdef.png"})
				}
				mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", tk.ID, tk.ID, rs))
			} else {
				mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "a", tk.ID, tk.ID, task.Failure{Code: "generation_failed", Message: tt.message}))
			}
			checkListpack(t, s, key, "ended")
			got, err := s.tasks.Get(ctx, "a", tk.ID)
			must(t, err)
			if got.Callback.URL != tt.callback {
				t.Errorf("callback %q (%d bytes); want %d bytes back whole", got.Callback.URL, len(got.Callback.URL), len(tt.callback))
			}
			if tt.callback != "" && strings.Join(got.Callback.Events, ",") != strings.Join(task.Events, ",") {
				t.Errorf("callback events %v", got.Callback.Events)
			}
			if tt.message != "" && (got.Failure == nil || got.Failure.Message != tt.message) {
				t.Errorf("failure %+v; want the %d-byte message back whole", got.Failure, len(tt.message))
			}
			if len(got.Results) != tt.results {
				t.Errorf("%d results; want %d", len(got.Results), tt.results)
			}
			// The input outlives the end, whole, in the record (which
			// shows it); no key apart from the record ever held it.
			if in, _ := inputOf(t, s, "a", tk.ID); in != strings.Repeat("j", 500) {
				t.Errorf("the ended record's input: %d bytes; want the 500 kept", len(in))
			}
			if n := s.rdb.Exists(ctx, separateJobKey("a", tk.ID)).Val(); n != 0 {
				t.Error("a job key beside the record")
			}
		})
	}
}

// checkListpack checks that a record is a listpack and every value in it at
// most pieceLen bytes.
func checkListpack(t *testing.T, s *stores, key, when string) {
	t.Helper()
	if enc := s.rdb.ObjectEncoding(ctx, key).Val(); enc != "listpack" {
		t.Errorf("%s: the record is a %s", when, enc)
	}
	for f, v := range s.rdb.HGetAll(ctx, key).Val() {
		if len(v) > pieceLen || len(f) > pieceLen {
			t.Errorf("%s: field %s holds %d bytes", when, f, len(v))
		}
	}
}

// A plain task's record, once completed, takes under 400 bytes of Redis
// memory (MEMORY USAGE, every field counted) beside the input it shows,
// which costs its length and at most 24 bytes a field: 24 hours of tasks
// must fit.
func TestRecordMemory(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, _ := newStoreWith(t, Options{Now: func() time.Time { return now }})
	// Ids of the real shapes: an account's ("acct_" and 20 characters), a
	// task's ("task_<family>_" and a 128-bit number in decimal); its first
	// run is named after it (jobs.RunID).
	const acct = "acct_0123456789abcdefghij"
	seedAccount(t, s.rdb, acct, 1000, "")
	tk := pending(acct, "task_lumen_"+strings.Repeat("9", 39))
	_, err := s.tasks.Create(ctx, tk, std, []byte(strings.Repeat("j", 300)))
	must(t, err)
	key := taskKey(acct, tk.ID)
	pendingBytes := s.rdb.MemoryUsage(ctx, key, 0).Val()
	now = now.Add(time.Second)
	mustOutcome(t, task.Applied)(start(s, acct, tk.ID, tk.ID))
	progress(t, s, acct, tk.ID, tk.ID, 50)
	now = now.Add(20 * time.Second)
	mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, acct, tk.ID, tk.ID, []task.Result{{Key: "2026112214/0123456789abcdef0123456789abcdef.png", Size: 217887, Width: 1344, Height: 768}}))
	n, err := s.rdb.MemoryUsage(ctx, key, 0).Result()
	must(t, err)
	t.Logf("a task record: %d bytes pending, %d completed (%d fields): %v", pendingBytes, n, len(s.rdb.HGetAll(ctx, key).Val()), s.rdb.HGetAll(ctx, key).Val())
	checkListpack(t, s, key, "completed")
	in := inputFields(s.rdb.HGetAll(ctx, key).Val())
	must(t, s.rdb.HDel(ctx, key, in...).Err())
	rest := s.rdb.MemoryUsage(ctx, key, 0).Val()
	if rest >= 400 {
		t.Errorf("a completed task's record takes %d bytes beside its input; want under 400", rest)
	}
	if n-rest > int64(300+24*len(in)) {
		t.Errorf("its 300-byte input in %d fields costs %d bytes; want at most %d", len(in), n-rest, 300+24*len(in))
	}
}

// A task's input, however long, is read by its start in one command more
// than a one-piece input's (an HMGET of its pieces, their number read with
// the record's other fields) and its end costs no command more (the input
// stays: the record shows it). A record an older create wrote, without
// the number of pieces, still starts with its input whole and ends with
// it kept whole.
func TestInputOneCommand(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	input := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		return b
	}
	calls := func() map[string]int64 {
		out := map[string]int64{}
		for name, st := range redisproc.ParseCommandstats(s.rdb.Info(ctx, "commandstats").Val()) {
			out[name] = st.Calls
		}
		must(t, s.rdb.ConfigResetStat(ctx).Err())
		return out
	}
	type cost struct{ start, end map[string]int64 }
	life := func(id string, in []byte, older bool) cost {
		t.Helper()
		_, err := s.tasks.Create(ctx, pending("a", id), std, in)
		must(t, err)
		key := taskKey("a", id)
		if older {
			must(t, s.rdb.HDel(ctx, key, fTaskInPieces).Err())
		}
		calls()
		st, err := s.tasks.Start(ctx, "a", id, id)
		mustOutcome(t, task.Applied)(st.Change, err)
		if string(st.Input) != string(in) {
			t.Errorf("%s: Start read %d bytes of input; want its %d back whole", id, len(st.Input), len(in))
		}
		c := cost{start: calls()}
		mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", id, id, nil))
		c.end = calls()
		if got, _ := inputOf(t, s, "a", id); got != string(in) {
			t.Errorf("%s: the ended record keeps %d bytes of input; want its %d whole", id, len(got), len(in))
		}
		return c
	}
	one := life("task_lumen_1", input(pieceLen), false)
	for i, n := range []int{pieceLen + 1, 2 * pieceLen, 1000, 5000} {
		c := life(fmt.Sprintf("task_lumen_long_%d", i), input(n), false)
		for _, cmd := range []string{"hget", "hmget", "hdel"} {
			want := one.start[cmd]
			if cmd == "hmget" {
				want++
			}
			if c.start[cmd] != want {
				t.Errorf("%d bytes: its start ran %s %d times; a one-piece input's, %d: want %d", n, cmd, c.start[cmd], one.start[cmd], want)
			}
			if c.end[cmd] != one.end[cmd] {
				t.Errorf("%d bytes: its end ran %s %d times; want %d, as a one-piece input's", n, cmd, c.end[cmd], one.end[cmd])
			}
		}
	}
	for i, n := range []int{0, 10, pieceLen, pieceLen + 1, 2 * pieceLen, 1000} {
		life(fmt.Sprintf("task_lumen_older_%d", i), input(n), true)
	}
}
