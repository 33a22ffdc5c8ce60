// Package watch lets requests wait for changes of a task without polling:
// one subscription to the store's task events per gateway process (Run),
// fanned out to any number of waiters (Watch).
package watch

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/store"
)

// Events is the store's stream of task changes.
type Events interface {
	Watch(ctx context.Context, fn func(store.TaskEvent), resync func()) error
}

// Hub fans task events out to waiters.
type Hub struct {
	mu      sync.Mutex
	waiters map[store.TaskEvent]map[*Waiter]struct{}
	closed  bool
	// subscribed is closed once the first subscription is made.
	subscribed chan struct{}
	once       sync.Once
}

// Waiter is one request waiting on one task. C receives a value when the
// task may have changed (read it again to know), or when the hub closes
// (Closed then reports true).
type Waiter struct {
	C   chan struct{}
	hub *Hub
	key store.TaskEvent
}

// New returns a hub; Run feeds it.
func New() *Hub {
	return &Hub{waiters: map[store.TaskEvent]map[*Waiter]struct{}{}, subscribed: make(chan struct{})}
}

// Subscribed is closed once Run has subscribed: events from then on reach
// the waiters.
func (h *Hub) Subscribed() <-chan struct{} { return h.subscribed }

// Run subscribes to the store's events and delivers them until ctx ends,
// subscribing again after a failure.
func (h *Hub) Run(ctx context.Context, ev Events, log *zap.Logger) {
	for ctx.Err() == nil {
		err := ev.Watch(ctx, h.publish, func() {
			h.once.Do(func() { close(h.subscribed) })
			h.wakeAll()
		})
		if ctx.Err() != nil {
			return
		}
		log.Warn("task events: subscription ended; subscribing again", zap.Error(err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Watch registers a waiter for a task. Call Stop when done.
func (h *Hub) Watch(accountID, taskID string) *Waiter {
	w := &Waiter{C: make(chan struct{}, 1), hub: h, key: store.TaskEvent{AccountID: accountID, TaskID: taskID}}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		w.C <- struct{}{}
		return w
	}
	set := h.waiters[w.key]
	if set == nil {
		set = map[*Waiter]struct{}{}
		h.waiters[w.key] = set
	}
	set[w] = struct{}{}
	return w
}

// Stop unregisters the waiter.
func (w *Waiter) Stop() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.waiters[w.key]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(h.waiters, w.key)
		}
	}
}

// Closed reports whether the hub is closing: waiters answer now.
func (w *Waiter) Closed() bool {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.hub.closed
}

// Waiting returns how many waiters there are.
func (h *Hub) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.waiters {
		n += len(set)
	}
	return n
}

// Close wakes every waiter, now and from now on: the gateway is shutting
// down, and waiting requests answer with what they have.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.wakeAll()
}

func (h *Hub) publish(e store.TaskEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[e] {
		wake(w)
	}
}

// wakeAll wakes every waiter: events may have been missed (the
// subscription was down), so each reads its task again.
func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.waiters {
		for w := range set {
			wake(w)
		}
	}
}

func wake(w *Waiter) {
	select {
	case w.C <- struct{}{}:
	default: // already woken, not yet read
	}
}
