package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/task"
)

// books is what an account's task records imply its counters, parked
// tasks and due work are.
type books struct {
	unfinished int64    // pending or processing
	admitted   int64    // holding a place: admitted pending, or processing
	parked     []string // pending, waiting for a place
	due        []string // a due entry each unfinished task
}

// recordsOf reads every task record of an account (on a cluster, on the
// node of its slot), by task id.
func recordsOf(t *testing.T, s *stores, acct string) map[string]map[string]string {
	t.Helper()
	ctx := context.Background()
	pfx := taskKey(acct, "")
	var scanner redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, pfx)
		if err != nil {
			t.Fatal(err)
		}
		scanner = node
	}
	out := map[string]map[string]string{}
	var cursor uint64
	for {
		keys, next, err := scanner.Scan(ctx, cursor, pfx+"*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		records, err := s.db.hgetAll(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range records {
			if len(m) > 0 {
				out[strings.TrimPrefix(keys[i], pfx)] = m
			}
		}
		if cursor = next; cursor == 0 {
			return out
		}
	}
}

// booksOf is what the records of an account imply.
func booksOf(t *testing.T, s *stores, acct string) books {
	t.Helper()
	var b books
	for id, m := range recordsOf(t, s, acct) {
		st := task.Status(m[fTaskStatus])
		adm := m[fTaskAdmitted] == "1"
		switch st {
		case task.Pending, task.Processing:
			b.unfinished++
			b.due = append(b.due, taskDue(acct, id))
			if st == task.Processing && !adm {
				t.Errorf("%s: processing without a place", id)
			}
			if adm {
				b.admitted++
			} else {
				b.parked = append(b.parked, id)
			}
		default:
			if adm {
				t.Errorf("%s: %s and still holding a place", id, st)
			}
			// A final record keeps nothing only an unfinished task needs.
			for _, f := range []string{fTaskDeadline, fTaskRun, fTaskLive, fTaskCrashes, fTaskQueue, fTaskQueueSeq} {
				if _, ok := m[f]; ok {
					t.Errorf("%s: %s and still holding %s", id, st, f)
				}
			}
			// Its input stays, whole: the record shows it.
			if n, err := strconv.Atoi(m[fTaskInPieces]); err == nil {
				for i := 1; i < n; i++ {
					if _, ok := m[fTaskInput+"+"+strconv.Itoa(i)]; !ok {
						t.Errorf("%s: %s and its input lost piece %d of %d", id, st, i, n)
					}
				}
			}
		}
		// No task keeps a job apart from its record.
		if n := s.rdb.Exists(context.Background(), separateJobKey(acct, id)).Val(); n != 0 {
			t.Errorf("%s: %s and holding a job key", id, st)
		}
	}
	slices.Sort(b.parked)
	slices.Sort(b.due)
	return b
}

// checkBooks checks that an account's counters (Inflight, Running), its
// parked tasks (Parked and the set itself) and its tasks' due entries are
// what its task records imply: they never drift, whatever path the tasks
// took.
func checkBooks(t *testing.T, s *stores, acct string) books {
	t.Helper()
	ctx := context.Background()
	want := booksOf(t, s, acct)
	infl, err := s.tasks.Inflight(ctx, acct)
	must(t, err)
	running, err := s.tasks.Running(ctx, acct)
	must(t, err)
	parkedN, err := s.tasks.Parked(ctx, acct)
	must(t, err)
	if infl != want.unfinished || running != want.admitted || parkedN != int64(len(want.parked)) {
		t.Errorf("%s: Inflight %d, Running %d, Parked %d; the records say %d, %d, %d", acct, infl, running, parkedN,
			want.unfinished, want.admitted, len(want.parked))
	}
	parked := s.rdb.ZRange(ctx, parkedKey(acct), 0, -1).Val()
	slices.Sort(parked)
	if !slices.Equal(parked, want.parked) {
		t.Errorf("%s: parked %v; the records say %v", acct, parked, want.parked)
	}
	var due []string
	for _, m := range s.rdb.ZRange(ctx, dueOf(acct), 0, -1).Val() {
		if strings.HasPrefix(m, taskDue(acct, "")) {
			due = append(due, m)
		}
	}
	slices.Sort(due)
	if !slices.Equal(due, want.due) {
		t.Errorf("%s: due entries %v; the records say %v", acct, due, want.due)
	}
	return want
}

// windowOf is how many of an account's tasks may hold a place at once
// (0: no limit).
func windowOf(t *testing.T, s *stores, acct string) int64 {
	t.Helper()
	if s.db.share == 0 {
		return 0
	}
	w, _ := strconv.ParseInt(s.rdb.HGet(context.Background(), accountKey(acct), fAcctWeight).Val(), 10, 64)
	return int64(s.db.share) * max(w, 1)
}

// checkWindow checks checkBooks, and that the account's window is used
// and never overrun: no more tasks hold a place than it has, and none
// waits parked while it has room.
func checkWindow(t *testing.T, s *stores, acct string) books {
	t.Helper()
	b := checkBooks(t, s, acct)
	w := windowOf(t, s, acct)
	switch {
	case w == 0 && len(b.parked) > 0:
		t.Errorf("%s: %d tasks parked with no limit", acct, len(b.parked))
	case w > 0 && b.admitted > w:
		t.Errorf("%s: %d tasks hold a place; the window is %d", acct, b.admitted, w)
	case w > 0 && b.admitted < w && len(b.parked) > 0:
		t.Errorf("%s: %d tasks parked while %d of %d places are taken", acct, len(b.parked), b.admitted, w)
	}
	return b
}
