package pricing

import (
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/catalog"
)

func TestDefault(t *testing.T) {
	tbl, err := Parse(Default)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tier catalog.Tier
		size string
		want int64
	}{{catalog.Standard, "", 4}, {catalog.Standard, "1K", 4}, {catalog.Pro, "1K", 18}, {catalog.Pro, "2K", 18}, {catalog.Pro, "4K", 24}} {
		if got := tbl.Price(c.tier, c.size); got != c.want {
			t.Errorf("%s %s = %d; want %d", c.tier, c.size, got, c.want)
		}
	}
	again, err := Parse(tbl.String())
	if err != nil || again.String() != tbl.String() {
		t.Errorf("String does not round-trip: %q %v", tbl.String(), err)
	}
}

func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"standard=4,pro:1K=18,pro:2K=18":                     "missing for pro:4K",
		"standard=4,pro:1K=18,pro:2K=18,pro:4K=x":            "want tier=credits",
		"standard=-1,pro:1K=18,pro:2K=18,pro:4K=24":          "credits 0 to",
		"turbo=4,standard=4,pro:1K=18,pro:2K=18,pro:4K=24":   "unknown tier",
		"standard:2K=4,pro:1K=18,pro:2K=18,pro:4K=24":        "has no size",
		"standard=4,standard=5,pro:1K=18,pro:2K=18,pro:4K=2": "given twice",
		"": "missing",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want %q", in, err, want)
		}
	}
	if tbl, err := Parse(" standard = 1 , pro=2, pro:2K=3, pro:4K=0 "); err != nil || tbl.Price(catalog.Pro, "4K") != 0 || tbl.Price(catalog.Pro, "1K") != 2 {
		t.Errorf("spaces and free tier: %v", err)
	}
}
