package store

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ledgerOf is an account's whole ledger, oldest first, whichever its form
// (a short one's hash or a stream), each entry as XRANGE gives a stream's:
// its id and fields, task and note only when it has them.
func ledgerOf(t testing.TB, rdb redis.Scripter, acct string) []redis.XMessage {
	t.Helper()
	r, err := ledgerReadLua.Call(context.Background(), rdb, ledgerKeys{Ledger: ledgerKey(acct)}, ledgerReadArgs{Start: "-", End: "+", Count: 1 << 40})
	if err != nil {
		t.Fatalf("the ledger of %s: %v", acct, err)
	}
	out := make([]redis.XMessage, 0, len(r.Rows))
	for _, e := range r.Rows {
		v := map[string]any{fLedgerKind: e.Kind, fLedgerAmount: e.Amount, fLedgerBalance: e.Balance}
		if e.TaskID != "" {
			v[fLedgerTask] = e.TaskID
		}
		if e.Note != "" {
			v[fLedgerNote] = e.Note
		}
		out = append(out, redis.XMessage{ID: e.ID, Values: v})
	}
	return out
}
