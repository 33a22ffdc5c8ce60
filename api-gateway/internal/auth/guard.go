package auth

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// Guard limits, per client address and in this gateway's memory, the
// requests whose credential fails authentication: past the limit a client is
// refused before any Redis call, until it has earned another try. Guessing
// keys, or hammering with a revoked one, then costs Redis nothing. Requests
// that authenticate are never counted.
type Guard struct {
	perSecond rate.Limit
	burst     int
	mu        sync.Mutex
	clients   *lru.Cache[string, *rate.Limiter]
	now       func() time.Time
}

// NewGuard allows each client address perSecond failures a second, in
// bursts of burst. A perSecond of 0 turns the guard off (nil).
func NewGuard(perSecond float64, burst int) *Guard {
	if perSecond <= 0 {
		return nil
	}
	clients, _ := lru.New[string, *rate.Limiter](100_000)
	return &Guard{perSecond: rate.Limit(perSecond), burst: max(burst, 1), clients: clients, now: time.Now}
}

func (g *Guard) limiter(addr string) *rate.Limiter {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.clients.Get(addr)
	if !ok {
		l = rate.NewLimiter(g.perSecond, g.burst)
		g.clients.Add(addr, l)
	}
	return l
}

// Blocked reports whether addr has used up its failures, and how long until
// it may try again.
func (g *Guard) Blocked(addr string) (time.Duration, bool) {
	if g == nil {
		return 0, false
	}
	tokens := g.limiter(addr).TokensAt(g.now())
	if tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - tokens) / float64(g.perSecond) * float64(time.Second)), true
}

// Failed records a failed authentication from addr.
func (g *Guard) Failed(addr string) {
	if g == nil {
		return
	}
	g.limiter(addr).AllowN(g.now(), 1)
}
