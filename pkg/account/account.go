// Package account holds the account domain: an account with its credits
// and limits, its API keys and its ledger of credit movements, and the
// rules their values follow. Where they are kept is package store's
// business.
package account

import (
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// Status is an account's state.
type Status string

// Account statuses.
const (
	Active   Status = "active"
	Disabled Status = "disabled"
)

// Account is a customer account.
type Account struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	Status  Status         `json:"status"`
	Credits int64          `json:"credits"`
	Models  []catalog.Tier `json:"models,omitempty"` // empty: every model
	// Per-account limits; 0 means the deployment's default.
	RateLimit      int `json:"rate_limit,omitempty"`       // creates per second, per key
	QueryRateLimit int `json:"query_rate_limit,omitempty"` // queries per second, per key
	MaxInflight    int `json:"max_inflight,omitempty"`     // pending + processing tasks
	// Weight multiplies the account's share of the workers
	// (EASEL_ACCOUNT_MAX_RUNNING): its tasks hold at most share × weight
	// places at once, and accounts with work waiting are served in
	// proportion to their weights. 0 reads as 1.
	Weight    int       `json:"weight,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Via is the API key a request authenticated with, with its limits
	// (nil: not through a key, as in the console); never shown.
	Via *Key `json:"-"`
}

// MaxWeight bounds an account's weight.
const MaxWeight = 100

// Spec describes an account to create.
type Spec struct {
	Name           string
	Credits        int64
	Models         []catalog.Tier
	RateLimit      int
	QueryRateLimit int
	MaxInflight    int
	// Weight: 0 is the default, 1.
	Weight int
}

// MaxLimit bounds every per-account limit.
const MaxLimit = 1_000_000

// Check returns s with its name trimmed, or apperr.Invalid saying what is
// wrong with it.
func (s Spec) Check() (Spec, error) {
	s.Name = strings.TrimSpace(s.Name)
	if s.Name == "" || len(s.Name) > 200 {
		return s, invalid("account name must be 1 to 200 characters")
	}
	if s.Credits < 0 {
		return s, invalid("initial credits must not be negative")
	}
	for _, l := range []struct {
		name string
		v    int
	}{{"rate limit", s.RateLimit}, {"query rate limit", s.QueryRateLimit}, {"max in-flight", s.MaxInflight}} {
		if err := CheckLimit(l.name, l.v); err != nil {
			return s, err
		}
	}
	if err := CheckWeight(s.Weight); err != nil {
		return s, err
	}
	return s, CheckModels(s.Models)
}

// LimitsUpdate changes an account's limits and models; nil fields stay as
// they are.
type LimitsUpdate struct {
	RateLimit      *int
	QueryRateLimit *int
	MaxInflight    *int
	Weight         *int
	Models         *[]catalog.Tier
}

// Check returns apperr.Invalid if a value is out of range, or if the
// update changes nothing.
func (u LimitsUpdate) Check() error {
	empty := true
	for _, l := range []struct {
		name string
		v    *int
	}{{"rate limit", u.RateLimit}, {"query rate limit", u.QueryRateLimit}, {"max in-flight", u.MaxInflight}} {
		if l.v == nil {
			continue
		}
		empty = false
		if err := CheckLimit(l.name, *l.v); err != nil {
			return err
		}
	}
	if u.Weight != nil {
		empty = false
		if err := CheckWeight(*u.Weight); err != nil {
			return err
		}
	}
	if u.Models != nil {
		empty = false
		if err := CheckModels(*u.Models); err != nil {
			return err
		}
	}
	if empty {
		return invalid("nothing to change: give a rate limit, a query rate limit, a max in-flight, a weight or models")
	}
	return nil
}

// CheckLimit checks a per-account limit: 0 (the deployment's default) to
// MaxLimit.
func CheckLimit(name string, v int) error {
	if v < 0 || v > MaxLimit {
		return invalid("%s must be 0 (the default) to %d", name, MaxLimit)
	}
	return nil
}

// CheckWeight checks an account's weight: 0 (the default, 1) to MaxWeight.
func CheckWeight(w int) error {
	if w < 0 || w > MaxWeight {
		return invalid("weight must be 1 to %d (0: the default, 1)", MaxWeight)
	}
	return nil
}

// CheckModels checks an account's model tiers.
func CheckModels(models []catalog.Tier) error {
	for _, m := range models {
		if m != catalog.Standard && m != catalog.Pro {
			return invalid("unknown model tier %q: use standard or pro", m)
		}
	}
	return nil
}

// CheckStatus checks an account status.
func CheckStatus(st Status) error {
	if st != Active && st != Disabled {
		return invalid("unknown account status %q", st)
	}
	return nil
}

// CheckCredits checks an operator's credit adjustment.
func CheckCredits(n int64) error {
	if n == 0 {
		return invalid("the amount must not be zero")
	}
	if n > 1e12 || n < -1e12 {
		return invalid("the amount is out of range")
	}
	return nil
}

func invalid(format string, args ...any) error { return apperr.Errorf(apperr.Invalid, format, args...) }

// Ledger entry kinds.
const (
	Debit  = "debit"  // a task's price, at creation
	Refund = "refund" // a failed or canceled task's price, back
	Credit = "credit" // an operator's top-up or correction
)

// LedgerEntry is one credit movement.
type LedgerEntry struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Amount  int64     `json:"amount"` // signed: debits are negative
	Balance int64     `json:"balance"`
	TaskID  string    `json:"task_id,omitempty"`
	Note    string    `json:"note,omitempty"`
}

// Usage is what an account's tasks of one model cost on one day: the
// tasks charged and their credits, refunds taken out.
type Usage struct {
	Tasks   int64 `json:"tasks"`
	Credits int64 `json:"credits"`
	// Refunds is how many of the day's tasks were refunded since (taken
	// out of Tasks), RefundedCredits their credits (out of Credits).
	Refunds         int64 `json:"refunds"`
	RefundedCredits int64 `json:"refunded_credits"`
}

// UsageDay is an account's usage on one UTC day, by model id.
type UsageDay struct {
	Date   string           `json:"date"` // YYYY-MM-DD
	Models map[string]Usage `json:"models"`
	// Keys is the usage of each API key (by its visible prefix), by model
	// id: the tasks created with the key. Tasks made without a key (the
	// console's) are in Models only.
	Keys map[string]map[string]Usage `json:"keys"`
}
