package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/quota"
)

// Status is what operators see of an upstream (easelctl upstream list,
// the admin API, the console's operator view).
type Status struct {
	Public
	// Breaker: closed, open or half (a probe may go, or is out).
	Breaker State `json:"breaker"`
	// OpenUntil: while open, when a probe may go.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// CoolingUntil: after a 429, no call until then.
	CoolingUntil *time.Time `json:"cooling_until,omitempty"`
	// Disabled: the provider refused its credential; it stays out until
	// the file gives it another.
	Disabled bool `json:"disabled"`
	// FailuresInARow: failed calls since the last that answered.
	FailuresInARow int64 `json:"failures_in_a_row"`
	// InFlight: its calls running now, when it has a concurrency limit
	// (the part of its quota in use; its rate is CallsLastMinute against
	// RPM).
	InFlight *int64 `json:"in_flight,omitempty"`
	// CallsLastMinute and their outcomes other than success, by class, in
	// the last whole minute.
	CallsLastMinute  int64            `json:"calls_last_minute"`
	ErrorsLastMinute map[string]int64 `json:"errors_last_minute"`
	// Recent errors, newest first (at most 20, kept a day).
	RecentErrors []ErrorRecord `json:"recent_errors"`
}

// Statuses reads every upstream's status, by name.
func Statuses(ctx context.Context, rdb redis.UniversalClient) ([]Status, error) {
	pool, err := rdb.HGetAll(ctx, poolKey).Result()
	if err != nil {
		return nil, fmt.Errorf("upstreams: %w", err)
	}
	now := time.Now()
	out := make([]Status, 0, len(pool))
	for name, raw := range pool {
		var s Status
		if err := json.Unmarshal([]byte(raw), &s.Public); err != nil {
			continue
		}
		var (
			br   *redis.MapStringStringCmd
			min  *redis.MapStringStringCmd
			errs *redis.StringSliceCmd
			dis  *redis.StringCmd
		)
		// One slot per upstream: one pipeline each.
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			br = p.HGetAll(ctx, breakerKey(name))
			min = p.HGetAll(ctx, minuteKey(name, now.Add(-time.Minute)))
			errs = p.LRange(ctx, errorsKey(name), 0, 19)
			dis = p.Get(ctx, disabledKey(name))
			return nil
		}); err != nil && err != redis.Nil {
			return nil, fmt.Errorf("upstream %s: %w", name, err)
		}
		b := br.Val()
		s.Breaker = State(b[fState])
		if s.Breaker == "" {
			s.Breaker = Closed
		}
		ms := func(f string) int64 { n, _ := strconv.ParseInt(b[f], 10, 64); return n }
		s.FailuresInARow = ms(fFails)
		if u := ms(fUntil); s.Breaker == Open && u > now.UnixMilli() {
			t := time.UnixMilli(u).UTC()
			s.OpenUntil = &t
		}
		if c := ms(fCool); c > now.UnixMilli() {
			t := time.UnixMilli(c).UTC()
			s.CoolingUntil = &t
		}
		s.Disabled = dis.Val() != "" && dis.Val() == s.Credential
		s.ErrorsLastMinute = map[string]int64{}
		for k, v := range min.Val() {
			n, _ := strconv.ParseInt(v, 10, 64)
			if k == fCalls {
				s.CallsLastMinute = n
			} else {
				s.ErrorsLastMinute[k] = n
			}
		}
		if s.Concurrency > 0 {
			if n, err := quota.InUse(ctx, rdb, QuotaKey(name)); err == nil {
				s.InFlight = &n
			}
		}
		s.RecentErrors = []ErrorRecord{}
		for _, e := range errs.Val() {
			var r ErrorRecord
			if json.Unmarshal([]byte(e), &r) == nil {
				s.RecentErrors = append(s.RecentErrors, r)
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
