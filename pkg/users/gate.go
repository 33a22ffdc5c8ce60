package users

import (
	"context"
	"sync"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
)

// gate bounds the password hashes computed at once (each takes the
// parameters' memory and a core) and lines up the rest, first come first
// served, in a line of bounded length where each client network holds at
// most one place: a network's next sign-in can join only behind everyone
// already waiting, so a flood from a few networks is served in turn with
// the others, never ahead of them. A wait is bounded; a sign-in that finds
// the line full, its network's place taken, or its wait over is refused
// at once (busy), never checked.
type gate struct {
	mu    sync.Mutex
	free  int
	line  []*waiter
	limit int // of the line's length
	// waiting: the networks holding a place in the line.
	waiting map[string]bool
}

type waiter struct {
	net string
	// turn is closed when the waiter is given a slot.
	turn chan struct{}
}

func newGate(slots, line int) *gate {
	return &gate{free: slots, limit: line, waiting: map[string]bool{}}
}

// errBusy answers a sign-in the gate refused: it was never checked.
var errBusy = apperr.New(apperr.Unavailable, "busy signing others in: try again")

// enter waits for a slot, at most wait (0: as long as ctx), for a client
// network (""; none: a new password's hash, which has no place limit). It
// returns the slot's release.
func (g *gate) enter(ctx context.Context, net string, wait time.Duration) (func(), error) {
	g.mu.Lock()
	if g.free > 0 && len(g.line) == 0 {
		g.free--
		g.mu.Unlock()
		return g.release, nil
	}
	if len(g.line) >= g.limit || (net != "" && g.waiting[net]) {
		g.mu.Unlock()
		return nil, errBusy
	}
	w := &waiter{net: net, turn: make(chan struct{})}
	g.line = append(g.line, w)
	if net != "" {
		g.waiting[net] = true
	}
	g.mu.Unlock()

	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-w.turn:
		return g.release, nil
	case <-ctx.Done():
		err = apperr.Transient(ctx.Err(), apperr.Unavailable, errBusy.Message)
	case <-timeout:
		err = errBusy
	}
	g.mu.Lock()
	if g.leaveLocked(w) {
		g.mu.Unlock()
		return nil, err
	}
	g.mu.Unlock()
	// Given its turn as it gave up: the slot goes on to the next.
	g.release()
	return nil, err
}

// leaveLocked takes w out of the line; false when it had left it already
// (given a slot).
func (g *gate) leaveLocked(w *waiter) bool {
	for i, x := range g.line {
		if x == w {
			g.line = append(g.line[:i], g.line[i+1:]...)
			delete(g.waiting, w.net)
			return true
		}
	}
	return false
}

// release gives a slot back: to the first in line, or free.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.line) == 0 {
		g.free++
		return
	}
	w := g.line[0]
	g.line[0] = nil
	g.line = g.line[1:]
	delete(g.waiting, w.net)
	close(w.turn)
}
