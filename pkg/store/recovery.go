package store

import (
	"context"
	"fmt"
	"time"
)

// The due work: each shard keeps, in one time-ordered set, what is due
// when for its accounts' tasks (a task's next check: its queue check while
// admitted and pending or processing, its deadline) and the final webhook events not yet
// queued. The scripts that change a task keep it up to date in the same
// step; a worker reads only what is due, shard by shard (Due), under the
// shard's lease: the background work costs what is due, never a walk of
// the accounts.

// DueKind is what a due entry asks for.
type DueKind byte

// Kinds of due work.
const (
	// DueCheck: an admitted task still pending, or one processing, whose
	// run's job is to be checked for in its queue (and queued again if it
	// is missing: a failover can lose the job of a task that started).
	DueCheck DueKind = 'c'
	// DueExpire: an unfinished task past its deadline, to be failed and
	// refunded (Tasks.Expire).
	DueExpire DueKind = 'x'
	// DueHook: a task's final webhook event that is still unqueued a while
	// after the task ended, to be queued (jobs.QueueHook).
	DueHook DueKind = 'h'
)

// DueEntry is one piece of due work.
type DueEntry struct {
	Kind              DueKind
	AccountID, TaskID string
	// Queue, Run and Deadline (DueCheck): the queue the task's job is in,
	// the run that owns it ("" before any takeover: the first run), and the
	// task's deadline: what it takes to queue the job again.
	Queue, Run string
	Deadline   time.Time
	// Event (DueHook): the webhook event.
	Event string
}

// DueWork is a batch of a shard's due work.
type DueWork struct {
	Entries []DueEntry
	// Next is when the shard's first entry left is due (zero: none).
	Next time.Time
}

var dueLua = newScript[dueKeys, dueArgs, dueReply]("due", map[string]int64{"DUE": 1})

// dueReply is due.lua's reply: when the first entry left is due (-1:
// none), then the entries.
type dueReply struct {
	Code int64    `lua:"code"`
	Next int64    `lua:"next"`
	Rows []dueRow `lua:"entries"`
}

// dueRow is an entry of due work: A, B, C are the queue, the run and the
// deadline of a check (DueCheck), the event of a webhook (DueHook).
type dueRow struct {
	Kind      string `lua:"kind"`
	AccountID string `lua:"account"`
	TaskID    string `lua:"task"`
	A         string `lua:"a"`
	B         string `lua:"b"`
	C         int64  `lua:"c"`
}

type dueKeys struct {
	Due string `lua:"due"`
}

type dueArgs struct {
	Now     int64 `lua:"now"`
	Limit   int   `lua:"limit"`
	Recheck int64 `lua:"recheck"`
	Retry   int64 `lua:"retry"`
}

// dueRetry is how long an entry returned by Due waits before it is due
// again if its work is not done meanwhile (the worker died, a call
// failed).
const dueRetry = 10 * time.Second

// Due returns up to limit entries of a shard's due work, due by now,
// oldest first, and moves each on to when it is next due: a worker that
// takes them and dies leaves nothing stuck. Entries whose work is done
// (the task ended, the event was queued) leave by the change that does it.
func (s *Tasks) Due(ctx context.Context, shard int, now time.Time, limit int) (DueWork, error) {
	r, err := dueLua.run(ctx, s.db, dueKeys{Due: dueKey(shard)}, dueArgs{
		Now: now.UnixMilli(), Limit: limit, Recheck: QueueRecheck.Milliseconds(), Retry: dueRetry.Milliseconds(),
	})
	if err != nil {
		return DueWork{}, fmt.Errorf("store: due work of shard %d: %w", shard, err)
	}
	var w DueWork
	if r.Next >= 0 {
		w.Next = time.UnixMilli(r.Next)
	}
	for _, row := range r.Rows {
		if row.Kind == "" {
			return DueWork{}, fmt.Errorf("store: due work of shard %d: an entry of no kind", shard)
		}
		e := DueEntry{Kind: DueKind(row.Kind[0]), AccountID: row.AccountID, TaskID: row.TaskID}
		switch e.Kind {
		case DueCheck:
			e.Queue, e.Run, e.Deadline = row.A, row.B, time.UnixMilli(row.C)
		case DueHook:
			e.Event = row.A
		}
		w.Entries = append(w.Entries, e)
	}
	return w, nil
}
