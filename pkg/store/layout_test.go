package store

import (
	"context"
	"hash/crc32"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

var shardKeyPattern = regexp.MustCompile(`^easel:\{s(\d+)\}:(.+)$`)

// accountKeyParts are what follows "a:<account>:" in an account's keys.
var accountKeyParts = []string{"acct", "t:", "j:", "parked", "ledger", "ledger" + ledgerShortPart, "keys", "tasks", "idem:", "wh:", "whsec", "whrecent", spendPart, usagePart, "users"}

// globalKeys are the prefixes of the keys that belong to no account.
var globalKeys = []string{"easel:accounts", "easel:up:{", "easel:upstreams", "easel:key:", "easel:user:", "easel:email:", "easel:session:", "easel:signin:", "easel:accountnames", "easel:keyprefix:", "easel:lock:", "easel:probe:", "easel:q:{",
	"easel:recovery:workers", "easel:task-events", "rate:"}

// allKeys returns every key of the server, or of every master of a
// cluster.
func allKeys(t *testing.T, s *stores) []string {
	t.Helper()
	ctx := context.Background()
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		var out []string
		ch := make(chan []string, 16)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			keys, err := c.Keys(ctx, "*").Result()
			ch <- keys
			return err
		})
		close(ch)
		if err != nil {
			t.Fatal(err)
		}
		for keys := range ch {
			out = append(out, keys...)
		}
		return out
	}
	keys, err := s.rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkKeyLayout checks every key against the layout: an account's keys
// carry its shard's hash tag, "easel:{s<n>}:a:<account>:..." with n =
// ShardOf(account); a shard's own keys are its due work and its lease;
// everything else is one of the few global keys.
func checkKeyLayout(t *testing.T, s *stores) {
	t.Helper()
	keys := allKeys(t, s)
	if len(keys) == 0 {
		t.Fatal("no keys")
	}
	for _, k := range keys {
		if strings.Contains(k, "{a:") {
			t.Errorf("%s: the account hash tag of the old layout", k)
			continue
		}
		m := shardKeyPattern.FindStringSubmatch(k)
		if m == nil {
			global := false
			for _, g := range globalKeys {
				global = global || strings.HasPrefix(k, g)
			}
			if !global {
				t.Errorf("%s: neither a shard's key nor a known global key", k)
			}
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n < 0 || n >= Shards || m[1] != strconv.Itoa(n) {
			t.Errorf("%s: no shard %s", k, m[1])
			continue
		}
		rest := m[2]
		if rest == "due" || rest == "lease" {
			continue
		}
		acctRest, ok := strings.CutPrefix(rest, "a:")
		if !ok {
			t.Errorf("%s: a shard's key that is no account's", k)
			continue
		}
		acct, part, ok := strings.Cut(acctRest, ":")
		if !ok || acct == "" {
			t.Errorf("%s: no account in it", k)
			continue
		}
		if ShardOf(acct) != n {
			t.Errorf("%s: account %s is in shard %d", k, acct, ShardOf(acct))
		}
		known := false
		for _, p := range accountKeyParts {
			known = known || part == p || (strings.HasSuffix(p, ":") && strings.HasPrefix(part, p))
		}
		if !known {
			t.Errorf("%s: an account key of no known kind", k)
		}
	}
}

func TestShardOf(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for i := 0; i < 5000; i++ {
		id := "acct_" + strconv.Itoa(i)
		n := ShardOf(id)
		if n != int(crc32.ChecksumIEEE([]byte(id))%256) || n < 0 || n >= Shards {
			t.Fatalf("ShardOf(%s) = %d", id, n)
		}
		seen[n] = true
		if !strings.HasPrefix(accountKey(id), "easel:{s"+strconv.Itoa(n)+"}:a:"+id+":") || dueOf(id) != "easel:{s"+strconv.Itoa(n)+"}:due" {
			t.Fatalf("%s: keys %s, %s", id, accountKey(id), dueOf(id))
		}
	}
	if Shards != 256 || len(seen) != Shards {
		t.Errorf("5000 accounts over %d of %d shards", len(seen), Shards)
	}
}

// Whatever the store does, every key it writes follows the layout.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, _ := blankStore(t, Options{Share: 1, LedgerRetention: time.Hour, Now: func() time.Time { return now }})
	ctx := context.Background()
	a, err := s.accounts.Create(ctx, account.Spec{Name: "layout", Credits: 1000})
	must(t, err)
	_, _, err = s.accounts.CreateKey(ctx, a.ID)
	must(t, err)
	_, err = s.accounts.AddCredits(ctx, a.ID, 5, "")
	must(t, err)
	c := std
	c.Queue = "standard"
	c.CountUntil = now.Add(time.Hour)
	c.Idempotency = task.Idempotency{Key: "k1", BodyHash: "b"}
	tk := pending(a.ID, "t1")
	tk.Callback = task.Callback{URL: "https://hooks.example.com/" + strings.Repeat("x", 100), Events: task.Events}
	_, err = s.tasks.Create(ctx, tk, c, []byte("job"))
	must(t, err)
	c.Idempotency = task.Idempotency{}
	for _, id := range []string{"t2", "t3"} {
		_, err = s.tasks.Create(ctx, pending(a.ID, id), c, []byte("job"))
		must(t, err)
	}
	mustOutcome(t, task.Applied)(start(s, a.ID, "t1", "t1"))
	progress(t, s, a.ID, "t1", "t1", 10)
	must(t, s.hooks.Queued(ctx, a.ID, "t1", task.EventProgress, 10))
	_, err = s.hooks.RecordAttempt(ctx, a.ID, "t1", task.EventProgress, 10, webhook.Attempt{Time: now}, webhook.StateRetrying, webhook.Outgoing{URL: "u", Body: []byte("b")})
	must(t, err)
	mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, a.ID, "t1", "t1", nil))
	_, err = s.hooks.Secret(ctx, a.ID)
	must(t, err)
	_, err = s.leases.TakeShards(ctx, "w1", []int{0, ShardOf(a.ID)}, time.Minute)
	must(t, err)
	_, err = s.leases.Workers(ctx, "w1", time.Minute)
	must(t, err)
	_, err = s.leases.TryLock(ctx, "sweep", time.Minute)
	must(t, err)
	must(t, s.db.Probe(ctx, "test"))
	if n, _ := s.tasks.Parked(ctx, a.ID); n != 1 {
		t.Fatalf("Parked = %d; want 1 (t3)", n)
	}
	checkKeyLayout(t, s)
}
