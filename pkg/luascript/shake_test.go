package luascript

import (
	"strings"
	"testing"
)

const testLib = `-- The library's header.

local OK, NO = 1, 0
local PIECE = 64

-- int writes n whole.
local function int(n) return string.format('%d', n) end

-- long uses PIECE and int.
-- (two lines of comment)
local function long(v)
  if #v > PIECE then
    return int(#v)
  end
  return 'int PIECE' -- names in strings and comments: not uses
end
local clock
local function now()
  clock = clock or redis.call('TIME')
  return clock
end
redis.setresp(3)
local function unused() return NO end`

// TestLibFor: a script is given the library's statements it names, those
// they name in turn, and the statements that define nothing, in the
// library's order, each with its comment.
func TestLibFor(t *testing.T) {
	parts := splitLib(testLib)
	for _, tc := range []struct {
		name, body string
		want       []string // statements kept, by a piece of their text
		not        []string // statements left out
	}{
		{"nothing named", "return {OK}", []string{"local OK, NO", "redis.setresp(3)"}, []string{"PIECE = 64", "function int", "function now", "function unused"}},
		{"through a function", "return {OK, long(ARGV[1])}", []string{"-- long uses PIECE and int.\n-- (two lines of comment)\nlocal function long", "-- int writes n whole.\nlocal function int", "PIECE = 64", "local OK, NO"}, []string{"function now", "function unused"}},
		{"a local with no value", "return {OK, now()[1]}", []string{"local clock", "function now"}, []string{"function int", "function unused"}},
		{"a name in a string or comment only", "-- int\nreturn {OK, 'long'}", nil, []string{"function int", "function long"}},
		{"a constant through another", "return {unused()}", []string{"local OK, NO", "function unused"}, []string{"function int"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := libFor(parts, tc.body)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q left out:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("%q kept:\n%s", n, got)
				}
			}
			// In the library's order.
			last := -1
			for _, p := range parts {
				if i := strings.Index(got, p.text); i >= 0 {
					if i < last {
						t.Errorf("%q out of order", p.text)
					}
					last = i
				}
			}
		})
	}
	// Every name used, every statement: the library whole.
	all := "return {" + strings.Join([]string{"OK", "long('x')", "now()", "unused()"}, ", ") + "}"
	if got := libFor(parts, all); got != testLib {
		t.Errorf("with every name used: %q; want the library whole", got)
	}
}
