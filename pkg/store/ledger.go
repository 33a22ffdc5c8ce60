package store

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// addLedgerEntry adds a ledger entry in a Go transaction as lib.lua's
// ledger() does: entries older than the retention dropped, and the ledger
// of an account that moves no credits for that long expiring whole.
func (db *DB) addLedgerEntry(ctx context.Context, p redis.Pipeliner, e *redis.XAddArgs) {
	if keep := db.ledgerKeep; keep > 0 {
		e.MinID = strconv.FormatInt(db.now().Add(-keep).UnixMilli(), 10)
		p.XAdd(ctx, e)
		p.PExpire(ctx, e.Stream, keep)
		return
	}
	p.XAdd(ctx, e)
}

// ledgerEntry is lib.lua's ledger(), for Go transactions.
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

var addCreditsLua = durableScript[creditKeys, addCreditsArgs, balanceReply]("add_credits", map[string]int64{"ADDED": 1, "NO_ACCOUNT": -1, "BELOW_ZERO": 0})

type creditKeys struct {
	Account string `lua:"account"`
	Ledger  string `lua:"ledger"`
}

type balanceReply struct {
	Code    int64 `lua:"code"`
	Balance int64 `lua:"balance"`
}

type addCreditsArgs struct {
	Amount int64  `lua:"amount"`
	Note   string `lua:"note"`
	Now    int64  `lua:"now"`
	Keep   int64  `lua:"keep"`
}

// AddCredits adds n credits (negative for a correction) and returns the
// new balance. A correction that would take the balance below zero is
// refused.
func (s *Accounts) AddCredits(ctx context.Context, id string, n int64, note string) (int64, error) {
	if err := account.CheckCredits(n); err != nil {
		return 0, err
	}
	if note == "" {
		note = "operator adjustment"
	}
	r, err := addCreditsLua.run(ctx, s.db, creditKeys{Account: accountKey(id), Ledger: ledgerKey(id)}, addCreditsArgs{Amount: n, Note: note, Now: s.db.now().UnixMilli(), Keep: s.db.keepMs()})
	if err != nil {
		return 0, fmt.Errorf("store: credits %s: %w", id, err)
	}
	switch r.Code {
	case -1:
		return 0, &apperr.NotFoundError{Kind: "account", ID: id}
	case 0:
		return r.Balance, apperr.Errorf(apperr.Invalid, "the balance is %d; subtracting %d would take it below 0", r.Balance, -n)
	}
	return r.Balance, nil
}

// Ledger returns up to limit of the account's credit movements, newest
// first.
func (s *Accounts) Ledger(ctx context.Context, id string, limit int64) ([]account.LedgerEntry, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	msgs, err := s.db.rdb.XRevRangeN(ctx, ledgerKey(id), "+", "-", limit).Result()
	if err != nil {
		return nil, fmt.Errorf("store: ledger %s: %w", id, err)
	}
	out := make([]account.LedgerEntry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, decodeLedgerEntry(m))
	}
	return out, nil
}

// LedgerPage returns up to limit of the account's credit movements
// older than the entry before ("": the newest), newest first, and the
// cursor of the next page ("" when there is none).
func (s *Accounts) LedgerPage(ctx context.Context, id, before string, limit int64) ([]account.LedgerEntry, string, error) {
	end := "+"
	if before != "" {
		if !ledgerID.MatchString(before) {
			return nil, "", apperr.New(apperr.Invalid, "before must be a ledger entry's id, as a page's next gives it")
		}
		end = "(" + before
	}
	msgs, err := s.db.rdb.XRevRangeN(ctx, ledgerKey(id), end, "-", limit+1).Result()
	if err != nil {
		return nil, "", fmt.Errorf("store: ledger %s: %w", id, err)
	}
	next := ""
	if int64(len(msgs)) > limit {
		msgs = msgs[:limit]
		next = msgs[len(msgs)-1].ID
	}
	out := make([]account.LedgerEntry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, decodeLedgerEntry(m))
	}
	return out, next, nil
}

// ledgerID is the form of a ledger entry's id (a stream entry's).
var ledgerID = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

func decodeLedgerEntry(m redis.XMessage) account.LedgerEntry {
	e := account.LedgerEntry{ID: m.ID}
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
			e.Time = time.UnixMilli(v)
		}
	}
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	e.Kind, e.TaskID, e.Note = str(fLedgerKind), str(fLedgerTask), str(fLedgerNote)
	e.Amount, _ = strconv.ParseInt(str(fLedgerAmount), 10, 64)
	e.Balance, _ = strconv.ParseInt(str(fLedgerBalance), 10, 64)
	return e
}

// ledgerPage is how many entries LedgerRange reads in one round trip.
const ledgerPage = 1000

// LedgerRange calls fn with each of the account's credit movements made
// from from (inclusive; zero: the oldest kept) to to (exclusive; zero:
// now), oldest first, until fn returns an error: what an operator exports
// before the retention drops it. It reads a page of entries a round trip.
func (s *Accounts) LedgerRange(ctx context.Context, id string, from, to time.Time, fn func(account.LedgerEntry) error) error {
	if _, err := s.Get(ctx, id); err != nil {
		return err
	}
	// Entry ids are "<Unix ms>-<seq>". From the zero time (or any before
	// 1970): from the oldest entry kept. The end excludes every entry of
	// to's millisecond: "(<ms>" alone would exclude only "<ms>-<max seq>".
	start := "-"
	if ms := from.UnixMilli(); ms > 0 {
		start = strconv.FormatInt(ms, 10)
	}
	end := "+"
	if !to.IsZero() {
		ms := to.UnixMilli()
		if ms <= 0 || !to.After(from) {
			return nil
		}
		end = "(" + strconv.FormatInt(ms, 10) + "-0"
	}
	for {
		msgs, err := s.db.rdb.XRangeN(ctx, ledgerKey(id), start, end, ledgerPage).Result()
		if err != nil {
			return fmt.Errorf("store: ledger %s: %w", id, err)
		}
		for _, m := range msgs {
			if err := fn(decodeLedgerEntry(m)); err != nil {
				return err
			}
		}
		if len(msgs) < ledgerPage {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}
