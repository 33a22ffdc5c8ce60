package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// The usage counts charged tasks: a free task is no one's, a refunded
// one is taken out again.
func TestUsageCountsChargedTasks(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	today := func(id string) *task.Task { tk := pending("a", id); tk.CreateTime = time.Now(); return tk }
	free := std
	free.Price = 0
	for _, c := range []struct {
		id string
		ch task.Charge
	}{{"free", free}, {"paid", std}, {"paid-refunded", std}} {
		if _, err := s.tasks.Create(ctx, today(c.id), c.ch, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"free", "paid-refunded"} {
		if _, err := s.tasks.Cancel(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
	}
	days, err := s.accounts.Usage(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := days[0].Models; len(got) != 1 || got[testModel] != (account.Usage{Tasks: 1, Credits: std.Price, Refunds: 1, RefundedCredits: std.Price}) {
		t.Errorf("usage %+v; want the paid task alone, and the refunded one as refunded", got)
	}
	if len(days[0].Keys) != 0 {
		t.Errorf("usage by key %+v; want none (no task came with a key)", days[0].Keys)
	}
}

// The usage of each API key is counted in the same step as the account's,
// named by the key's visible prefix, its refunds taken out of it too.
func TestUsageByKey(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	k1, info1, err := s.accounts.CreateKey(ctx, "a")
	must(t, err)
	_, info2, err := s.accounts.CreateKey(ctx, "a")
	must(t, err)
	today := func(id string) *task.Task { tk := pending("a", id); tk.CreateTime = time.Now(); return tk }
	withKey := std
	withKey.KeyHash = account.HashKey(k1)
	for i, c := range []task.Charge{withKey, withKey, withKey, std} {
		if _, err := s.tasks.Create(ctx, today(fmt.Sprintf("t%d", i)), c, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.tasks.Cancel(ctx, "a", "t0"); err != nil {
		t.Fatal(err)
	}
	days, err := s.accounts.Usage(ctx, "a", 2)
	must(t, err)
	d := days[1]
	if got := d.Models[testModel]; got != (account.Usage{Tasks: 3, Credits: 3 * std.Price, Refunds: 1, RefundedCredits: std.Price}) {
		t.Errorf("the model's usage %+v", got)
	}
	if got := d.Keys[info1.Prefix][testModel]; got != (account.Usage{Tasks: 2, Credits: 2 * std.Price, Refunds: 1, RefundedCredits: std.Price}) {
		t.Errorf("key %s's usage %+v; want two tasks, one refunded (all %+v)", info1.Prefix, got, d.Keys)
	}
	if _, ok := d.Keys[info2.Prefix]; ok || len(d.Keys) != 1 {
		t.Errorf("usage by key %+v; want the first key's alone", d.Keys)
	}
	if len(days[0].Keys) != 0 || len(days[0].Models) != 0 {
		t.Errorf("yesterday's usage %+v; want none", days[0])
	}
}

// An account's keys are bounded: MaxActiveKeys working, a revoked one
// makes room.
func TestKeysBounded(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	var first string
	for i := range account.MaxActiveKeys {
		k, _, err := s.accounts.CreateKey(ctx, "a")
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if i == 0 {
			first = k
		}
	}
	if _, _, err := s.accounts.CreateKey(ctx, "a"); apperr.CodeOf(err) != apperr.LimitExceeded {
		t.Fatalf("key %d: %v; want limit_exceeded", account.MaxActiveKeys+1, err)
	}
	if _, err := s.accounts.RevokeKey(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.accounts.CreateKey(ctx, "a"); err != nil {
		t.Fatalf("a key after a revocation: %v", err)
	}
}
