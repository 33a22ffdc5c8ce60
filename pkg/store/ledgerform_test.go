package store

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// ledgerOf is an account's whole ledger, oldest first, whichever its form
// (a short one's hash or a stream), each entry as XRANGE gives a stream's:
// its id and fields, task and note only when it has them.
func ledgerOf(t testing.TB, rdb redis.Scripter, acct string) []redis.XMessage {
	t.Helper()
	keys, args := (&DB{now: time.Now}).ledgerRead(acct, "-", "+", 1<<40, false)
	r, err := ledgerReadLua.Call(context.Background(), rdb, keys, args)
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

// The two forms of a ledger (lib.lua's ledger): a hash while it is short,
// a stream past ledgerShort entries or when written as one before the
// hash existed. Reads agree on both; a write keeps a ledger's form until
// a hash grows past ledgerShort, when it becomes a stream of the same
// entries, with the same ids. On one server and on a cluster.
func TestLedgerForms(t *testing.T) {
	t.Parallel()
	t.Run("one server", func(t *testing.T) {
		testLedgerForms(t, redistest.Start(t).Client(t))
	})
	t.Run("a cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		opt, err := redis.ParseClusterURL(c.URL)
		must(t, err)
		cc := redis.NewClusterClient(opt)
		t.Cleanup(func() { _ = cc.Close() })
		testLedgerForms(t, cc)
	})
}

// ledgerShort is lib.lua's LEDGER_SHORT: the most entries a hash holds.
const ledgerShort = 16

func testLedgerForms(t *testing.T, rdb redis.UniversalClient) {
	const keep = time.Hour
	// typeOf is the form of an account's ledger: "hash" (its short
	// form's hash alone), "stream" (its key alone, a stream), or what its
	// two keys are.
	typeOf := func(acct string) string {
		h, st := rdb.Type(ctx, ledgerShortKey(acct)).Val(), rdb.Type(ctx, ledgerKey(acct)).Val()
		switch {
		case h == "hash" && st == "none":
			return "hash"
		case h == "none" && st == "stream":
			return "stream"
		}
		return fmt.Sprintf("%s and %s", h, st)
	}
	// ttlOK checks the TTL of the ledger's keys there are.
	ttlOK := func(t *testing.T, acct string) {
		t.Helper()
		for _, k := range []string{ledgerShortKey(acct), ledgerKey(acct)} {
			if rdb.Exists(ctx, k).Val() == 0 {
				continue
			}
			if ttl := rdb.PTTL(ctx, k).Val(); ttl <= keep-time.Minute || ttl > keep {
				t.Errorf("the ledger's TTL %v (%s); want the retention %v", ttl, k, keep)
			}
		}
	}

	t.Run("a hash until it grows past the short ledger, then a stream of the same entries", func(t *testing.T) {
		s := storesOn(rdb, Options{LedgerRetention: keep})
		a, err := s.accounts.Create(ctx, account.Spec{Name: "forms", Credits: 70})
		must(t, err)
		// The first entry is in the account's record: no ledger key.
		if typeOf(a.ID) != "none and none" {
			t.Fatalf("a new account's ledger is a %s; want no key", typeOf(a.ID))
		}
		for i := 1; i <= ledgerShort; i++ {
			_, err := s.accounts.AddCredits(ctx, a.ID, int64(i), fmt.Sprintf("top-up|%d", i))
			must(t, err)
		}
		if typeOf(a.ID) != "hash" {
			t.Fatalf("a ledger of %d entries is a %s; want a hash", ledgerShort, typeOf(a.ID))
		}
		short := ledgerOf(t, rdb, a.ID)
		if len(short) != ledgerShort+1 || short[0].Values[fLedgerNote] != "initial credits" || short[0].Values[fLedgerBalance] != "70" {
			t.Fatalf("the short ledger: %v", short)
		}
		for i := 1; i < len(short); i++ {
			prev, e := short[i-1], short[i]
			if !idLess(prev.ID, e.ID) || e.Values[fLedgerNote] != fmt.Sprintf("top-up|%d", i) || e.Values[fLedgerAmount] != strconv.Itoa(i) {
				t.Fatalf("entry %d %v after %v: not in order, or not what was written", i, e, prev)
			}
		}
		ttlOK(t, a.ID)

		_, err = s.accounts.AddCredits(ctx, a.ID, 100, "")
		must(t, err)
		if typeOf(a.ID) != "stream" {
			t.Fatalf("a ledger of %d entries is a %s; want a stream", ledgerShort+1, typeOf(a.ID))
		}
		ttlOK(t, a.ID)
		got := rdb.XRange(ctx, ledgerKey(a.ID), "-", "+").Val()
		if len(got) != ledgerShort+1 {
			t.Fatalf("the stream holds %d entries; want %d", len(got), ledgerShort+1)
		}
		for i, e := range short[1:] {
			if got[i].ID != e.ID || !maps.Equal(got[i].Values, e.Values) {
				t.Errorf("stream entry %d %v; the hash held %v", i, got[i], e)
			}
		}
		last := got[ledgerShort]
		if !idLess(short[ledgerShort].ID, last.ID) || last.Values[fLedgerAmount] != "100" || last.Values[fLedgerBalance] != strconv.Itoa(70+ledgerShort*(ledgerShort+1)/2+100) {
			t.Errorf("the new entry %v", last)
		}
		// Read, the ledger is what it was and the new entry.
		if l := ledgerOf(t, rdb, a.ID); len(l) != ledgerShort+2 || l[0].ID != short[0].ID || l[ledgerShort+1].ID != last.ID {
			t.Errorf("the ledger read after the move: %v", l)
		}
		if l, err := s.accounts.Ledger(ctx, a.ID, 2); err != nil || len(l) != 2 || l[0].ID != last.ID || l[1].ID != short[ledgerShort].ID {
			t.Errorf("Ledger(2) = %+v, %v", l, err)
		}
	})

	t.Run("entries of one millisecond", func(t *testing.T) {
		s := storesOn(rdb, Options{})
		seedAccount(t, rdb, "burst", 0, "")
		// The clock has not moved past the last entry (it went back, or
		// the entries come faster): the next seq of its millisecond.
		future := time.Now().Add(time.Hour).UnixMilli()
		must(t, rdb.HSet(ctx, ledgerShortKey("burst"), fmt.Sprintf("%d-7", future), "credit|1|1||").Err())
		_, err := s.accounts.AddCredits(ctx, "burst", 2, "")
		must(t, err)
		l := ledgerOf(t, rdb, "burst")
		if len(l) != 2 || l[1].ID != fmt.Sprintf("%d-8", future) || l[1].Values[fLedgerAmount] != "2" {
			t.Errorf("the ledger %v; want the new entry at %d-8", l, future)
		}
	})

	t.Run("a stream stays a stream", func(t *testing.T) {
		// An account of Easel before the hash: a stream of one entry.
		s := storesOn(rdb, Options{LedgerRetention: keep})
		seedAccount(t, rdb, "old", 100, "")
		old := idAt(time.Now().Add(-time.Minute))
		must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: ledgerKey("old"), ID: old, Values: []any{fLedgerKind, "credit", fLedgerAmount, 100, fLedgerBalance, 100, fLedgerNote, "initial credits"}}).Err())
		_, err := s.accounts.AddCredits(ctx, "old", 5, "")
		must(t, err)
		if typeOf("old") != "stream" || rdb.XLen(ctx, ledgerKey("old")).Val() != 2 {
			t.Fatalf("after a write the old ledger is a %s of %d entries; want a stream of 2", typeOf("old"), rdb.XLen(ctx, ledgerKey("old")).Val())
		}
		ttlOK(t, "old")
		l, err := s.accounts.Ledger(ctx, "old", 10)
		if err != nil || len(l) != 2 || l[1].ID != old || l[1].Note != "initial credits" || l[0].Amount != 5 || l[0].Balance != 105 {
			t.Errorf("Ledger = %+v, %v", l, err)
		}
		// Once it expired (no credits moved for the retention), the next
		// entry starts a hash.
		must(t, rdb.Del(ctx, ledgerKey("old"), ledgerShortKey("old")).Err())
		_, err = s.accounts.AddCredits(ctx, "old", 1, "")
		must(t, err)
		if typeOf("old") != "hash" {
			t.Errorf("a ledger started again is a %s; want a hash", typeOf("old"))
		}
	})

	// The retention on a hash, as TestLedgerRetention's on a stream: every
	// write drops the entries older than it and sets the TTL; none without
	// one.
	for _, w := range []struct {
		name  string
		write func(t *testing.T, s *stores) int64
	}{
		{"AddCredits", func(t *testing.T, s *stores) int64 {
			_, err := s.accounts.AddCredits(ctx, "kept", 50, "top-up")
			must(t, err)
			return 50
		}},
		{"a create's debit", func(t *testing.T, s *stores) int64 {
			_, err := s.tasks.Create(ctx, pending("kept", "t-"+strconv.FormatInt(time.Now().UnixNano(), 36)), std, nil)
			must(t, err)
			return -std.Price
		}},
	} {
		for _, retention := range []time.Duration{keep, 0} {
			t.Run(fmt.Sprintf("%s, retention %v", w.name, retention), func(t *testing.T) {
				must(t, rdb.Del(ctx, ledgerKey("kept"), ledgerShortKey("kept")).Err())
				seedAccount(t, rdb, "kept", 100, "")
				now := time.Now()
				old := []string{idAt(now.Add(-3 * keep)), idAt(now.Add(-keep - time.Minute)), idAt(now.Add(-keep + time.Minute))}
				for _, id := range old {
					must(t, rdb.HSet(ctx, ledgerShortKey("kept"), id, "credit|0|100||").Err())
				}
				moved := w.write(t, storesOn(rdb, Options{LedgerRetention: retention}))
				got := ledgerOf(t, rdb, "kept")
				want := old[2:]
				if retention == 0 {
					want = old
				}
				if len(got) != len(want)+1 || got[0].ID != want[0] || typeOf("kept") != "hash" {
					t.Fatalf("the ledger (a %s) holds %v; want %v and the new entry", typeOf("kept"), got, want)
				}
				if last := got[len(got)-1]; last.Values[fLedgerAmount] != strconv.FormatInt(moved, 10) || last.Values[fLedgerBalance] != strconv.FormatInt(100+moved, 10) {
					t.Errorf("the new entry %v; want %d, balance %d", last, moved, 100+moved)
				}
				if retention == 0 {
					if ttl := rdb.PTTL(ctx, ledgerShortKey("kept")).Val(); ttl != -1 {
						t.Errorf("TTL %v; want none", ttl)
					}
				} else {
					ttlOK(t, "kept")
				}
			})
		}
	}

	// Easel before the short form (an older gateway or worker, during a
	// rolling upgrade or after a rollback) XADDs to the ledger's key in its
	// scripts, MINID and PEXPIRE as lib.lua's ledger did, and reads it with
	// XRANGE and XREVRANGE. That key is only ever a stream or none: its
	// writes start or extend the stream beside the hash; the reads merge
	// the two by id, an id in both giving both entries; a newer write then
	// goes to the stream.
	oldXAdd := func(t *testing.T, acct, id string, keep time.Duration, v ...any) string {
		t.Helper()
		a := &redis.XAddArgs{Stream: ledgerKey(acct), ID: id, Values: v}
		if keep > 0 {
			a.MinID = strconv.FormatInt(time.Now().Add(-keep).UnixMilli(), 10)
		}
		got, err := rdb.XAdd(ctx, a).Result()
		if err != nil {
			t.Fatalf("an older Easel's XADD: %v", err)
		}
		if keep > 0 {
			must(t, rdb.PExpire(ctx, ledgerKey(acct), keep).Err())
		}
		return got
	}
	oldReads := func(t *testing.T, acct string) []redis.XMessage {
		t.Helper()
		rev, err := rdb.XRevRange(ctx, ledgerKey(acct), "+", "-").Result()
		if err != nil {
			t.Fatalf("an older Easel's XREVRANGE: %v", err)
		}
		fwd, err := rdb.XRange(ctx, ledgerKey(acct), "-", "+").Result()
		if err != nil || len(fwd) != len(rev) {
			t.Fatalf("an older Easel's XRANGE: %d entries, %v; XREVRANGE %d", len(fwd), err, len(rev))
		}
		return fwd
	}
	ids := func(l []account.LedgerEntry) []string {
		out := make([]string, len(l))
		for i, e := range l {
			out[i] = fmt.Sprintf("%s %d", e.ID, e.Amount)
		}
		return out
	}

	t.Run("an older Easel's XADD beside a hash", func(t *testing.T) {
		s := storesOn(rdb, Options{LedgerRetention: keep})
		a, err := s.accounts.Create(ctx, account.Spec{Name: "mixed", Credits: 70})
		must(t, err)
		_, err = s.accounts.AddCredits(ctx, a.ID, 5, "")
		must(t, err)
		// An older gateway's create debits it, a ms later (of one ms, ids in
		// both: below): its XADD starts the stream.
		time.Sleep(2 * time.Millisecond)
		must(t, rdb.HIncrBy(ctx, accountKey(a.ID), fAcctCredits, -4).Err())
		oldID := oldXAdd(t, a.ID, "*", keep, fLedgerKind, "debit", fLedgerAmount, -4, fLedgerBalance, 71, fLedgerTask, "t1")
		if typeOf(a.ID) != "hash and stream" {
			t.Fatalf("the ledger's keys: %s; want a hash and a stream", typeOf(a.ID))
		}
		l, err := s.accounts.Ledger(ctx, a.ID, 10)
		if err != nil || len(l) != 3 || l[0].ID != oldID || l[0].TaskID != "t1" || l[0].Balance != 71 || l[1].Amount != 5 || l[2].Note != "initial credits" {
			t.Fatalf("Ledger = %+v, %v; want the old XADD's debit, then the hash's two", l, err)
		}
		if got := oldReads(t, a.ID); len(got) != 1 || got[0].ID != oldID {
			t.Errorf("an older Easel reads %v; want its own entry", got)
		}
		// A newer write goes to the stream; the hash keeps its entries.
		_, err = s.accounts.AddCredits(ctx, a.ID, 3, "")
		must(t, err)
		if n := rdb.XLen(ctx, ledgerKey(a.ID)).Val(); n != 2 {
			t.Errorf("the stream holds %d entries; want 2", n)
		}
		if n := rdb.HLen(ctx, ledgerShortKey(a.ID)).Val(); n != 1 {
			t.Errorf("the hash holds %d entries; want its 1 (the first entry is in the record)", n)
		}
		ttlOK(t, a.ID)
		l, err = s.accounts.Ledger(ctx, a.ID, 10)
		if err != nil || len(l) != 4 || l[0].Amount != 3 || l[0].Balance != 74 || l[1].ID != oldID {
			t.Errorf("Ledger = %+v, %v; want the new entry first, then the 3 before", l, err)
		}
	})

	t.Run("reads merge a hash and a stream by id", func(t *testing.T) {
		s := storesOn(rdb, Options{LedgerRetention: keep})
		seedAccount(t, rdb, "mixed2", 100, "")
		now := time.Now()
		base := now.Add(-time.Minute).UnixMilli()
		id := func(ms, seq int64) string { return fmt.Sprintf("%d-%d", ms, seq) }
		old := idAt(now.Add(-2 * keep)) // older than the retention
		// The hash (a newer Easel's) and the stream (an older one's), two
		// ids in both: two writers in one ms.
		hash := []struct {
			id     string
			amount int64
		}{{old, 0}, {id(base, 0), 1}, {id(base+2, 0), 2}, {id(base+2, 1), 3}, {id(base+5, 0), 4}}
		stream := []struct {
			id     string
			amount int64
		}{{id(base+1, 0), 10}, {id(base+2, 0), 11}, {id(base+2, 1), 12}, {id(base+3, 0), 13}, {id(base+6, 0), 14}}
		for _, e := range hash {
			must(t, rdb.HSet(ctx, ledgerShortKey("mixed2"), e.id, fmt.Sprintf("credit|%d|100||", e.amount)).Err())
		}
		// Its time to live, as its writer sets it.
		must(t, rdb.PExpire(ctx, ledgerShortKey("mixed2"), keep).Err())
		for _, e := range stream {
			oldXAdd(t, "mixed2", e.id, 0, fLedgerKind, "credit", fLedgerAmount, e.amount, fLedgerBalance, 100)
		}
		// Oldest first; of one id, the hash's first. The hash's entry older
		// than the retention is left out.
		want := []string{id(base, 0) + " 1", id(base+1, 0) + " 10", id(base+2, 0) + " 2", id(base+2, 0) + " 11",
			id(base+2, 1) + " 3", id(base+2, 1) + " 12", id(base+3, 0) + " 13", id(base+5, 0) + " 4", id(base+6, 0) + " 14"}
		newest := slices.Clone(want)
		slices.Reverse(newest)

		for n := int64(1); n <= int64(len(want))+1; n++ {
			l, err := s.accounts.Ledger(ctx, "mixed2", n)
			if w := newest[:min(int(n), len(newest))]; err != nil || !slices.Equal(ids(l), w) {
				t.Errorf("Ledger(%d) = %v, %v; want %v", n, ids(l), err, w)
			}
		}
		for limit := int64(1); limit <= int64(len(want))+1; limit++ {
			var got []string
			before := ""
			for pages := 0; ; pages++ {
				p, next, err := s.accounts.LedgerPage(ctx, "mixed2", before, limit)
				if err != nil || pages > len(want) {
					t.Fatalf("LedgerPage(%q, %d): %v after %d pages", before, limit, err, pages)
				}
				// At most limit entries; a page of 1 that two of one id
				// would start holds both.
				if int64(len(p)) > limit && !(limit == 1 && len(p) == 2 && p[0].ID == p[1].ID) {
					t.Errorf("LedgerPage(%q, %d): %v", before, limit, ids(p))
				}
				got = append(got, ids(p)...)
				if next == "" {
					break
				}
				before = next
			}
			if !slices.Equal(got, newest) {
				t.Errorf("LedgerPage's pages of %d: %v; want %v", limit, got, newest)
			}
		}
		// LedgerRange's reads, a page at a time from past the last id read,
		// at every page size.
		for count := int64(1); count <= 4; count++ {
			var got []string
			start := "-"
			for {
				l, err := s.accounts.readLedger(ctx, "mixed2", start, "+", count, false)
				must(t, err)
				got = append(got, ids(l)...)
				if int64(len(l)) < count || len(got) > len(want) {
					break
				}
				start = "(" + l[len(l)-1].ID
			}
			if !slices.Equal(got, want) {
				t.Errorf("reads of %d from past the last: %v; want %v", count, got, want)
			}
		}
		export := func(from, to time.Time) []string {
			var out []account.LedgerEntry
			must(t, s.accounts.LedgerRange(ctx, "mixed2", from, to, func(e account.LedgerEntry) error {
				out = append(out, e)
				return nil
			}))
			return ids(out)
		}
		if got := export(time.Time{}, time.Time{}); !slices.Equal(got, want) {
			t.Errorf("LedgerRange = %v; want %v", got, want)
		}
		if got := export(time.UnixMilli(base+2), time.UnixMilli(base+3)); !slices.Equal(got, want[2:6]) {
			t.Errorf("LedgerRange of ms 2 = %v; want %v", got, want[2:6])
		}
		if got := oldReads(t, "mixed2"); len(got) != len(stream) {
			t.Errorf("an older Easel reads %d entries; want the stream's %d", len(got), len(stream))
		}

		// A newer write goes to the stream alone: the hash is left as it
		// is, to expire whole, its old entry still left out of reads.
		_, err := s.accounts.AddCredits(ctx, "mixed2", 7, "")
		must(t, err)
		if n := rdb.XLen(ctx, ledgerKey("mixed2")).Val(); n != int64(len(stream))+1 {
			t.Errorf("the stream holds %d entries; want %d", n, len(stream)+1)
		}
		if n := rdb.HLen(ctx, ledgerShortKey("mixed2")).Val(); n != int64(len(hash)) {
			t.Errorf("the hash holds %v; want its %d entries, untouched", rdb.HKeys(ctx, ledgerShortKey("mixed2")).Val(), len(hash))
		}
		ttlOK(t, "mixed2")
		l, err := s.accounts.Ledger(ctx, "mixed2", 100)
		if err != nil || len(l) != len(want)+1 || l[0].Amount != 7 || !slices.Equal(ids(l[1:]), newest) {
			t.Errorf("Ledger = %v, %v; want the new entry, then %v", ids(l), err, newest)
		}
	})

	t.Run("an older Easel's reads never fail", func(t *testing.T) {
		s := storesOn(rdb, Options{LedgerRetention: keep})
		a, err := s.accounts.Create(ctx, account.Spec{Name: "reader", Credits: 1})
		must(t, err)
		for i := 1; i <= ledgerShort+4; i++ {
			got := oldReads(t, a.ID)
			if k := rdb.Type(ctx, ledgerKey(a.ID)).Val(); k != "none" && k != "stream" {
				t.Fatalf("after %d entries the ledger's key is a %s", i, k)
			}
			// i entries: the first in the account's record, which an older
			// Easel does not read; the others in a hash until they are
			// more than a short ledger, then the stream holds them all.
			want := 0
			if i-1 > ledgerShort {
				want = i - 1
			}
			if len(got) != want {
				t.Errorf("after %d entries an older Easel reads %d; want %d", i, len(got), want)
			}
			_, err := s.accounts.AddCredits(ctx, a.ID, 1, "")
			must(t, err)
		}
		if typeOf(a.ID) != "stream" {
			t.Errorf("the ledger is a %s; want a stream", typeOf(a.ID))
		}
	})

	t.Run("reads agree on both forms", func(t *testing.T) {
		s := storesOn(rdb, Options{})
		// The same entries, several in one millisecond, in a hash (h) and
		// a stream (s).
		base := time.Now().Add(-time.Minute).UnixMilli()
		type entry struct {
			ms, seq               int64
			kind, amount, balance string
			task, note            string
		}
		entries := []entry{
			{base, 0, "credit", "10", "10", "", "initial credits"},
			{base, 1, "debit", "-4", "6", "t1", ""},
			{base, 2, "debit", "-4", "2", "t2", ""},
			{base + 5, 0, "refund", "4", "6", "t2", "x|y"},
			{base + 7, 0, "credit", "5", "11", "", "a | note"},
			{base + 7, 1, "debit", "-4", "7", "t3", ""},
			{base + 10, 3, "credit", "-1", "6", "", ""},
			{base + 12, 0, "debit", "-4", "2", "t4", ""},
		}
		for _, acct := range []string{"h", "s"} {
			seedAccount(t, rdb, acct, 2, "")
		}
		for _, e := range entries {
			id := fmt.Sprintf("%d-%d", e.ms, e.seq)
			must(t, rdb.HSet(ctx, ledgerShortKey("h"), id, strings.Join([]string{e.kind, e.amount, e.balance, e.task, e.note}, "|")).Err())
			v := []any{fLedgerKind, e.kind, fLedgerAmount, e.amount, fLedgerBalance, e.balance}
			if e.task != "" {
				v = append(v, fLedgerTask, e.task)
			}
			if e.note != "" {
				v = append(v, fLedgerNote, e.note)
			}
			must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: ledgerKey("s"), ID: id, Values: v}).Err())
		}
		if typeOf("h") != "hash" || typeOf("s") != "stream" {
			t.Fatalf("the ledgers are a %s and a %s", typeOf("h"), typeOf("s"))
		}
		agree := func(what string, read func(acct string) (any, error)) {
			t.Helper()
			h, errH := read("h")
			st, errS := read("s")
			if errH != nil || errS != nil || !reflect.DeepEqual(h, st) {
				t.Errorf("%s: the hash gives %+v, %v; the stream %+v, %v", what, h, errH, st, errS)
			}
		}
		for _, n := range []int64{1, 3, 8, 100} {
			agree(fmt.Sprint("Ledger ", n), func(acct string) (any, error) { return s.accounts.Ledger(ctx, acct, n) })
		}
		for _, limit := range []int64{1, 2, 3, 10} {
			agree(fmt.Sprint("LedgerPage's pages of ", limit), func(acct string) (any, error) {
				var pages [][]account.LedgerEntry
				before := ""
				for {
					p, next, err := s.accounts.LedgerPage(ctx, acct, before, limit)
					if err != nil {
						return nil, err
					}
					pages = append(pages, p)
					if next == "" {
						return pages, nil
					}
					if len(pages) > len(entries) {
						return pages, fmt.Errorf("no last page after %d", len(pages))
					}
					before = next
				}
			})
		}
		for _, before := range []string{fmt.Sprintf("%d-1", base+7), fmt.Sprintf("%d-0", base+7), fmt.Sprintf("%d-2", base), "1-0", "99999999999999-0"} {
			agree("LedgerPage before "+before, func(acct string) (any, error) {
				p, next, err := s.accounts.LedgerPage(ctx, acct, before, 2)
				return []any{p, next}, err
			})
		}
		at := func(ms int64) time.Time { return time.UnixMilli(ms) }
		for _, r := range []struct{ from, to time.Time }{
			{time.Time{}, time.Time{}}, {at(base), at(base + 7)}, {at(base + 1), time.Time{}}, {time.Time{}, at(base + 10)},
			{at(base + 7), at(base + 8)}, {at(base + 5), at(base + 5)}, {at(base + 11), at(base + 13)}, {at(base + 13), time.Time{}},
		} {
			agree(fmt.Sprintf("LedgerRange %d..%d", r.from.UnixMilli()-base, r.to.UnixMilli()-base), func(acct string) (any, error) {
				var out []account.LedgerEntry
				err := s.accounts.LedgerRange(ctx, acct, r.from, r.to, func(e account.LedgerEntry) error {
					out = append(out, e)
					return nil
				})
				return out, err
			})
		}
		// And what they agree on is the entries.
		l, err := s.accounts.Ledger(ctx, "h", 100)
		if err != nil || len(l) != len(entries) {
			t.Fatalf("Ledger = %d entries, %v; want %d", len(l), err, len(entries))
		}
		for i, e := range entries {
			g := l[len(l)-1-i]
			if g.ID != fmt.Sprintf("%d-%d", e.ms, e.seq) || g.Kind != e.kind || strconv.FormatInt(g.Amount, 10) != e.amount ||
				strconv.FormatInt(g.Balance, 10) != e.balance || g.TaskID != e.task || g.Note != e.note || g.Time.UnixMilli() != e.ms {
				t.Errorf("entry %d: %+v; want %+v", i, g, e)
			}
		}
	})
}
