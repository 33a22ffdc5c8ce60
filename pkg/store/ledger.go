package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
)

// Ledger entry fields: written by ledgerEntry (Go) and luaLedger (the task
// scripts' debits and refunds, and AddCredits).
const (
	fLedgerKind    = "kind"
	fLedgerAmount  = "amount"
	fLedgerBalance = "balance"
	fLedgerTask    = "task"
	fLedgerNote    = "note"
)

// Ledger entry kinds.
const (
	KindDebit  = "debit"  // a task's price, at creation
	KindRefund = "refund" // a failed task's price, back
	KindCredit = "credit" // an operator's top-up or correction
)

// luaLedger appends a credit movement to a ledger stream; task and note may
// be empty.
const luaLedger = `
local function ledger(key, kind, amount, balance, task, note)
  local e = {'kind', kind, 'amount', amount, 'balance', balance}
  if task ~= '' then e[#e+1] = 'task'; e[#e+1] = task end
  if note ~= '' then e[#e+1] = 'note'; e[#e+1] = note end
  redis.call('XADD', key, '*', unpack(e))
end
`

// ledgerEntry is luaLedger's XADD, for Go transactions.
func ledgerEntry(accountID, kind string, amount, balance int64, taskID, note string) *redis.XAddArgs {
	v := []any{fLedgerKind, kind, fLedgerAmount, amount, fLedgerBalance, balance}
	if taskID != "" {
		v = append(v, fLedgerTask, taskID)
	}
	if note != "" {
		v = append(v, fLedgerNote, note)
	}
	return &redis.XAddArgs{Stream: ledgerKey(accountID), Values: v}
}

// LedgerEntry is one credit movement.
type LedgerEntry struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Amount  int64     `json:"amount"` // signed: debits are negative
	Balance int64     `json:"balance"`
	TaskID  string    `json:"task_id,omitempty"`
	Note    string    `json:"note,omitempty"`
}

// addCredits adds ARGV[1] (maybe negative) unless the balance would go below
// zero; returns {ok, balance}: -1 no account, 0 refused, 1 done.
var addCredits = redis.NewScript(luaLedger + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
local bal = tonumber(redis.call('HGET', KEYS[1], 'credits') or '0')
local n = tonumber(ARGV[1])
if bal + n < 0 then return {0, bal} end
bal = redis.call('HINCRBY', KEYS[1], 'credits', n)
ledger(KEYS[2], 'credit', n, bal, '', ARGV[2])
return {1, bal}
`)

// AddCredits adds n credits (negative for a correction) and returns the new
// balance. A correction that would take the balance below zero is refused.
func (s *Store) AddCredits(ctx context.Context, id string, n int64, note string) (int64, error) {
	if n == 0 {
		return 0, invalid("the amount must not be zero")
	}
	if n > 1e12 || n < -1e12 {
		return 0, invalid("the amount is out of range")
	}
	if note == "" {
		note = "operator adjustment"
	}
	res, err := s.eval(ctx, addCredits, []string{accountKey(id), ledgerKey(id)}, n, note).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("store: credits %s: %w", id, err)
	}
	switch res[0] {
	case -1:
		return 0, &apperr.NotFoundError{Kind: "account", ID: id}
	case 0:
		return res[1], invalid("the balance is %d; subtracting %d would take it below 0", res[1], -n)
	}
	return res[1], nil
}

// Ledger returns up to limit of the account's credit movements, newest first.
func (s *Store) Ledger(ctx context.Context, id string, limit int64) ([]LedgerEntry, error) {
	if _, err := s.Account(ctx, id); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	msgs, err := s.rdb.XRevRangeN(ctx, ledgerKey(id), "+", "-", limit).Result()
	if err != nil {
		return nil, fmt.Errorf("store: ledger %s: %w", id, err)
	}
	out := make([]LedgerEntry, 0, len(msgs))
	for _, m := range msgs {
		e := LedgerEntry{ID: m.ID}
		if ms, _, ok := strings.Cut(m.ID, "-"); ok {
			if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
				e.Time = time.UnixMilli(v)
			}
		}
		str := func(k string) string { v, _ := m.Values[k].(string); return v }
		e.Kind, e.TaskID, e.Note = str(fLedgerKind), str(fLedgerTask), str(fLedgerNote)
		e.Amount, _ = strconv.ParseInt(str(fLedgerAmount), 10, 64)
		e.Balance, _ = strconv.ParseInt(str(fLedgerBalance), 10, 64)
		out = append(out, e)
	}
	return out, nil
}
