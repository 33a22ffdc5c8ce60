package redisproc_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/tools/testkit/redisproc"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		replicas int
		extra    []string
	}{
		{"no persistence", 1, nil},
		{"appendonly", 1, []string{"--appendonly", "yes"}},
		{"two replicas", 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			s := redistest.StartSentinel(t, tt.replicas, tt.extra...)
			t.Logf("sentinel set-up ready in %v: %s", time.Since(start).Round(time.Millisecond), s.URL)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()

			wantAOF := "no"
			if slices.Contains(tt.extra, "--appendonly") {
				wantAOF = "yes"
			}
			replicas := map[string]bool{}
			for _, r := range s.Replicas {
				replicas[r.Addr] = true
			}
			if len(replicas) != tt.replicas {
				t.Fatalf("%d replicas; want %d", len(replicas), tt.replicas)
			}
			for _, p := range append([]*redisproc.Proc{s.Primary}, s.Replicas...) {
				addr := p.Addr
				if got := nodeClient(t, addr).ConfigGet(ctx, "appendonly").Val()["appendonly"]; got != wantAOF {
					t.Errorf("%s: appendonly %q, want %q", addr, got, wantAOF)
				}
			}

			opt, err := redis.ParseFailoverURL(s.URL)
			if err != nil {
				t.Fatalf("ParseFailoverURL(%q): %v", s.URL, err)
			}
			if opt.MasterName != s.MasterName || len(opt.SentinelAddrs) != 3 {
				t.Fatalf("ParseFailoverURL(%q): master %q, sentinels %v", s.URL, opt.MasterName, opt.SentinelAddrs)
			}
			opt.DisableIdentity = true // CLIENT SETINFO is Redis 7.2+
			rdb := redis.NewFailoverClient(opt)
			defer rdb.Close()

			if got, err := s.PrimaryAddr(ctx); err != nil || got != s.Primary.Addr {
				t.Fatalf("PrimaryAddr = %q, %v; want %q", got, err, s.Primary.Addr)
			}
			if err := rdb.Set(ctx, "before", "kept", 0).Err(); err != nil {
				t.Fatalf("SET before the failover: %v", err)
			}
			// SENTINEL FAILOVER does not wait for the replicas: make sure
			// they have the write.
			if n, err := rdb.Do(ctx, "WAIT", tt.replicas, 5000).Int(); err != nil || n != tt.replicas {
				t.Fatalf("WAIT %d = %d, %v", tt.replicas, n, err)
			}

			triggered := time.Now()
			newPrimary, err := s.Failover(ctx)
			if err != nil {
				t.Fatalf("Failover: %v", err)
			}
			t.Logf("sentinels agree on the new primary after %v", time.Since(triggered).Round(time.Millisecond))
			if !replicas[newPrimary] {
				t.Fatalf("Failover moved the primary to %s, want one of the replicas %v", newPrimary, replicas)
			}
			if got, err := s.PrimaryAddr(ctx); err != nil || got != newPrimary {
				t.Fatalf("PrimaryAddr after the failover = %q, %v; want %q", got, err, newPrimary)
			}

			// The same client moves to the new primary by itself. The old
			// primary still takes writes until the sentinels reconfigure
			// it, so a write counts once the new primary has it.
			onNew := nodeClient(t, newPrimary)
			var writeErr error
			for i := 0; ; i++ {
				key := "after:" + strconv.Itoa(i)
				writeErr = rdb.Set(ctx, key, i, 0).Err()
				if writeErr == nil && onNew.Exists(ctx, key).Val() == 1 {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the client never wrote to the new primary %s (last error: %v)", newPrimary, writeErr)
				case <-time.After(20 * time.Millisecond):
				}
			}
			t.Logf("client writes to the new primary %v after the trigger", time.Since(triggered).Round(time.Millisecond))
			if got, err := rdb.Get(ctx, "before").Result(); err != nil || got != "kept" {
				t.Errorf("GET before = %q, %v; want %q", got, err, "kept")
			}

			// A restarted sentinel comes back from its rewritten config
			// file, knowing the new primary.
			sent := s.Sentinels[0]
			if err := sent.Restart(); err != nil {
				t.Fatalf("restart sentinel %s: %v", sent.Addr, err)
			}
			sc := redis.NewSentinelClient(&redis.Options{Addr: sent.Addr, Protocol: 2, DisableIdentity: true})
			defer sc.Close()
			if got, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result(); err != nil || len(got) != 2 || got[0]+":"+got[1] != newPrimary {
				t.Errorf("restarted sentinel says the primary is %v, %v; want %s", got, err, newPrimary)
			}
		})
	}
}
