package api_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/auth"
	"github.com/easelhq/easel/pkg/account"
)

// countingAuth counts the lookups that reach the store.
type countingAuth struct {
	next  auth.Authenticator
	calls atomic.Int64
}

func (c *countingAuth) Authenticate(ctx context.Context, key string) (*account.Account, error) {
	c.calls.Add(1)
	return c.next.Authenticate(ctx, key)
}

// Requests with keys that fail authentication are limited per client
// address before any Redis lookup: 1,000 random keys once cost 1,000 HMGETs.
// Another client, and valid keys, are not held back.
func TestFailedAuthenticationsLimitedPerAddress(t *testing.T) {
	t.Parallel()
	var lookups *countingAuth
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) {
		lookups = &countingAuth{next: d.Auth}
		d.Auth = lookups
		d.AuthGuard = auth.NewGuard(auth.GuardLimits{PerAddress: 5})
		// The test's requests come through a "proxy" on loopback.
		d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	from := func(addr, key string) reply {
		return e.Do("GET", "/v1/task/query?task_id=task_lumen_1", map[string]string{"Authorization": "Bearer " + key, "X-Forwarded-For": addr}, "")
	}
	codes := map[int]int{}
	start := time.Now()
	for i := 0; i < 1000; i++ {
		r := from("203.0.113.7", fmt.Sprintf("esk_guess%035d", i))
		codes[r.Status]++
		if r.Status == 429 {
			if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 1 {
				t.Fatalf("429 without Retry-After: %v", r.Header)
			}
		}
	}
	// A burst (4 s of the rate), and the tries earned while the requests
	// ran: on a loaded machine the thousand take seconds.
	allowed := int64(20 + 5*time.Since(start).Seconds() + 1)
	if n := lookups.calls.Load(); n > allowed || int64(codes[401]) > allowed || int64(codes[429]) < 1000-allowed {
		t.Errorf("1,000 random keys from one address: %d lookups, statuses %v; want at most %d (a burst and the tries earned meanwhile) and the rest 429", n, codes, allowed)
	}
	// Another address still gets its answers; a valid key from the blocked
	// address too is refused only until the address earns a try back, and
	// never counts against it.
	before := lookups.calls.Load()
	if r := from("198.51.100.9", "esk_someoneelse00000000000000000000000000"); r.Status != 401 {
		t.Errorf("another address: %d; want 401", r.Status)
	}
	if lookups.calls.Load() != before+1 {
		t.Error("another address's key was not looked up")
	}
	for i := 0; i < 50; i++ {
		if r := from("198.51.100.10", e.KeyA); r.Status != 404 {
			t.Fatalf("valid key, request %d: %d; want 404 (the task does not exist)", i, r.Status)
		}
	}
	// Without a trusted proxy, X-Forwarded-For is not believed: here every
	// request is the TCP peer's.
}

// X-Forwarded-For from a peer that is not a trusted proxy does not choose
// the client's address: a blocked client cannot escape by naming another.
func TestForwardedForNeedsATrustedProxy(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, nil, zap.NewNop(), func(d *deps) { d.AuthGuard = auth.NewGuard(auth.GuardLimits{PerAddress: 1}) })
	blocked := false
	for i := 0; i < 20; i++ {
		r := e.Do("GET", "/v1/task/query?task_id=task_lumen_1", map[string]string{"Authorization": "Bearer esk_nope0000000000000000000000000000000000", "X-Forwarded-For": fmt.Sprintf("192.0.2.%d", i)}, "")
		if r.Status == 429 {
			blocked = true
		}
	}
	if !blocked {
		t.Error("changing X-Forwarded-For escaped the per-address limit without a trusted proxy")
	}
}
