package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/task"
)

// The recovery's listings: what crashes and failovers leave behind, for
// the workers' sweeper to put right.

// QueueCheck is a task still pending whose job is due to be checked for:
// its gateway may have stopped before queueing it, or a failover may have
// lost the queue's write while keeping the task's (the two are separate
// writes, to keys on separate slots).
type QueueCheck struct {
	AccountID, TaskID string
	// Pending is whether the task is still pending (a check listed for a
	// task that has moved on is only to be dropped); Job its job payload,
	// Run the run that owns it ("" before any takeover), Created its
	// creation time.
	Pending bool
	Job     []byte
	Run     string
	Created time.Time
}

// QueueChecks lists up to limit queue checks, across all accounts, due by
// now. Every task is listed, from its creation until a run starts it or it
// ends; the checker moves each check on (ScheduleQueueCheck) or drops it
// (DropQueueCheck).
func (s *Tasks) QueueChecks(ctx context.Context, now time.Time, limit int64) ([]QueueCheck, error) {
	ids, due, err := s.db.dueByAccount(ctx, checksKey, strconv.FormatInt(now.UnixMilli(), 10), limit)
	if err != nil {
		return nil, fmt.Errorf("store: queue checks: %w", err)
	}
	var out []QueueCheck
	for i, id := range ids {
		for _, z := range due[i] {
			if int64(len(out)) >= limit {
				break
			}
			t, _ := z.Member.(string)
			out = append(out, QueueCheck{AccountID: id, TaskID: t})
		}
	}
	recs := make([]*redis.SliceCmd, len(out))
	if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range out {
			recs[i] = p.HMGet(ctx, taskKey(u.AccountID, u.TaskID), fTaskStatus, fTaskJob, fTaskRun, fTaskCreated)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: queue checks: %w", err)
	}
	for i := range out {
		v := recs[i].Val()
		str := func(j int) string { s, _ := v[j].(string); return s }
		out[i].Pending = str(0) == string(task.Pending)
		if job := str(1); job != "" {
			out[i].Job = []byte(job)
		}
		out[i].Run = str(2)
		if ms, err := strconv.ParseInt(str(3), 10, 64); err == nil {
			out[i].Created = time.UnixMilli(ms)
		}
	}
	return out, nil
}

// ScheduleQueueCheck moves a task's queue check to at, if it is still
// listed (a run that started the task since has dropped it).
func (s *Tasks) ScheduleQueueCheck(ctx context.Context, accountID, taskID string, at time.Time) error {
	if err := s.db.rdb.ZAddXX(ctx, checksKey(accountID), redis.Z{Score: float64(at.UnixMilli()), Member: taskID}).Err(); err != nil {
		return fmt.Errorf("store: queue check %s: %w", taskID, err)
	}
	return nil
}

// DropQueueCheck stops checking a task for its job: it is no longer
// pending, or its job cannot be queued at all.
func (s *Tasks) DropQueueCheck(ctx context.Context, accountID, taskID string) error {
	if err := s.db.rdb.ZRem(ctx, checksKey(accountID), taskID).Err(); err != nil {
		return fmt.Errorf("store: queue check %s: %w", taskID, err)
	}
	return nil
}

// Overdue is an unfinished task past its deadline.
type Overdue struct{ AccountID, TaskID string }

// Overdue lists up to limit tasks, across all accounts, still pending or
// processing past the time they were to stop counting as in flight (their
// deadline plus a margin): tasks whose worker died on the last attempt, or
// whose job expired in the queue.
func (s *Tasks) Overdue(ctx context.Context, limit int64) ([]Overdue, error) {
	ids, due, err := s.db.dueByAccount(ctx, inflightKey, "("+strconv.FormatInt(s.db.now().UnixMilli(), 10), limit)
	if err != nil {
		return nil, fmt.Errorf("store: overdue: %w", err)
	}
	var out []Overdue
	for i, id := range ids {
		for _, z := range due[i] {
			t, _ := z.Member.(string)
			out = append(out, Overdue{AccountID: id, TaskID: t})
			if int64(len(out)) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

// Expire fails an overdue task with code timeout (refunding it) and takes
// it off its account's in-flight set, whatever state its record is in.
func (s *Tasks) Expire(ctx context.Context, o Overdue) (Change, error) {
	c, err := s.Fail(ctx, o.AccountID, o.TaskID, "", task.Failure{Code: string(task.Timeout), Message: "the task did not finish within its deadline"})
	if err != nil {
		return c, err
	}
	if c.Outcome != task.Applied {
		// Already final, or the record is gone: just forget it.
		if err := s.db.rdb.ZRem(ctx, inflightKey(o.AccountID), o.TaskID).Err(); err != nil {
			return c, fmt.Errorf("store: expire %s: %w", o.TaskID, err)
		}
	}
	return c, nil
}

// Inflight returns how many of an account's tasks count as in flight now.
func (s *Tasks) Inflight(ctx context.Context, accountID string) (int64, error) {
	n, err := s.db.rdb.ZCount(ctx, inflightKey(accountID), strconv.FormatInt(s.db.now().UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("store: inflight %s: %w", accountID, err)
	}
	return n, nil
}

// Running returns how many generations of an account hold a place (Place)
// now.
func (s *Tasks) Running(ctx context.Context, accountID string) (int64, error) {
	n, err := s.db.rdb.ZCount(ctx, runningKey(accountID), strconv.FormatInt(s.db.now().UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("store: running of %s: %w", accountID, err)
	}
	return n, nil
}

// dueByAccount reads, for every account, up to limit members of its sorted
// set key(account) scored at most max (a Redis score bound: "(" makes it
// exclusive), in one pipeline: what the recoveries (queue checks, overdue
// tasks, webhooks due) scan. It returns the account ids and, for each, its
// members with their scores.
func (db *DB) dueByAccount(ctx context.Context, key func(accountID string) string, max string, limit int64) ([]string, [][]redis.Z, error) {
	ids, err := db.rdb.ZRange(ctx, accountsKey(), 0, -1).Result()
	if err != nil {
		return nil, nil, err
	}
	cmds := make([]*redis.ZSliceCmd, len(ids))
	if _, err := db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.ZRangeByScoreWithScores(ctx, key(id), &redis.ZRangeBy{Min: "-inf", Max: max, Count: limit})
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	due := make([][]redis.Z, len(ids))
	for i, c := range cmds {
		due[i] = c.Val()
	}
	return ids, due, nil
}
