package scripttest

import (
	"slices"
	"testing"
)

func TestTableElems(t *testing.T) {
	for src, want := range map[string][]string{
		"}":                                     nil,
		"OK}":                                   {"OK"},
		"OK, 0, '', v[2]}\nreturn":              {"OK", "0", "''", "v[2]"},
		"A, f(x, y), {1, 2}, 'a,b}', 'it\\'s'}": {"A", "f(x, y)", "{1, 2}", "'a,b}'", "'it\\'s'"},
	} {
		if got, ok := tableElems(src); !ok || !slices.Equal(got, want) {
			t.Errorf("tableElems(%q) = %q, %v; want %q", src, got, ok, want)
		}
	}
	if _, ok := tableElems("OK, 0"); ok {
		t.Error("a table without its end read whole")
	}
}
