package auth

import (
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

// take takes a try, or says how long until there is one.
func (b *bucket) take(now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / b.perSec * float64(time.Second)), false
}

// give gives a try back.
func (b *bucket) give(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	b.tokens = min(b.burst, b.tokens+1)
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

// An Attempt is the tries one credential check took; Good gives them back.
type Attempt struct {
	taken []*bucket
	now   func() time.Time
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

// Try takes a try from each of addr's budgets, before its credential is
// checked. If one is spent it takes none, and says how long until it has a
// try again.
func (g *Guard) Try(addr string) (Attempt, time.Duration, bool) {
	if g == nil {
		return Attempt{}, 0, true
	}
	now := g.now()
	bs := g.limiters(addr)
	a := Attempt{taken: make([]*bucket, 0, len(bs)), now: g.now}
	for _, b := range bs {
		if wait, ok := b.take(now); !ok {
			for _, t := range a.taken {
				t.give(now)
			}
			return Attempt{}, max(wait, time.Millisecond), false
		}
		a.taken = append(a.taken, b)
	}
	return a, 0, true
}
