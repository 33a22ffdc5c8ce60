package store

import (
	"context"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// The usage counts charged tasks: a free task is no one's, a refunded
// one is taken out again.
func TestUsageCountsChargedTasks(t *testing.T) {
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
	if got := days[0].Models; len(got) != 1 || got[testModel] != (account.Usage{Tasks: 1, Credits: std.Price}) {
		t.Errorf("usage %+v; want the paid task alone", got)
	}
}

// An account's keys are bounded: MaxActiveKeys working, a revoked one
// makes room.
func TestKeysBounded(t *testing.T) {
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
