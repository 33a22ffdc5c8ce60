package store

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TaskEvent names a task whose status or progress changed.
type TaskEvent struct{ AccountID, TaskID string }

// Watch subscribes to EventsChannel and calls fn with each task that
// changed, until ctx ends. It holds one connection whatever the number of
// watchers (callers fan out). Changes published while the subscription was
// down (Redis restarted, a failover) are not replayed: resync is called each
// time the subscription is made, at first and after every reconnection, so
// the caller can read again what it was waiting on.
func (s *Tasks) Watch(ctx context.Context, fn func(TaskEvent), resync func()) error {
	ps := s.db.rdb.Subscribe(ctx, EventsChannel)
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(4096))
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			switch v := m.(type) {
			case *redis.Subscription:
				if v.Kind == "subscribe" {
					resync()
				}
			case *redis.Message:
				if ev, ok := parseTaskKey(v.Payload); ok {
					fn(ev)
				}
			}
		}
	}
}

// parseTaskKey reads a task key (taskKey) back into its account and task.
func parseTaskKey(k string) (TaskEvent, bool) {
	rest, ok := strings.CutPrefix(k, prefix+"{s")
	if !ok {
		return TaskEvent{}, false
	}
	_, rest, ok = strings.Cut(rest, "}:a:")
	if !ok {
		return TaskEvent{}, false
	}
	acct, id, ok := strings.Cut(rest, ":t:")
	if !ok || acct == "" || id == "" || taskKey(acct, id) != k {
		return TaskEvent{}, false
	}
	return TaskEvent{AccountID: acct, TaskID: id}, true
}
