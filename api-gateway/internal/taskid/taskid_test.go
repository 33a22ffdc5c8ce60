package taskid

import (
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewShapeAndOrder(t *testing.T) {
	g := New("lumen")
	base := time.UnixMilli(1_795_000_000_000)
	var prev *big.Int
	for i := 0; i < 50; i++ {
		g.now = func() time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
		id, err := g.New()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(id, "task_lumen_") || !Valid(id) {
			t.Fatalf("id %q", id)
		}
		num, ok := new(big.Int).SetString(strings.TrimPrefix(id, "task_lumen_"), 10)
		if !ok {
			t.Fatalf("number of %q is not decimal", id)
		}
		// The top 48 bits are the millisecond timestamp.
		if ms := new(big.Int).Rsh(num, 80).Int64(); ms != base.UnixMilli()+int64(i) {
			t.Fatalf("timestamp %d; want %d", ms, base.UnixMilli()+int64(i))
		}
		if prev != nil && num.Cmp(prev) <= 0 {
			t.Fatalf("ids not increasing: %s then %s", prev, num)
		}
		prev = num
	}
}

func TestDecimalMatchesBigInt(t *testing.T) {
	cases := [][2]uint64{{0, 0}, {0, 1}, {0, 1<<64 - 1}, {1, 0}, {1<<64 - 1, 1<<64 - 1}, {0x0123456789abcdef, 0xfedcba9876543210}, {0, 10_000_000_000_000_000_000}}
	for _, c := range cases {
		want := new(big.Int).Lsh(new(big.Int).SetUint64(c[0]), 64)
		want.Add(want, new(big.Int).SetUint64(c[1]))
		if got := string(appendUint128(nil, c[0], c[1])); got != want.String() {
			t.Errorf("appendUint128(%#x, %#x) = %s; want %s", c[0], c[1], got, want)
		}
	}
}

func TestUniqueUnderConcurrency(t *testing.T) {
	// Two generators stand for two gateway replicas.
	gens := []*Generator{New("lumen"), New("lumen")}
	const perWorker = 5000
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(g *Generator) {
			defer wg.Done()
			local := make([]string, 0, perWorker)
			for i := 0; i < perWorker; i++ {
				id, err := g.New()
				if err != nil {
					t.Error(err)
					return
				}
				local = append(local, id)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if seen[id] {
					t.Errorf("duplicate id %s", id)
				}
				seen[id] = true
			}
		}(gens[w%2])
	}
	wg.Wait()
	if len(seen) != 8*perWorker {
		t.Errorf("%d ids; want %d", len(seen), 8*perWorker)
	}
}

func TestValid(t *testing.T) {
	tests := map[string]bool{
		"task_lumen_123": true,
		"task_lumen2_2170455969821192122696478843056611060": true,
		"task_lumen_":                           false,
		"task__123":                             false,
		"task_lumen_12a":                        false,
		"task_Lumen_1":                          false,
		"lumen_123":                             false,
		"task_lumen_" + strings.Repeat("1", 40): false,
		"task_lu:men_1":                         false,
		"task_lumen_1}":                         false,
		"":                                      false,
	}
	for id, want := range tests {
		if got := Valid(id); got != want {
			t.Errorf("Valid(%q) = %v; want %v", id, got, want)
		}
	}
}

func BenchmarkNew(b *testing.B) {
	g := New("lumen")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.New(); err != nil {
			b.Fatal(err)
		}
	}
}
