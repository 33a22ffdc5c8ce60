package store

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// The shards' leases: a holder takes the free ones and renews its own in
// one call; another holder gets none of them until they are given back
// or run out.
func TestShardLeases(t *testing.T) {
	t.Parallel()
	s, _ := blankStore(t, Options{})
	l := s.leases
	steps := []struct {
		name   string
		holder string
		take   []int
		want   []int
		pause  time.Duration // before the step
		give   []int         // given back by the holder after the step
	}{
		{"w1 takes three", "w1", []int{0, 1, 2}, []int{0, 1, 2}, 0, nil},
		{"w2 gets only the free one", "w2", []int{1, 2, 3}, []int{3}, 0, nil},
		{"w1 renews its own", "w1", []int{0, 1, 2, 3}, []int{0, 1, 2}, 0, []int{1, 3}},
		{"w2 takes what w1 gave back (w1 did not hold 3)", "w2", []int{1, 3}, []int{1, 3}, 0, nil},
		{"nothing free", "w3", []int{0, 1, 2, 3}, nil, 0, nil},
		{"the leases run out", "w3", []int{0, 1, 2, 3, 255}, []int{0, 1, 2, 3, 255}, 400 * time.Millisecond, nil},
	}
	for _, st := range steps {
		time.Sleep(st.pause)
		held, err := l.TakeShards(ctx, st.holder, st.take, 300*time.Millisecond)
		must(t, err)
		if !slices.Equal(held, st.want) {
			t.Fatalf("%s: TakeShards(%s, %v) = %v; want %v", st.name, st.holder, st.take, held, st.want)
		}
		if st.give != nil {
			must(t, l.ReleaseShards(ctx, st.holder, st.give))
		}
	}
	// A renewal restarts the lease's time.
	held, err := l.TakeShards(ctx, "w4", []int{10}, time.Minute)
	must(t, err)
	if ttl := s.rdb.PTTL(ctx, shardLeaseKey(10)).Val(); len(held) != 1 || ttl <= 59*time.Second {
		t.Errorf("the lease of shard 10: %v, TTL %v", held, ttl)
	}
	// Every shard at once, by several holders at once: each shard to one.
	all := make([]int, Shards)
	for i := range all {
		all[i] = i
	}
	must(t, l.ReleaseShards(ctx, "w3", all))
	must(t, l.ReleaseShards(ctx, "w4", all))
	var mu sync.Mutex
	owner := map[int]string{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			holder := fmt.Sprint("h", w)
			got, err := NewLeases(s.db).TakeShards(ctx, holder, all, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, n := range got {
				if o, ok := owner[n]; ok {
					t.Errorf("shard %d to %s and %s", n, o, holder)
				}
				owner[n] = holder
			}
		})
	}
	wg.Wait()
	if len(owner) != Shards {
		t.Errorf("%d shards taken; want %d", len(owner), Shards)
	}
}

// Workers counts the holders alive within ttl, itself included.
func TestRecoveryWorkers(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, _ := blankStore(t, Options{Now: func() time.Time { return now }})
	count := func(holder string) int {
		t.Helper()
		n, err := s.leases.Workers(ctx, holder, time.Minute)
		must(t, err)
		return n
	}
	if n := count("w1"); n != 1 {
		t.Errorf("one worker: %d", n)
	}
	now = now.Add(10 * time.Second)
	if n := count("w2"); n != 2 {
		t.Errorf("two workers: %d", n)
	}
	if n := count("w1"); n != 2 {
		t.Errorf("a heartbeat again: %d; want 2", n)
	}
	now = now.Add(55 * time.Second) // w2's last heartbeat is 55 s old, w1's 55 s too
	if n := count("w3"); n != 3 {
		t.Errorf("three workers: %d", n)
	}
	now = now.Add(10 * time.Second) // w1 and w2 silent for 65 s
	if n := count("w3"); n != 1 {
		t.Errorf("after the others went silent: %d; want 1", n)
	}
}

// A worker that leaves is no longer counted among those sharing the
// shards: the others take its share at once.
func TestRecoveryWorkerLeaves(t *testing.T) {
	t.Parallel()
	s, _ := blankStore(t, Options{})
	for _, w := range []string{"w1", "w2"} {
		if _, err := s.leases.Workers(ctx, w, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	must(t, s.leases.Leave(ctx, "w2"))
	if n, err := s.leases.Workers(ctx, "w1", time.Minute); err != nil || n != 1 {
		t.Errorf("after w2 left: %d workers, %v; want 1", n, err)
	}
}
