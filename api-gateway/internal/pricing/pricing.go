// Package pricing is the price table: what a task costs, in integer credits,
// by model tier and image size.
package pricing

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/easelhq/easel/pkg/catalog"
)

// Default is the price table when EASEL_PRICES is unset.
const Default = "standard=4,pro:1K=18,pro:2K=18,pro:4K=24"

// Table maps a tier and size to a price.
type Table struct {
	prices map[string]int64 // "standard:1K", "pro:2K", ...
}

func entry(t catalog.Tier, size string) string { return string(t) + ":" + size }

// Parse reads a table: comma-separated "tier=price" (the standard tier, which
// has one size) or "tier:size=price". Every tier and size must be priced.
func Parse(s string) (*Table, error) {
	t := &Table{prices: map[string]int64{}}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		price, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if !ok || err != nil || price < 0 || price > 1_000_000 {
			return nil, fmt.Errorf("price %q: want tier=credits or tier:size=credits, credits 0 to 1000000", item)
		}
		tier, size, hasSize := strings.Cut(strings.TrimSpace(name), ":")
		if !hasSize {
			size = catalog.Size1K
		}
		if catalog.Tier(tier) != catalog.Standard && catalog.Tier(tier) != catalog.Pro {
			return nil, fmt.Errorf("price %q: unknown tier %q (standard or pro)", item, tier)
		}
		if !catalog.ValidImageSize(size) || (catalog.Tier(tier) == catalog.Standard && size != catalog.Size1K) {
			return nil, fmt.Errorf("price %q: tier %s has no size %q", item, tier, size)
		}
		k := entry(catalog.Tier(tier), size)
		if _, dup := t.prices[k]; dup {
			return nil, fmt.Errorf("price of %s given twice", k)
		}
		t.prices[k] = price
	}
	var missing []string
	for _, k := range []string{entry(catalog.Standard, catalog.Size1K), entry(catalog.Pro, catalog.Size1K), entry(catalog.Pro, catalog.Size2K), entry(catalog.Pro, catalog.Size4K)} {
		if _, ok := t.prices[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("prices missing for %s", strings.Join(missing, ", "))
	}
	return t, nil
}

// Price returns the price of a task on a tier at a size ("" means 1K).
func (t *Table) Price(tier catalog.Tier, size string) int64 {
	if size == "" {
		size = catalog.Size1K
	}
	return t.prices[entry(tier, size)]
}

// String renders the table in Parse's format.
func (t *Table) String() string {
	keys := make([]string, 0, len(t.prices))
	for k := range t.prices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatInt(t.prices[k], 10)
	}
	return strings.Join(parts, ",")
}
