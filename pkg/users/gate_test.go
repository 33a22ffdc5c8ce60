package users

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lineLen is how many wait in g's line.
func (g *gate) lineLen() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.line)
}

// waitLine waits until n wait in g's line.
func waitLine(t *testing.T, g *gate, n int) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for g.lineLen() != n {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the line holds %d; want %d", g.lineLen(), n)
		}
	}
}

// entered is one enter's outcome, with who asked.
type entered struct {
	who     string
	release func()
	err     error
}

func enterAsync(g *gate, who, net string, wait time.Duration, out chan<- entered) {
	go func() {
		r, err := g.enter(context.Background(), net, wait)
		out <- entered{who, r, err}
	}()
}

// A flooding network holds one place in the line: its next sign-in joins
// behind everyone waiting, so the others are served in turn with it.
func TestGateServesNetworksInTurn(t *testing.T) {
	t.Parallel()
	g := newGate(1, 10)
	hold, err := g.enter(context.Background(), "flood", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan entered, 10)
	enterAsync(g, "flood 1", "flood", 0, out)
	waitLine(t, g, 1)
	// The flood's second waiter is refused at once: its place is taken.
	if _, err := g.enter(context.Background(), "flood", 0); !errors.Is(err, errBusy) {
		t.Fatalf("a second waiter of one network: %v; want busy", err)
	}
	enterAsync(g, "owner", "owner", 0, out)
	waitLine(t, g, 2)
	hold()
	first := <-out
	if first.who != "flood 1" || first.err != nil {
		t.Fatalf("first served %+v; want the flood's waiter (first come)", first)
	}
	// Its network may line up again now, behind the owner.
	enterAsync(g, "flood 2", "flood", 0, out)
	waitLine(t, g, 2)
	first.release()
	second := <-out
	if second.who != "owner" || second.err != nil {
		t.Fatalf("second served %+v; want the owner, ahead of the flood's next", second)
	}
	second.release()
	third := <-out
	if third.who != "flood 2" || third.err != nil {
		t.Fatalf("third served %+v", third)
	}
	third.release()
	if r, err := g.enter(context.Background(), "x", 0); err != nil {
		t.Fatalf("a free gate: %v", err)
	} else {
		r()
	}
}

// The line is bounded, and so is each wait; a waiter that gives up takes
// no slot with it.
func TestGateBounded(t *testing.T) {
	t.Parallel()
	g := newGate(1, 2)
	hold, err := g.enter(context.Background(), "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan entered, 10)
	enterAsync(g, "b", "b", 0, out)
	enterAsync(g, "c", "c", 0, out)
	waitLine(t, g, 2)
	if _, err := g.enter(context.Background(), "d", 0); !errors.Is(err, errBusy) {
		t.Fatalf("a full line: %v; want busy", err)
	}
	// A wait that ends leaves the line.
	ctx, cancel := context.WithCancel(context.Background())
	g2 := newGate(1, 5)
	hold2, _ := g2.enter(context.Background(), "a", 0)
	done := make(chan error, 1)
	go func() { _, err := g2.enter(ctx, "b", 0); done <- err }()
	waitLine(t, g2, 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait got a slot")
	}
	if _, err := g2.enter(context.Background(), "c", time.Millisecond); !errors.Is(err, errBusy) {
		t.Fatalf("a wait past its bound: %v; want busy", err)
	}
	waitLine(t, g2, 0)
	hold2()
	if r, err := g2.enter(context.Background(), "d", 0); err != nil {
		t.Fatalf("the slot after the waiters gave up: %v", err)
	} else {
		r()
	}
	hold()
	for range 2 {
		e := <-out
		if e.err != nil {
			t.Fatalf("%s: %v", e.who, e.err)
		}
		e.release()
	}
}
