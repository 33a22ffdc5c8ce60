package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
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
	// BreakerText says the breaker's state in words, the same in every
	// view: "closed", "open, probe due at 15:04:05Z", "open, probe due
	// now (since 15:04:05Z): the next call probes", "half-open: a probe
	// is out".
	BreakerText string `json:"breaker_text"`
	// OpenUntil: while open, when a probe may go (in the past on an idle
	// system: the next call probes).
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
	// the last 60 s (rolling: this minute's counts and the last minute's
	// weighted by the part of it still within 60 s).
	CallsLastMinute  int64            `json:"calls_last_minute"`
	ErrorsLastMinute map[string]int64 `json:"errors_last_minute"`
	// CallsTotal and ErrorsTotal: the same since the upstream was first
	// called.
	CallsTotal  int64            `json:"calls_total"`
	ErrorsTotal map[string]int64 `json:"errors_total"`
	// Recent errors, newest first (at most 20, kept a day).
	RecentErrors []ErrorRecord `json:"recent_errors"`
}

// breakerText says a breaker's state in words, at now.
func breakerText(s Status, now time.Time) string {
	switch s.Breaker {
	case Open:
		if s.OpenUntil == nil {
			return "open, probe due now: the next call probes"
		}
		at := s.OpenUntil.UTC().Format("15:04:05Z")
		if s.OpenUntil.After(now) {
			return "open, probe due at " + at
		}
		return "open, probe due now (since " + at + "): the next call probes"
	case HalfOpen:
		return "half-open: a probe is out"
	}
	return string(s.Breaker)
}

// Statuses reads every upstream's status, by name.
func Statuses(ctx context.Context, rdb redis.UniversalClient) ([]Status, error) {
	return statuses(ctx, rdb, time.Now())
}

// statuses is Statuses at now.
func statuses(ctx context.Context, rdb redis.UniversalClient, now time.Time) ([]Status, error) {
	pool, err := rdb.HGetAll(ctx, poolKey).Result()
	if err != nil {
		return nil, fmt.Errorf("upstreams: %w", err)
	}
	out := make([]Status, 0, len(pool))
	for name, raw := range pool {
		var s Status
		if err := json.Unmarshal([]byte(raw), &s.Public); err != nil {
			continue
		}
		var (
			br   *redis.MapStringStringCmd
			min  *redis.MapStringStringCmd
			prev *redis.MapStringStringCmd
			errs *redis.StringSliceCmd
			dis  *redis.StringCmd
		)
		// One slot per upstream: one pipeline each.
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			br = p.HGetAll(ctx, breakerKey(name))
			min = p.HGetAll(ctx, minuteKey(name, now))
			prev = p.HGetAll(ctx, minuteKey(name, now.Add(-time.Minute)))
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
		if u := ms(fUntil); s.Breaker == Open && u > 0 {
			t := time.UnixMilli(u).UTC()
			s.OpenUntil = &t
		}
		s.BreakerText = breakerText(s, now)
		if c := ms(fCool); c > now.UnixMilli() {
			t := time.UnixMilli(c).UTC()
			s.CoolingUntil = &t
		}
		s.Disabled = dis.Val() != "" && dis.Val() == s.Credential
		// The last 60 s: this minute so far, and the part of the last
		// minute still within 60 s (its calls taken as evenly spread).
		s.ErrorsLastMinute = map[string]int64{}
		rest := 1 - float64(now.Unix()%60)/60
		add := func(m map[string]string, w float64) {
			for k, v := range m {
				n, _ := strconv.ParseFloat(v, 64)
				c := int64(n*w + 0.5)
				if k == fCalls {
					s.CallsLastMinute += c
				} else if c > 0 {
					s.ErrorsLastMinute[k] += c
				}
			}
		}
		add(min.Val(), 1)
		add(prev.Val(), rest)
		s.CallsTotal = ms(fTotalCalls)
		s.ErrorsTotal = map[string]int64{}
		for k := range b {
			if o, ok := strings.CutPrefix(k, fTotalPrefix); ok {
				s.ErrorsTotal[o] = ms(k)
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
