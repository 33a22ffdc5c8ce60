package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// The recovery expires a thousand tasks past their deadline in one call:
// parked, admitted and processing alike, each failed (timeout) and
// refunded once, their places freed (the promotions they make within the
// batch expire in it too), their due entries gone.
func TestExpireAllOfAThousand(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Millisecond)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, _ := newStoreWith(t, Options{Share: 10, Now: clock})
	seedAccount(t, s.rdb, "big", 1_000_000, "")
	const n = 1000
	c := std
	c.MaxInflight = n
	c.CountUntil = now.Add(time.Minute)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				if _, err := s.tasks.Create(ctx, pendingAt("big", fmt.Sprint("t", i), i), c, []byte("job")); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	started := 0
	for i := 0; i < n && started < 5; i++ {
		if c, _ := start(s, "big", fmt.Sprint("t", i), fmt.Sprint("t", i)); c.Outcome == task.Applied {
			started++
		}
	}
	b := checkWindow(t, s, "big")
	if b.unfinished != n || b.admitted != 10 || started != 5 {
		t.Fatalf("%d unfinished, %d admitted, %d started; want %d, 10, 5", b.unfinished, b.admitted, started, n)
	}
	before, _ := balance(t, s, "big")

	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	w, err := s.tasks.Due(ctx, ShardOf("big"), clock(), 2*n)
	must(t, err)
	var refs []TaskRef
	for _, e := range w.Entries {
		if e.AccountID == "big" && e.Kind == DueExpire {
			refs = append(refs, TaskRef{e.AccountID, e.TaskID})
		}
	}
	if len(refs) != n {
		t.Fatalf("%d tasks due to expire; want %d", len(refs), n)
	}
	changes, errs := s.tasks.ExpireAll(ctx, refs)
	if len(changes) != n || len(errs) != n {
		t.Fatalf("%d changes, %d errors for %d tasks", len(changes), len(errs), n)
	}
	var refunded int64
	for i, c := range changes {
		if errs[i] != nil || c.Outcome != task.Applied || c.Refunded != std.Price || c.Model != testModel || !c.At.Equal(now) {
			t.Fatalf("expire %s: %+v, %v", refs[i].TaskID, c, errs[i])
		}
		refunded += c.Refunded
	}
	after, refunds := balance(t, s, "big")
	if after != before+n*std.Price || refunded != n*std.Price || refunds != n {
		t.Errorf("balance %d → %d, %d refunds, %d reported; want all %d refunded once", before, after, refunds, refunded, n)
	}
	if b := checkWindow(t, s, "big"); b.unfinished != 0 || b.admitted != 0 {
		t.Errorf("after the batch: %+v", b)
	}
	for _, id := range []string{"t0", "t500", "t999"} {
		if tk, _ := s.tasks.Get(ctx, "big", id); tk.Status != task.Failed || tk.Failure.Code != string(task.Timeout) || !tk.Refunded {
			t.Errorf("%s: %+v", id, tk)
		}
	}
	if w, _ := s.tasks.Due(ctx, ShardOf("big"), clock().Add(time.Hour), 2*n); len(w.Entries) != 0 {
		t.Errorf("%d entries left on the due work", len(w.Entries))
	}
	// Again: each is final, nothing refunded twice; a task gone is
	// Missing; no errors.
	changes, errs = s.tasks.ExpireAll(ctx, append(refs[:10:10], TaskRef{"big", "never"}))
	for i, c := range changes {
		want := task.AlreadyFinal
		if i == 10 {
			want = task.Missing
		}
		if errs[i] != nil || c.Outcome != want || c.Refunded != 0 {
			t.Errorf("expire again [%d]: %+v, %v; want %v", i, c, errs[i], want)
		}
	}
	if changes, errs := s.tasks.ExpireAll(ctx, nil); len(changes) != 0 || len(errs) != 0 {
		t.Errorf("ExpireAll(nil) = %v, %v", changes, errs)
	}
}
