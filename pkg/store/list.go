package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// listScanMax bounds the index entries one listing reads: a filter that
// matches few tasks returns a short page with a cursor instead of reading
// the whole index.
const listScanMax = 1000

// List returns an account's tasks, newest first, from its index (the
// tasks created in the last 24 hours plus their deadline), and the cursor of
// the next page ("" after the last). A page may hold fewer than Limit tasks
// and still have a next cursor: the filter read listScanMax entries without
// filling it. A cursor that is not one of ours is apperr.Invalid.
func (s *Tasks) List(ctx context.Context, accountID string, f task.Filter) ([]*task.Task, string, error) {
	max := "+inf"
	var afterID string
	var afterScore int64
	if f.Cursor != "" {
		sc, id, ok := decodeCursor(f.Cursor)
		if !ok {
			return nil, "", apperr.New(apperr.Invalid, "cursor is not one this API gave out; start again without it")
		}
		afterScore, afterID = sc, id
		max = strconv.FormatInt(sc, 10)
	}
	limit := max1(f.Limit)
	var out []*task.Task
	var last redis.Z
	scanned := 0
	more := true // the index may hold entries past last
	var stale []any
	for scanned < listScanMax && len(out) < limit {
		// Entries at the cursor's own time that come before it (in this
		// order: ids descending) are skipped; a page asks for a margin.
		batch := min(listScanMax-scanned, limit-len(out)+16)
		zs, err := s.db.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: tasksIndexKey(accountID), Start: max, Stop: "-inf", ByScore: true, Rev: true, Count: int64(batch),
			Offset: int64(scanned),
		}).Result()
		if err != nil {
			return nil, "", fmt.Errorf("store: list: %w", err)
		}
		if len(zs) == 0 {
			more = false
			break
		}
		scanned += len(zs)
		cmds := make([]*redis.MapStringStringCmd, len(zs))
		if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, z := range zs {
				cmds[i] = p.HGetAll(ctx, taskKey(accountID, z.Member.(string)))
			}
			return nil
		}); err != nil {
			return nil, "", fmt.Errorf("store: list: %w", err)
		}
		for i, z := range zs {
			id := z.Member.(string)
			if f.Cursor != "" && int64(z.Score) == afterScore && id >= afterID {
				continue
			}
			last = z
			m := cmds[i].Val()
			if len(m) == 0 {
				stale = append(stale, id) // expired: drop it from the index
				continue
			}
			t, err := decodeTask(accountID, id, m)
			if err != nil {
				return nil, "", err
			}
			if (f.Status != "" && t.Status != f.Status) || (f.Model != "" && t.Model != f.Model) {
				continue
			}
			out = append(out, t)
			if len(out) == limit {
				break
			}
		}
		if len(out) < limit && len(zs) < batch {
			more = false // read to the end of the index
			break
		}
	}
	if len(stale) > 0 {
		// Best effort: the next listing skips them again if this fails.
		_ = s.db.rdb.ZRem(ctx, tasksIndexKey(accountID), stale...).Err()
	}
	next := ""
	if id, ok := last.Member.(string); ok && more {
		next = encodeCursor(int64(last.Score), id)
	}
	return out, next, nil
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// A cursor is the creation time (Unix ms) and id of the last task a page
// read: the next page starts after it.
func encodeCursor(score int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(score, 10) + ":" + id))
}

func decodeCursor(c string) (int64, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", false
	}
	sc, id, ok := strings.Cut(string(b), ":")
	if !ok || id == "" {
		return 0, "", false
	}
	n, err := strconv.ParseInt(sc, 10, 64)
	if err != nil || n < 0 {
		return 0, "", false
	}
	return n, id, true
}
