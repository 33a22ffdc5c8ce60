package store

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

type ledgerKeys struct {
	Ledger  string `lua:"ledger"`
	Account string `lua:"account"`
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
	out, err := s.readLedger(ctx, id, "-", "+", limit, true)
	if int64(len(out)) > limit {
		out = out[:limit] // two entries of one id (readLedger)
	}
	return out, err
}

var ledgerReadLua = newScript[ledgerKeys, ledgerReadArgs, ledgerReply]("ledger_read", map[string]int64{"READ": 1})

// ledgerReadArgs: the bounds as XRANGE takes them, and the store's time
// and retention (the first entry, kept in the account's record, is read
// only within the retention).
type ledgerReadArgs struct {
	Start string `lua:"start"`
	End   string `lua:"end"`
	Count int64  `lua:"count"`
	Rev   bool   `lua:"rev"`
	Now   int64  `lua:"now"`
	Keep  int64  `lua:"keep"`
	// The first entry's kind and note (fAcctOpen).
	OpenKind string `lua:"open_kind"`
	OpenNote string `lua:"open_note"`
}

// ledgerOpenNote is the note of an account's first entry.
const ledgerOpenNote = "initial credits"

// ledgerRead is what ledger_read.lua is given to read an account's
// ledger from start to end.
func (db *DB) ledgerRead(id, start, end string, count int64, rev bool) (ledgerKeys, ledgerReadArgs) {
	return ledgerKeys{Ledger: ledgerKey(id), Account: accountKey(id)}, ledgerReadArgs{Start: start, End: end, Count: count, Rev: rev,
		Now: db.now().UnixMilli(), Keep: db.keepMs(), OpenKind: account.Credit, OpenNote: ledgerOpenNote}
}

type ledgerReply struct {
	Code int64       `lua:"code"`
	Rows []ledgerRow `lua:"entries"`
}

// ledgerRow is a ledger entry as ledger_read.lua returns it: its fields
// as the ledger holds them.
type ledgerRow struct {
	ID      string `lua:"id"`
	Kind    string `lua:"kind"`
	Amount  string `lua:"amount"`
	Balance string `lua:"balance"`
	TaskID  string `lua:"task"`
	Note    string `lua:"note"`
}

// readLedger reads at most count entries of an account's ledger from
// start to end (XRANGE's bounds), oldest first or, rev, newest first, from
// both its forms (lib.lua's ledger) merged by id: one script, so that a
// ledger that changes form meanwhile is read whole. An id may be in both
// forms (an older Easel's XADD during an upgrade, in the ms of a newer
// one's entry): both entries are read, and a read never ends between
// them, so it may give count + 1 entries; a read from past the last id
// read ("(" and it) misses none.
func (s *Accounts) readLedger(ctx context.Context, id, start, end string, count int64, rev bool) ([]account.LedgerEntry, error) {
	keys, args := s.db.ledgerRead(id, start, end, count, rev)
	r, err := ledgerReadLua.run(ctx, s.db, keys, args)
	if err != nil {
		return nil, fmt.Errorf("store: ledger %s: %w", id, err)
	}
	out := make([]account.LedgerEntry, 0, len(r.Rows))
	for _, m := range r.Rows {
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
	// Two more than a page: a page never ends between two entries of one
	// id (readLedger), as the next starts past the id. It ends before
	// them, or, when they would start it, after them: limit + 1 entries.
	out, err := s.readLedger(ctx, id, "-", end, limit+2, true)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if int64(len(out)) > limit {
		cut := int(limit)
		if out[cut].ID == out[cut-1].ID {
			if cut > 1 {
				cut--
			} else {
				cut++
			}
		}
		if cut < len(out) {
			out = out[:cut]
			next = out[cut-1].ID
		}
	}
	return out, next, nil
}

// ledgerID is the form of a ledger entry's id (a stream entry's).
var ledgerID = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

func decodeLedgerEntry(m ledgerRow) account.LedgerEntry {
	e := account.LedgerEntry{ID: m.ID, Kind: m.Kind, TaskID: m.TaskID, Note: m.Note}
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
			e.Time = time.UnixMilli(v)
		}
	}
	e.Amount, _ = strconv.ParseInt(m.Amount, 10, 64)
	e.Balance, _ = strconv.ParseInt(m.Balance, 10, 64)
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
		entries, err := s.readLedger(ctx, id, start, end, ledgerPage, false)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(entries) < ledgerPage {
			return nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}
