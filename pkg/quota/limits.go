package quota

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The configuration variables ParseLimits reads, named in its errors.
const (
	EnvRPM         = "EASEL_UPSTREAM_RPM"
	EnvConcurrency = "EASEL_UPSTREAM_CONCURRENCY"
)

// AnyModel is the name of the limits of every model not named.
const AnyModel = "*"

// Bounds of a configured limit.
const (
	MaxPerMinute  = 1_000_000
	MaxConcurrent = 100_000
)

// Limit is an upstream model's quota, shared by every worker. A zero field
// is no limit of that kind.
type Limit struct {
	// PerMinute is the number of calls that may start per minute.
	PerMinute int
	// Burst is the number of calls that may start at once after a quiet
	// spell (0 is 1): calls are spaced 60/PerMinute s apart, and a window
	// of 60 s holds at most PerMinute + Burst - 1 of them.
	Burst int
	// Concurrent is the number of calls that may run at once.
	Concurrent int
}

func (l Limit) unlimited() bool { return l.PerMinute <= 0 && l.Concurrent <= 0 }

// String: "60/min, 8 at once", "no limit".
func (l Limit) String() string {
	var parts []string
	if l.PerMinute > 0 {
		p := strconv.Itoa(l.PerMinute) + "/min"
		if l.Burst > 1 {
			p += " (burst " + strconv.Itoa(l.Burst) + ")"
		}
		parts = append(parts, p)
	}
	if l.Concurrent > 0 {
		parts = append(parts, strconv.Itoa(l.Concurrent)+" at once")
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

// Limits are the limits of each upstream model, by model id; AnyModel's
// apply to every model not named. Each model has its own: "*" with 60 a
// minute lets each model start 60 calls a minute.
type Limits map[string]Limit

// For returns model's limits: its own, else AnyModel's.
func (ls Limits) For(model string) Limit {
	if l, ok := ls[model]; ok {
		return l
	}
	return ls[AnyModel]
}

// String lists the limits by model, AnyModel last: "a: 60/min; *: 8 at once".
func (ls Limits) String() string {
	if len(ls) == 0 {
		return "none"
	}
	names := make([]string, 0, len(ls))
	for m := range ls {
		if m != AnyModel {
			names = append(names, m)
		}
	}
	slices.Sort(names)
	if _, ok := ls[AnyModel]; ok {
		names = append(names, AnyModel)
	}
	parts := make([]string, len(names))
	for i, m := range names {
		parts[i] = m + ": " + ls[m].String()
	}
	return strings.Join(parts, "; ")
}

// ParseLimits reads the two configuration strings: rpm, calls started per
// minute (EASEL_UPSTREAM_RPM), and concurrency, calls running at once
// (EASEL_UPSTREAM_CONCURRENCY). Each is a comma-separated list of
// model=number, where the model "*" stands for every model not named
// ("lumen-3-pro-image-preview=20,*=60"); 0 is no limit (a model named with
// 0 is exempt from "*"); empty is no limit at all. The two are merged per
// model: a model named in only one takes the other's "*", if any. The error
// names the variable and the entry at fault.
func ParseLimits(rpm, concurrency string) (Limits, error) {
	perMinute, err1 := parseList(EnvRPM, rpm, MaxPerMinute)
	concurrent, err2 := parseList(EnvConcurrency, concurrency, MaxConcurrent)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	ls := Limits{}
	for _, m := range [2]map[string]int{perMinute, concurrent} {
		for name := range m {
			if _, done := ls[name]; done {
				continue
			}
			l := Limit{PerMinute: perMinute[AnyModel], Concurrent: concurrent[AnyModel]}
			if n, ok := perMinute[name]; ok {
				l.PerMinute = n
			}
			if n, ok := concurrent[name]; ok {
				l.Concurrent = n
			}
			ls[name] = l
		}
	}
	return ls, nil
}

// parseList reads "model=n,model=n" for variable env.
func parseList(env, s string, maxN int) (map[string]int, error) {
	out := map[string]int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	var errs []error
	for entry := range strings.SplitSeq(s, ",") {
		name, num, ok := strings.Cut(entry, "=")
		name, num = strings.TrimSpace(name), strings.TrimSpace(num)
		switch {
		case strings.TrimSpace(entry) == "":
			errs = append(errs, fmt.Errorf("%s %q: an empty entry; want model=number, separated by commas", env, s))
			continue
		case !ok:
			errs = append(errs, fmt.Errorf("%s: entry %q: want model=number (\"*\" for every other model)", env, strings.TrimSpace(entry)))
			continue
		case name == "":
			errs = append(errs, fmt.Errorf("%s: entry %q: no model before \"=\"", env, strings.TrimSpace(entry)))
			continue
		case strings.ContainsAny(name, "{} \t"):
			errs = append(errs, fmt.Errorf("%s: model %q: a model id has no braces or spaces", env, name))
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || n > maxN {
			errs = append(errs, fmt.Errorf("%s: %s=%q: want a whole number from 0 (no limit) to %d", env, name, num, maxN))
			continue
		}
		if _, dup := out[name]; dup {
			errs = append(errs, fmt.Errorf("%s: model %q is listed twice", env, name))
			continue
		}
		out[name] = n
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
