package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
)

// TestConcurrentCreatesNeverOverdraw: 200 creates at once on an account
// whose balance covers exactly 50 tasks.
func TestConcurrentCreatesNeverOverdraw(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	id, key := s.newAccount(t, account.Spec{Name: "fifty", Credits: 50 * 4, RateLimit: 10_000, MaxInflight: 10_000})
	const n = 200
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			st, _, _ := newClient(t, s.base, key).do("POST", "/v1/task/create", createBody(std, `{"prompt":"p"}`), nil)
			statuses <- st
		}()
	}
	close(start)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for st := range statuses {
		count[st]++
	}
	if count[200] != 50 || count[402] != 150 || len(count) != 2 {
		t.Errorf("statuses %v; want 50 × 200 and 150 × 402", count)
	}
	ctx := context.Background()
	a, err := s.accounts.Get(ctx, id)
	if err != nil || a.Credits != 0 {
		t.Errorf("balance %d, %v; want 0", a.Credits, err)
	}
	entries, _ := s.accounts.Ledger(ctx, id, 1000)
	debits, tasks := 0, map[string]bool{}
	for _, e := range entries {
		if e.Kind == account.Debit && e.Amount == -4 {
			debits++
			tasks[e.TaskID] = true
		}
	}
	if len(entries) != 51 || debits != 50 || len(tasks) != 50 { // 50 debits and the initial credit
		t.Errorf("ledger: %d entries, %d debits of %d tasks", len(entries), debits, len(tasks))
	}
}

func TestFailedTaskIsRefunded(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	id, key := s.newAccount(t, account.Spec{Name: "refund", Credits: 100})
	src := sourceServer(t)
	c := newClient(t, s.base, key)
	task := c.create(createBody(pro, `{"prompt":"p","image_size":"4K","image_urls":["`+src.URL+`/0x0.png"]}`))
	// Charged at once; a worker may fail and refund the task (its source
	// is not there) before this read, so the ledger below tells the debit.
	if a, _ := s.accounts.Get(context.Background(), id); a.Credits != 76 && a.Credits != 100 {
		t.Errorf("balance %d after a 4K pro create; want 76 (or 100, refunded already)", a.Credits)
	}
	rec, _, _ := c.poll(task, 30*time.Second)
	if rec.Status != "failed" {
		t.Fatalf("task %s", rec.Status)
	}
	a, _ := s.accounts.Get(context.Background(), id)
	entries, _ := s.accounts.Ledger(context.Background(), id, 10)
	if a.Credits != 100 || len(entries) != 3 || entries[0].Kind != account.Refund || entries[0].TaskID != task || entries[0].Amount != 24 || entries[0].Note != "source_fetch_failed" ||
		entries[1].Kind != account.Debit || entries[1].TaskID != task || entries[1].Amount != -24 || entries[1].Balance != 76 {
		t.Errorf("balance %d, ledger %+v", a.Credits, entries)
	}
}

// TestEaselctl drives the operator's CLI against a running stack: an
// account, a key, a task with it, then the key revoked and refused.
func TestEaselctl(t *testing.T) {
	t.Parallel()
	bin, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stackOptions{})
	ctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "easelctl"), args...)
		cmd.Env = append(cleanEnv(), "EASEL_REDIS_URL="+s.redisURL)
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("easelctl %v: %v %s", args, err, stderr)
		}
		return strings.TrimSpace(string(out))
	}
	id := ctl("account", "create", "--name", "Acme Images", "--credits", "40", "--rate-limit", "5")
	key := ctl("key", "create", "--account", id)
	if bal := ctl("credits", "add", id, "-2"); bal != "38" {
		t.Errorf("credits add -2 printed %q", bal)
	}

	c := newClient(t, s.base, key)
	task := c.create(createBody(std, `{"prompt":"a test of the operator tools"}`))
	if rec, _, _ := c.poll(task, 30*time.Second); rec.Status != "completed" {
		t.Fatalf("task %s", rec.Status)
	}
	var entries []account.LedgerEntry
	if err := json.Unmarshal([]byte(ctl("ledger", id, "--json")), &entries); err != nil || len(entries) != 3 || entries[0].TaskID != task || entries[0].Amount != -4 || entries[0].Balance != 34 {
		t.Errorf("ledger %+v %v", entries, err)
	}

	// Revoke by the listed prefix; the gateway refuses the key within 5 s.
	prefix := key[:12]
	if !strings.Contains(ctl("key", "list", "--account", id), prefix) {
		t.Fatal("key list lacks the key's prefix")
	}
	ctl("key", "revoke", prefix)
	revoked := time.Now()
	for {
		st, _, body := c.do("POST", "/v1/task/create", createBody(std, `{"prompt":"p"}`), nil)
		if st == 401 && strings.Contains(string(body), "revoked") {
			break
		}
		if time.Since(revoked) > 5*time.Second {
			t.Fatalf("revoked key still accepted after 5s: %d %s", st, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("revocation took effect after %v", time.Since(revoked).Round(time.Millisecond))

	// A disabled account is refused with 403, likewise within 5 s.
	acctID, key2 := s.newAccount(t, account.Spec{Name: "to-disable", Credits: 10})
	if !strings.Contains(ctl("account", "list"), acctID) {
		t.Error("account list lacks an account")
	}
	ctl("account", "disable", acctID)
	disabled := time.Now()
	c2 := newClient(t, s.base, key2)
	for {
		st, _, _ := c2.do("GET", "/v1/task/query?task_id=task_lumen_1", "", nil)
		if st == 403 {
			break
		}
		if time.Since(disabled) > 5*time.Second {
			t.Fatalf("disabled account still served after 5s: %d", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
