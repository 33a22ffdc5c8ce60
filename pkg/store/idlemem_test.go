package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// idleAccountBudget is what an idle account may cost Redis: its record
// (about 265 B, its first ledger entry, the initial credits, among its
// fields: no ledger key) and its entries in the indexes of accounts and of
// names (about 285 B), with the server's tables' share, over idleAccounts
// accounts (fewer accounts, a larger share of the fixed costs: 650 B at
// 5,000). A short ledger's hash for the first entry cost 210 B more; a
// stream, 4.6 KB more.
const (
	idleAccountBudget = 600
	idleAccounts      = 30000
)

// An idle account (created with credits, nothing since) costs Redis at
// most idleAccountBudget bytes: used_memory before and after creating N
// accounts through Accounts.Create, over N. N is EASEL_IDLE_ACCOUNTS
// (default idleAccounts); with -v it says where the bytes go:
//
//	EASEL_IDLE_ACCOUNTS=100000 go test -count=1 -run TestIdleAccountMemory -v ./pkg/store/
func TestIdleAccountMemory(t *testing.T) {
	t.Parallel()
	n := idleAccounts
	if v := os.Getenv("EASEL_IDLE_ACCOUNTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("EASEL_IDLE_ACCOUNTS=%q: want a positive number", v)
		}
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := storesOn(rdb, Options{LedgerRetention: 90 * 24 * time.Hour})
	ctx := context.Background()

	before := usedMemory(t, rdb)
	ids := make([]string, n)
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				a, err := s.accounts.Create(ctx, account.Spec{Name: fmt.Sprintf("Account %07d", i), Credits: 1000})
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = a.ID
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	after := usedMemory(t, rdb)
	per := float64(after-before) / float64(n)

	// Where it goes, on one account.
	id := ids[0]
	usage := func(key string) int64 { return rdb.MemoryUsage(ctx, key).Val() }
	t.Logf("%d idle accounts: used_memory %d → %d B: %.0f B an account (record %d B, ledger %d B as a %s)",
		n, before, after, per, usage(accountKey(id)), usage(ledgerShortKey(id)), rdb.Type(ctx, ledgerShortKey(id)).Val())
	if l, err := s.accounts.Ledger(ctx, id, 10); err != nil || len(l) != 1 || l[0].Amount != 1000 || l[0].Note != "initial credits" {
		t.Fatalf("Ledger = %+v, %v; want the initial credits", l, err)
	}
	if n := rdb.Exists(ctx, ledgerKey(id)).Val(); n != 0 {
		t.Errorf("an idle account's ledger has a stream")
	}
	if per > idleAccountBudget {
		t.Errorf("an idle account costs %.0f B; want at most %d", per, idleAccountBudget)
	}

	// Where it goes, over all of them: what deleting each part frees.
	if testing.Verbose() {
		parts := []struct {
			name string
			keys func(id string) []string
		}{
			{"ledgers", func(id string) []string { return []string{ledgerShortKey(id), ledgerKey(id)} }},
			{"records", func(id string) []string { return []string{accountKey(id)} }},
		}
		for _, part := range parts {
			m := usedMemory(t, rdb)
			for i := 0; i < n; i += 1000 {
				var keys []string
				for _, id := range ids[i:min(i+1000, n)] {
					keys = append(keys, part.keys(id)...)
				}
				must(t, rdb.Unlink(ctx, keys...).Err())
			}
			t.Logf("the %s: %.0f B an account", part.name, float64(m-usedMemory(t, rdb))/float64(n))
		}
		m := usedMemory(t, rdb)
		must(t, rdb.Del(ctx, accountsKey(), accountNamesKey()).Err())
		t.Logf("the indexes of accounts and names: %.0f B an account", float64(m-usedMemory(t, rdb))/float64(n))
		t.Logf("left: %d B", usedMemory(t, rdb)-before)
	}
}

// usedMemory is the server's used_memory, in bytes.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}
