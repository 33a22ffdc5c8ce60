package auth

import (
	"context"
	"net/netip"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// GuardLimits are a Guard's budgets of credential checks that fail, each a
// rate a second; a zero rate turns that budget off.
type GuardLimits struct {
	// PerAddress: from one client address (bursts of four times that).
	PerAddress float64
	// PerPrefix: from one network, a /24 (IPv4) or a /64 (IPv6), the
	// addresses one client usually has (bursts of four times that).
	PerPrefix float64
	// Global: from everyone, on this gateway (bursts of twice that).
	Global float64
}

// tracked is how many addresses, and how many prefixes, a Guard remembers:
// the least recently seen are forgotten first, so memory stays bounded
// however many addresses try.
const tracked = 100_000

// Guard limits, in this gateway's memory, the credential checks that may
// fail: past a budget a client is refused before its credential is checked,
// until it has earned another try. A check takes its try from every budget
// before it runs, so any number of concurrent requests cannot overrun one;
// a credential that proves good gives its tries back. Guessing keys or
// tokens, or hammering with a revoked key, then costs Redis nothing, from
// one address, from one network, and from all of them together.
//
// A budget whose tries are all taken by checks still under way is not
// spent: a check that finds it so waits for one of them to end (at most
// MaxWait) and then takes the try a good credential gave back, or is
// refused if the others failed. So many good keys checked at once from one
// address are never refused for their number, and bad ones still get at
// most the budget checked.
type Guard struct {
	limits   GuardLimits
	global   *bucket
	mu       sync.Mutex
	addrs    *lru.Cache[string, *bucket]
	prefixes *lru.Cache[netip.Prefix, *bucket]
	now      func() time.Time
}

// bucket is a token bucket that takes a try and gives it back
// (golang.org/x/time/rate's reservations can be cancelled only before
// they act, and a check's outcome is known after).
type bucket struct {
	mu      sync.Mutex
	perSec  float64
	burst   float64
	tokens  float64
	last    time.Time
	initted bool
	// pending are the tries taken by checks under way; ended is closed
	// (and forgotten) when one of them ends.
	pending int
	ended   chan struct{}
}

func newBucket(perSecond float64, burst int) *bucket {
	return &bucket{perSec: perSecond, burst: float64(burst), tokens: float64(burst)}
}

// refillLocked brings the tokens to now.
func (b *bucket) refillLocked(now time.Time) {
	if b.initted && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.perSec)
	}
	if !b.initted || now.After(b.last) {
		b.last, b.initted = now, true
	}
}

// take takes a try, or says how long until there is one and, when
// checks under way hold tries, a channel closed when one of them ends.
func (b *bucket) take(now time.Time) (time.Duration, bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	if b.tokens >= 1 {
		b.tokens--
		b.pending++
		return 0, true, nil
	}
	wait := time.Duration((1 - b.tokens) / b.perSec * float64(time.Second))
	if b.pending == 0 {
		return wait, false, nil
	}
	if b.ended == nil {
		b.ended = make(chan struct{})
	}
	return wait, false, b.ended
}

// give gives a try back: its check proved the credential good, or was
// not run.
func (b *bucket) give(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	b.tokens = min(b.burst, b.tokens+1)
	b.endLocked()
}

// spend keeps a try: its check failed.
func (b *bucket) spend() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endLocked()
}

func (b *bucket) endLocked() {
	b.pending = max(b.pending-1, 0)
	if b.ended != nil {
		close(b.ended)
		b.ended = nil
	}
}

// NewGuard returns a Guard with the given budgets; none (every rate 0)
// returns nil, a Guard that lets everything through.
func NewGuard(l GuardLimits) *Guard {
	if l.PerAddress <= 0 && l.PerPrefix <= 0 && l.Global <= 0 {
		return nil
	}
	g := &Guard{limits: l, now: time.Now}
	g.addrs, _ = lru.New[string, *bucket](tracked)
	g.prefixes, _ = lru.New[netip.Prefix, *bucket](tracked)
	if l.Global > 0 {
		g.global = newBucket(l.Global, burst(l.Global, 2))
	}
	return g
}

func burst(perSecond float64, seconds int) int { return max(int(perSecond*float64(seconds)), 1) }

// prefixOf is the network of addr that one client usually holds whole.
func prefixOf(addr string) (netip.Prefix, bool) {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap().WithZone("")
	bits := 64
	if ip.Is4() {
		bits = 24
	}
	p, err := ip.Prefix(bits)
	return p, err == nil
}

// limiters returns the budgets a check from addr takes from.
func (g *Guard) limiters(addr string) []*bucket {
	ls := make([]*bucket, 0, 3)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limits.PerAddress > 0 {
		l, ok := g.addrs.Get(addr)
		if !ok {
			l = newBucket(g.limits.PerAddress, burst(g.limits.PerAddress, 4))
			g.addrs.Add(addr, l)
		}
		ls = append(ls, l)
	}
	if p, ok := prefixOf(addr); ok && g.limits.PerPrefix > 0 {
		l, ok := g.prefixes.Get(p)
		if !ok {
			l = newBucket(g.limits.PerPrefix, burst(g.limits.PerPrefix, 4))
			g.prefixes.Add(p, l)
		}
		ls = append(ls, l)
	}
	if g.global != nil {
		ls = append(ls, g.global)
	}
	return ls
}

// An Attempt is the tries one credential check took. Every Attempt Try
// gives ends in Good (they come back) or Failed (they are spent).
type Attempt struct {
	taken []*bucket
	now   func() time.Time
}

// Failed spends the tries of a check whose credential was refused.
func (a Attempt) Failed() {
	for _, b := range a.taken {
		b.spend()
	}
}

// Good gives back the tries of a check whose credential was good: good
// credentials never count against anyone.
func (a Attempt) Good() {
	if len(a.taken) == 0 {
		return
	}
	now := a.now()
	for _, b := range a.taken {
		b.give(now)
	}
}

// MaxWait is the longest a check waits for the checks under way that
// hold its budget's tries.
const MaxWait = 2 * time.Second

// Try takes a try from each of addr's budgets, before its credential is
// checked. If one has none left it takes none: while checks under way hold
// that budget's tries it waits for one to end (at most MaxWait, or until
// ctx ends) and tries again; else it says how long until there is a try.
func (g *Guard) Try(ctx context.Context, addr string) (Attempt, time.Duration, bool) {
	if g == nil {
		return Attempt{}, 0, true
	}
	var timeout <-chan time.Time
	for {
		now := g.now()
		bs := g.limiters(addr)
		a := Attempt{taken: make([]*bucket, 0, len(bs)), now: g.now}
		var (
			wait  time.Duration
			ended <-chan struct{}
			short bool
		)
		for _, b := range bs {
			w, ok, ch := b.take(now)
			if !ok {
				for _, t := range a.taken {
					t.give(now)
				}
				wait, ended, short = w, ch, true
				break
			}
			a.taken = append(a.taken, b)
		}
		if !short {
			return a, 0, true
		}
		wait = max(wait, time.Millisecond)
		if ended == nil {
			return Attempt{}, wait, false
		}
		if timeout == nil {
			t := time.NewTimer(MaxWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ended:
		case <-timeout:
			return Attempt{}, wait, false
		case <-ctx.Done():
			return Attempt{}, wait, false
		}
	}
}
