package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// Every ledger write drops the entries older than the retention (XADD
// MINID) and sets the ledger's time to live to the retention, whichever
// write it is: a create's debit, each kind of refund, an operator's
// credits, an account's initial credits. The balance is the account's,
// never the ledger's: trimming changes no balance.
func TestLedgerRetention(t *testing.T) {
	t.Parallel()
	const keep = time.Hour
	tests := []struct {
		name string
		// before (on a store that keeps everything, so nothing is trimmed
		// before the write under test) and write (on the one that keeps an
		// hour) run on account "r" (100 credits); write returns the
		// credits it moved.
		before func(t *testing.T, s *stores)
		write  func(t *testing.T, s *stores) int64
		kind   string // the kind of the entry written
	}{
		{"a create's debit", nil, func(t *testing.T, s *stores) int64 {
			_, err := s.tasks.Create(ctx, pending("r", "t"), std, nil)
			must(t, err)
			return -std.Price
		}, account.Debit},
		{"AddCredits", nil, func(t *testing.T, s *stores) int64 {
			_, err := s.accounts.AddCredits(ctx, "r", 50, "top-up")
			must(t, err)
			return 50
		}, account.Credit},
		{"a correction", nil, func(t *testing.T, s *stores) int64 {
			_, err := s.accounts.AddCredits(ctx, "r", -30, "")
			must(t, err)
			return -30
		}, account.Credit},
		{"a fail's refund", createR, func(t *testing.T, s *stores) int64 {
			return mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "r", "t", "", task.Failure{Code: "x", Message: "y"})).Refunded
		}, account.Refund},
		{"an expire's refund", createR, func(t *testing.T, s *stores) int64 {
			return mustOutcome(t, task.Applied)(s.tasks.Expire(ctx, "r", "t")).Refunded
		}, account.Refund},
		{"a batch expire's refund", createR, func(t *testing.T, s *stores) int64 {
			cs, errs := s.tasks.ExpireAll(ctx, []TaskRef{{"r", "t"}})
			must(t, errs[0])
			return cs[0].Refunded
		}, account.Refund},
		{"a cancel's refund", createR, func(t *testing.T, s *stores) int64 {
			c, err := s.tasks.Cancel(ctx, "r", "t")
			must(t, err)
			return c.Refunded
		}, account.Refund},
		{"an abort's refund", createR, func(t *testing.T, s *stores) int64 {
			ok, _, err := s.tasks.Abort(ctx, "r", "t", "")
			if err != nil || !ok {
				t.Fatalf("Abort = %v, %v", ok, err)
			}
			return std.Price
		}, account.Refund},
		{"a poisoned start's refund", func(t *testing.T, s *stores) {
			createR(t, s)
			mustOutcome(t, task.Applied)(start(s, "r", "t", "t"))
			mustOutcome(t, task.Applied)(start(s, "r", "t", "t"))
		}, func(t *testing.T, s *stores) int64 {
			return mustOutcome(t, task.Poisoned)(start(s, "r", "t", "t")).Refunded
		}, account.Refund},
		{"a poisoned takeover's refund", func(t *testing.T, s *stores) {
			createR(t, s)
			mustOutcome(t, task.Applied)(start(s, "r", "t", "t"))
			c, _, err := s.tasks.Takeover(ctx, "r", "t", "t", runName)
			mustOutcome(t, task.Applied)(c, err)
			mustOutcome(t, task.Applied)(start(s, "r", "t", "t.r1"))
		}, func(t *testing.T, s *stores) int64 {
			c, _, err := s.tasks.Takeover(ctx, "r", "t", "t.r1", runName)
			return mustOutcome(t, task.Poisoned)(c, err).Refunded
		}, account.Refund},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			seedAccount(t, rdb, "r", 100, "")
			now := time.Now()
			// Entries already in the ledger: two older than the retention,
			// one just within it.
			old := []string{idAt(now.Add(-3 * keep)), idAt(now.Add(-keep - time.Minute)), idAt(now.Add(-keep + time.Minute))}
			for _, id := range old {
				must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: ledgerKey("r"), ID: id, Values: []any{fLedgerKind, "credit", fLedgerAmount, 0, fLedgerBalance, 100}}).Err())
			}
			if tt.before != nil {
				tt.before(t, storesOn(rdb, Options{}))
			}
			credits := mustCreditsOf(t, rdb, "r")
			entries := rdb.XLen(ctx, ledgerKey("r")).Val()

			s := storesOn(rdb, Options{LedgerRetention: keep})
			moved := tt.write(t, s)

			got := rdb.XRange(ctx, ledgerKey("r"), "-", "+").Val()
			if len(got) != int(entries)-2+1 || got[0].ID != old[2] {
				t.Fatalf("the ledger holds %d entries from %s; want the %d there less the two older than the retention, and the new one", len(got), got[0].ID, entries)
			}
			last := got[len(got)-1]
			if last.Values[fLedgerKind] != tt.kind || last.Values[fLedgerAmount] != strconv.FormatInt(moved, 10) {
				t.Errorf("the new entry %v; want a %s of %d", last.Values, tt.kind, moved)
			}
			// The balance is what it was, moved by the write alone.
			after := mustCreditsOf(t, rdb, "r")
			if after != credits+moved || last.Values[fLedgerBalance] != strconv.FormatInt(after, 10) {
				t.Errorf("balance %d → %d, the entry says %v; want %d", credits, after, last.Values[fLedgerBalance], credits+moved)
			}
			if ttl := rdb.PTTL(ctx, ledgerKey("r")).Val(); ttl <= keep-time.Minute || ttl > keep {
				t.Errorf("the ledger's TTL %v; want the retention %v", ttl, keep)
			}
		})
	}

	// An account's initial credits: the first entry, kept in the account's
	// record (no ledger key), read while within the retention.
	t.Run("an account's initial credits", func(t *testing.T) {
		now := time.Now()
		s, _ := blankStore(t, Options{LedgerRetention: keep, Now: func() time.Time { return now }})
		a, err := s.accounts.Create(ctx, account.Spec{Name: "x", Credits: 70})
		must(t, err)
		l, err := s.accounts.Ledger(ctx, a.ID, 10)
		if err != nil || len(l) != 1 || l[0].Amount != 70 || l[0].Balance != 70 || l[0].Note != "initial credits" ||
			l[0].Kind != account.Credit || l[0].ID != strconv.FormatInt(a.CreatedAt.UnixMilli(), 10)+"-0" {
			t.Fatalf("Ledger = %+v, %v", l, err)
		}
		if n := s.rdb.Exists(ctx, ledgerKey(a.ID), ledgerShortKey(a.ID)).Val(); n != 0 {
			t.Errorf("a new account has %d ledger keys; want none", n)
		}
		now = now.Add(keep - time.Minute)
		if l, err := s.accounts.Ledger(ctx, a.ID, 10); err != nil || len(l) != 1 {
			t.Errorf("within the retention: Ledger = %+v, %v", l, err)
		}
		now = now.Add(2 * time.Minute)
		if l, err := s.accounts.Ledger(ctx, a.ID, 10); err != nil || len(l) != 0 {
			t.Errorf("past the retention: Ledger = %+v, %v; want none", l, err)
		}
	})

	// A short retention, in real time: an entry older than it is gone
	// after a later write; one within it stays; the ledger lives as long
	// as writes keep coming within the retention.
	t.Run("a short retention, in real time", func(t *testing.T) {
		const short = 2 * time.Second
		s, _ := blankStore(t, Options{LedgerRetention: short})
		a, err := s.accounts.Create(ctx, account.Spec{Name: "x", Credits: 10}) // entry 1, at 0
		must(t, err)
		time.Sleep(1200 * time.Millisecond)
		_, err = s.accounts.AddCredits(ctx, a.ID, 5, "") // entry 2, at 1.2 s
		must(t, err)
		time.Sleep(1200 * time.Millisecond)
		_, err = s.accounts.AddCredits(ctx, a.ID, 7, "") // entry 3, at 2.4 s: entry 1 is older than the retention
		must(t, err)
		l, err := s.accounts.Ledger(ctx, a.ID, 10)
		must(t, err)
		if len(l) != 2 || l[0].Amount != 7 || l[1].Amount != 5 {
			t.Errorf("the ledger after a later write: %+v; want the two entries within the retention", l)
		}
		if got, _ := s.accounts.Get(ctx, a.ID); got.Credits != 22 || l[0].Balance != 22 {
			t.Errorf("balance %d, the last entry's %d; want 22", got.Credits, l[0].Balance)
		}
		if ttl := s.rdb.PTTL(ctx, ledgerShortKey(a.ID)).Val(); ttl <= 0 || ttl > short {
			t.Errorf("TTL %v; want at most %v", ttl, short)
		}
	})

	// No retention: nothing dropped, no TTL.
	t.Run("kept for ever", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		seedAccount(t, rdb, "r", 100, "")
		must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: ledgerKey("r"), ID: "1000-1", Values: []any{fLedgerKind, "credit"}}).Err())
		s := storesOn(rdb, Options{})
		_, err := s.accounts.AddCredits(ctx, "r", 5, "")
		must(t, err)
		createR(t, s)
		mustOutcome(t, task.Applied)(s.tasks.Fail(ctx, "r", "t", "", task.Failure{Code: "x", Message: "y"}))
		if n := rdb.XLen(ctx, ledgerKey("r")).Val(); n != 4 {
			t.Errorf("%d entries; want all 4", n)
		}
		if ttl := rdb.PTTL(ctx, ledgerKey("r")).Val(); ttl != -1 {
			t.Errorf("TTL %v; want none", ttl)
		}
	})
}

// createR creates task t of account r.
func createR(t *testing.T, s *stores) {
	t.Helper()
	_, err := s.tasks.Create(ctx, pending("r", "t"), std, nil)
	must(t, err)
}

// idAt is a stream entry id at a time.
func idAt(at time.Time) string { return strconv.FormatInt(at.UnixMilli(), 10) + "-1" }

func mustCreditsOf(t *testing.T, rdb redis.Cmdable, acct string) int64 {
	t.Helper()
	n, err := rdb.HGet(ctx, accountKey(acct), fAcctCredits).Int64()
	must(t, err)
	return n
}

// LedgerRange pages through more than a page of entries, oldest first,
// from (inclusive) to (exclusive, to the millisecond), and stops at fn's
// error.
func TestLedgerRange(t *testing.T) {
	t.Parallel()
	s, _ := blankStore(t, Options{})
	a, err := s.accounts.Create(ctx, account.Spec{Name: "x", Credits: 10})
	must(t, err)
	const adds = 2 * ledgerPage // with the initial credits, more than two pages
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for i := w; i < adds; i += 8 {
				if _, err := s.accounts.AddCredits(ctx, a.ID, 1, fmt.Sprint("n", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	var all []account.LedgerEntry
	must(t, s.accounts.LedgerRange(ctx, a.ID, time.Time{}, time.Time{}, func(e account.LedgerEntry) error {
		all = append(all, e)
		return nil
	}))
	if len(all) != adds+1 {
		t.Fatalf("%d entries; want %d", len(all), adds+1)
	}
	if all[0].Note != "initial credits" || all[0].Balance != 10 {
		t.Errorf("first entry %+v; want the initial credits", all[0])
	}
	for i := 1; i < len(all); i++ {
		prev, e := all[i-1], all[i]
		if !idLess(prev.ID, e.ID) || e.Time.Before(prev.Time) {
			t.Fatalf("entry %d (%s) after %s: not oldest first", i, e.ID, prev.ID)
		}
		if e.Balance != prev.Balance+e.Amount || e.Kind != account.Credit {
			t.Fatalf("entry %d %+v after %+v: the balances do not follow", i, e, prev)
		}
	}
	if got, _ := s.accounts.Get(ctx, a.ID); got.Credits != all[len(all)-1].Balance || got.Credits != 10+adds {
		t.Errorf("balance %d; the last entry says %d", got.Credits, all[len(all)-1].Balance)
	}
	// Ledger, newest first, agrees.
	if l, err := s.accounts.Ledger(ctx, a.ID, 3); err != nil || len(l) != 3 || l[0].ID != all[len(all)-1].ID || l[2].ID != all[len(all)-3].ID {
		t.Errorf("Ledger(3) = %+v, %v", l, err)
	}

	// Ranges, at entries' own times: from is in, to is out, to the
	// millisecond (entries share milliseconds).
	rangeOf := func(from, to time.Time) []string {
		var out []string
		must(t, s.accounts.LedgerRange(ctx, a.ID, from, to, func(e account.LedgerEntry) error {
			out = append(out, e.ID)
			return nil
		}))
		return out
	}
	want := func(from, to time.Time) []string {
		var out []string
		for _, e := range all {
			if !e.Time.Before(from) && (to.IsZero() || e.Time.Before(to)) {
				out = append(out, e.ID)
			}
		}
		return out
	}
	for _, r := range []struct{ from, to int }{{0, len(all) - 1}, {300, 1200}, {1, 2}, {len(all) / 2, -1}, {len(all) - 1, -1}} {
		from := all[r.from].Time
		var to time.Time
		if r.to >= 0 {
			to = all[r.to].Time
		}
		got, w := rangeOf(from, to), want(from, to)
		if strings.Join(got, ",") != strings.Join(w, ",") {
			t.Errorf("LedgerRange(entry %d's time, entry %d's) = %d entries; want %d", r.from, r.to, len(got), len(w))
		}
		if r.to >= 0 && len(got) > 0 && got[len(got)-1] == all[r.to].ID {
			t.Errorf("LedgerRange(…, entry %d's time) holds that entry: to is exclusive", r.to)
		}
	}
	if got := rangeOf(all[10].Time, all[10].Time); len(got) != 0 {
		t.Errorf("an empty range gave %d entries", len(got))
	}
	if got := rangeOf(time.Now().Add(time.Hour), time.Time{}); len(got) != 0 {
		t.Errorf("a range in the future gave %d entries", len(got))
	}

	// fn's error stops it, and is returned.
	stop := errors.New("stop")
	n := 0
	err = s.accounts.LedgerRange(ctx, a.ID, time.Time{}, time.Time{}, func(account.LedgerEntry) error {
		if n++; n == ledgerPage+5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != ledgerPage+5 {
		t.Errorf("LedgerRange with fn failing at %d: %v after %d calls", ledgerPage+5, err, n)
	}
	if err := s.accounts.LedgerRange(ctx, "acct_nope", time.Time{}, time.Time{}, func(account.LedgerEntry) error { return nil }); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("LedgerRange of a missing account: %v", err)
	}
}

// idLess orders stream entry ids.
func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ams, _ := strconv.ParseUint(am, 10, 64)
	bms, _ := strconv.ParseUint(bm, 10, 64)
	if ams != bms {
		return ams < bms
	}
	asq, _ := strconv.ParseUint(as, 10, 64)
	bsq, _ := strconv.ParseUint(bs, 10, 64)
	return asq < bsq
}
