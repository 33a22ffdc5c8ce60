package worker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/easelhq/easel/worker/imagegen"
)

// heldGenerator holds each generation until its task is let go, and says
// which started.
type heldGenerator struct {
	mu      sync.Mutex
	started []string
	release map[string]chan struct{}
}

func (g *heldGenerator) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.release[id]
	if !ok {
		ch = make(chan struct{})
		g.release[id] = ch
	}
	return ch
}

func (g *heldGenerator) Generate(ctx context.Context, req imagegen.Request, _ func(int)) ([]imagegen.Image, error) {
	g.mu.Lock()
	g.started = append(g.started, req.TaskID)
	g.mu.Unlock()
	select {
	case <-g.gate(req.TaskID):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return []imagegen.Image{{Data: []byte("\x89PNG"), MIME: "image/png", Width: 1, Height: 1}}, nil
}

func (g *heldGenerator) let(id string) { close(g.gate(id)) }

func (g *heldGenerator) began() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.started)
}

// An account's share of the workers (EASEL_ACCOUNT_MAX_RUNNING 2), on a
// running worker with slots to spare: the account's third task is parked,
// with no job on any queue, and never takes a slot while the first two
// run; another account's task runs at once meanwhile; when one of the
// first two ends, the third is queued by the worker that ended it and
// runs.
func TestAccountShareOnAWorker(t *testing.T) {
	srv := redistest.Start(t)
	gen := &heldGenerator{release: map[string]chan struct{}{}}
	addr := runWorkerWith(t, srv.URL, map[string]string{
		"EASEL_ACCOUNT_MAX_RUNNING": "2", "EASEL_WORKER_CONCURRENCY": "4", "EASEL_QUEUES": "standard",
	}, Options{Generator: gen})
	localnet.WaitStatus(t, "http://"+addr+"/readyz", 200, 10*time.Second)
	ctx := context.Background()
	rdb := srv.Client(t)
	// The gateway's side: the same share.
	db := store.NewDB(rdb, store.Options{Share: 2})
	tasks, accounts, q := store.NewTasks(db), store.NewAccounts(db), jobs.NewEnqueuer(rdb)
	ins := asynq.NewInspectorFromRedisClient(rdb)
	var ids []string
	t.Cleanup(func() { // before the worker stops
		for _, id := range ids {
			select {
			case <-gen.gate(id):
			default:
				gen.let(id)
			}
		}
	})
	// create makes a task of acct and, as the gateway does, queues its job
	// if it was admitted.
	create := func(acct, id string) bool {
		t.Helper()
		ids = append(ids, id)
		now := time.Now()
		j := jobs.GenerateImage{TaskID: id, AccountID: acct, CreateTime: now, Deadline: now.Add(time.Minute),
			Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
		input, err := jobs.EncodeInput(j.Input)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tasks.Create(ctx, &task.Task{ID: id, AccountID: acct, Type: task.Type, Model: j.Input.Model.ID, CreateTime: now},
			task.Charge{Price: 1, Tier: "standard", CountUntil: j.Deadline.Add(jobs.CountMargin), Queue: jobs.Queue(catalog.Standard)}, input)
		if err != nil {
			t.Fatal(err)
		}
		if c.Admitted {
			if err := q.EnqueueGenerateImage(ctx, jobs.RefOf(j), id); err != nil {
				t.Fatal(err)
			}
		}
		return c.Admitted
	}
	status := func(acct, id string) task.Status {
		t.Helper()
		got, err := tasks.Get(ctx, acct, id)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	started := func(id string) bool { return slices.Contains(gen.began(), id) }
	a, err := accounts.Create(ctx, account.Spec{Name: "busy", Credits: 100})
	if err != nil {
		t.Fatal(err)
	}
	b, err := accounts.Create(ctx, account.Spec{Name: "other", Credits: 100})
	if err != nil {
		t.Fatal(err)
	}

	for i, id := range []string{"task_lumen_1", "task_lumen_2", "task_lumen_3"} {
		if admitted := create(a.ID, id); admitted != (i < 2) {
			t.Fatalf("%s admitted: %v; want %v (a share of 2)", id, admitted, i < 2)
		}
	}
	waitFor(t, 10*time.Second, "the account's first two tasks running", func() bool {
		return started("task_lumen_1") && started("task_lumen_2")
	})
	missing, err := q.Missing(ctx, []jobs.Run{{Queue: jobs.Queue(catalog.Standard), ID: "task_lumen_3"}})
	if err != nil || !missing[0] {
		t.Errorf("the parked task's job is on its queue (missing %v, %v); want none", missing, err)
	}

	// Another account's task runs at once.
	if !create(b.ID, "task_lumen_10") {
		t.Fatal("another account's task was parked")
	}
	waitFor(t, 10*time.Second, "another account's task running", func() bool { return started("task_lumen_10") })
	// The parked task has taken no slot meanwhile (the worker has one
	// free).
	time.Sleep(200 * time.Millisecond)
	if started("task_lumen_3") || status(a.ID, "task_lumen_3") != task.Pending {
		t.Fatalf("the parked task started (%s) while its account's share ran", status(a.ID, "task_lumen_3"))
	}
	if active, err := ins.ListActiveTasks(jobs.Queue(catalog.Standard)); err != nil || len(active) != 3 {
		t.Errorf("%d jobs running (%v); want 3 (the parked task holding none)", len(active), err)
	}
	gen.let("task_lumen_10")
	waitFor(t, 10*time.Second, "the other account's task completed", func() bool { return status(b.ID, "task_lumen_10") == task.Completed })
	if started("task_lumen_3") {
		t.Fatal("the parked task started when another account's task ended")
	}

	// One of the first two ends: the third runs.
	gen.let("task_lumen_1")
	waitFor(t, 10*time.Second, "the parked task running once a place freed", func() bool { return started("task_lumen_3") })
	if st := status(a.ID, "task_lumen_1"); st != task.Completed {
		t.Errorf("the first task is %s; want completed", st)
	}
	if st := status(a.ID, "task_lumen_2"); st != task.Processing {
		t.Errorf("the second task is %s; want still processing", st)
	}
	gen.let("task_lumen_2")
	gen.let("task_lumen_3")
	waitFor(t, 10*time.Second, "every task completed", func() bool {
		return status(a.ID, "task_lumen_2") == task.Completed && status(a.ID, "task_lumen_3") == task.Completed
	})
	if n, _ := tasks.Running(ctx, a.ID); n != 0 {
		t.Errorf("%d places held after every task ended; want 0", n)
	}
	if got := gen.began(); len(got) != 4 {
		t.Errorf("generations %v; want each task once", got)
	}
}
