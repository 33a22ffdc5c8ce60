package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/task"
)

// A task asked for several images that made only some completes with
// them, and the price of the images it did not make comes back in the
// same step: to the balance, out of the key's spend and the day's
// credits (the task still counts among the day's tasks), in one ledger
// entry. It happens once: the complete's retry, a fail or a cancel after
// it give nothing more. A task that made them all is refunded nothing.
func TestCompleteRefundsTheImagesNotMade(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	rdb := srv.Client(t)
	seedAccount(t, rdb, "a", 100, "")
	const keyHash = "k1"
	res := func(n int) []task.Result {
		out := make([]task.Result, n)
		for i := range out {
			out[i] = task.Result{Key: "2026112214/0123456789abcdef0123456789abcde" + string(rune('0'+i)) + ".png"}
		}
		return out
	}
	now := time.Now()
	ch := std
	ch.Price, ch.KeyHash = 12, keyHash // 3 images of 4 credits
	for _, tt := range []struct {
		id           string
		made         int
		wantRefunded int64
	}{
		{"task_lumen_short", 1, 8},
		{"task_lumen_whole", 3, 0},
	} {
		before, _ := balance(t, s, "a")
		tk := pending("a", tt.id)
		tk.CreateTime = now // the day's usage is kept a while from now
		_, err := s.tasks.Create(ctx, tk, ch, nil)
		must(t, err)
		mustOutcome(t, task.Applied)(start(s, "a", tt.id, tt.id))
		c, err := s.tasks.CompleteMade(ctx, "a", tt.id, tt.id, res(tt.made), 3)
		mustOutcome(t, task.Applied)(c, err)
		if c.Refunded != tt.wantRefunded {
			t.Errorf("%s: refunded %d; want %d", tt.id, c.Refunded, tt.wantRefunded)
		}
		// Neither the retry of the complete nor a fail nor a cancel gives
		// more.
		again, err := s.tasks.CompleteMade(ctx, "a", tt.id, tt.id, res(tt.made), 3)
		mustOutcome(t, task.AlreadyFinal)(again, err)
		f, err := s.tasks.Fail(ctx, "a", tt.id, "", task.Failure{Code: "generation_failed", Message: "m"})
		mustOutcome(t, task.AlreadyFinal)(f, err)
		if again.Refunded != 0 || f.Refunded != 0 {
			t.Errorf("%s: refunded again %d, %d", tt.id, again.Refunded, f.Refunded)
		}
		if cn, err := s.tasks.Cancel(ctx, "a", tt.id); err == nil && cn.Refunded != 0 {
			t.Errorf("%s: a cancel after the end refunded %d", tt.id, cn.Refunded)
		}
		after, _ := balance(t, s, "a")
		if want := before - 12 + tt.wantRefunded; after != want {
			t.Errorf("%s: balance %d → %d; want %d", tt.id, before, after, want)
		}
		got, err := s.tasks.Get(ctx, "a", tt.id)
		must(t, err)
		if got.Status != task.Completed || len(got.Results) != tt.made || got.Price != 12 || got.Refunded != (tt.wantRefunded > 0) {
			t.Errorf("%s: record %s, %d results, price %d, refunded %v", tt.id, got.Status, len(got.Results), got.Price, got.Refunded)
		}
	}
	var refunds []account.LedgerEntry
	entries, err := s.accounts.Ledger(ctx, "a", 100)
	must(t, err)
	for _, e := range entries {
		if e.Kind == account.Refund {
			refunds = append(refunds, e)
		}
	}
	if len(refunds) != 1 || refunds[0].Amount != 8 || refunds[0].TaskID != "task_lumen_short" || refunds[0].Note != task.NoteImagesNotMade {
		t.Errorf("refunds in the ledger: %+v; want one of 8 credits for task_lumen_short, noted %s", refunds, task.NoteImagesNotMade)
	}
	if spent := rdb.HGet(ctx, spendKey("a"), keyHash).Val(); spent != "16" {
		t.Errorf("the key has spent %s; want 16 (12 + 12 - 8)", spent)
	}
	day := now.UnixMilli() / 86_400_000
	use := rdb.HGetAll(ctx, usageKey("a", day)).Val()
	if use[testModel+usageTasks] != "2" || use[testModel+usageCredits] != "16" {
		t.Errorf("the day's usage %v; want 2 tasks, 16 credits", use)
	}
}

// A task's record shows the input it was asked, its defaults applied,
// pending and once ended; a record whose input does not decode shows
// none, and the rest of it all the same.
func TestRecordShowsItsInput(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	seedAccount(t, s.rdb, "a", 100, "")
	in := task.Input{Model: catalog.Model{ID: testModel, Tier: catalog.Standard}, Prompt: "a red fox in the snow at dawn",
		AspectRatio: "16:9", ImageSize: "1K", OutputFormat: task.FormatJPEG, OutputQuality: 75, NumImages: 2}
	b, err := jobs.EncodeInput(in)
	must(t, err)
	_, err = s.tasks.Create(ctx, pending("a", "task_lumen_in"), std, b)
	must(t, err)
	check := func(when string) {
		t.Helper()
		got, err := s.tasks.Get(ctx, "a", "task_lumen_in")
		must(t, err)
		if got.Input == nil || !reflect.DeepEqual(*got.Input, in) {
			t.Errorf("%s: the record shows %+v; want %+v", when, got.Input, in)
		}
	}
	check("pending")
	mustOutcome(t, task.Applied)(start(s, "a", "task_lumen_in", "task_lumen_in"))
	mustOutcome(t, task.Applied)(s.tasks.Complete(ctx, "a", "task_lumen_in", "task_lumen_in", nil))
	check("completed")

	_, err = s.tasks.Create(ctx, pending("a", "task_lumen_garbled"), std, []byte{0xff, 0xff})
	must(t, err)
	got, err := s.tasks.Get(ctx, "a", "task_lumen_garbled")
	if err != nil || got.Input != nil || got.Status != task.Pending {
		t.Errorf("a garbled input: %+v, %v; want the record without an input", got, err)
	}
}
