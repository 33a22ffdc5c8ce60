// Package scripttest checks the Go ↔ Lua contract of a package's scripts
// (package luascript), without Redis: each package's tests call Check on
// its library, so a change on one side that the other does not follow
// fails there.
package scripttest

import (
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/luascript"
)

// Names are what a package's scripts may name in quotes.
type Names struct {
	// Allowed are the quoted strings a script may hold (the hash fields
	// and values Go declares, tokens, patterns), each with what it is.
	Allowed map[string]string
	// Commands are the Redis commands the scripts may call.
	Commands []string
}

// Check checks every script of l: every file is loaded as a script, the
// codes each returns are the codes Go declares for it, no reply is longer
// than its Go struct, and every quoted name is one of names.
func Check(t *testing.T, l *luascript.Library, names Names) {
	t.Helper()
	t.Run("every file is a script", func(t *testing.T) { everyFileLoaded(t, l) })
	libConsts := Consts(t, l.LibText())
	for _, s := range l.Scripts() {
		t.Run(s.Name, func(t *testing.T) {
			checkCodes(t, s, libConsts)
			checkReplies(t, s)
			checkNames(t, s.File(), s.Body, names)
			checkLibPart(t, s, l.LibText())
		})
	}
	if l.Lib != "" {
		t.Run(l.Lib, func(t *testing.T) { checkNames(t, l.Lib, l.LibText(), names) })
	}
}

func everyFileLoaded(t *testing.T, l *luascript.Library) {
	entries, err := fs.ReadDir(l.FS, l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, s := range l.Scripts() {
		loaded = append(loaded, s.File())
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lua") && e.Name() != l.Lib && !slices.Contains(loaded, e.Name()) {
			t.Errorf("%s: %s is loaded by no luascript.Load", l.Pkg, e.Name())
		}
	}
}

var (
	luaConstLine = regexp.MustCompile(`(?m)^local ([A-Z_]+(?:, [A-Z_]+)*) = (-?\d+(?:, -?\d+)*)$`)
	luaReturn    = regexp.MustCompile(`(?:return|local reply =) \{?\s*([A-Z_]+|-?\d+)`)
	luaTable     = regexp.MustCompile(`(?:return|local reply =) \{`)
	luaQuoted    = regexp.MustCompile(`'((?:[^'\\]|\\.)*)'`)
	luaCall      = regexp.MustCompile(`redis\.call\('([A-Z]+)'`)
	luaTopLocal  = regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*)`)
	luaName      = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// checkLibPart checks that the text a script runs (the part of the
// library it is given, then its body) defines every name of the library
// it uses: a name of the library used and left out would be a nil global
// in Redis, found only when that line runs.
func checkLibPart(t *testing.T, s *luascript.Script, lib string) {
	if lib == "" {
		return
	}
	defined := func(src string) map[string]bool {
		out := map[string]bool{}
		for _, m := range luaTopLocal.FindAllStringSubmatch(StripComments(src), -1) {
			for _, n := range strings.Split(m[1], ", ") {
				out[n] = true
			}
		}
		return out
	}
	inLib, inSource := defined(lib), defined(s.Source())
	code := luaQuoted.ReplaceAllString(StripComments(s.Source()), "''")
	for _, n := range luaName.FindAllString(code, -1) {
		if inLib[n] && !inSource[n] {
			t.Errorf("%s uses %s of the library, which it is not given", s.File(), n)
			inSource[n] = true // once
		}
	}
}

// Consts are the code constants a Lua text binds: NAME = value.
func Consts(t *testing.T, src string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range luaConstLine.FindAllStringSubmatch(src, -1) {
		names, values := strings.Split(m[1], ", "), strings.Split(m[2], ", ")
		if len(names) != len(values) {
			t.Fatalf("lua: %q binds %d names to %d values", m[0], len(names), len(values))
		}
		for i, n := range names {
			v, _ := strconv.ParseInt(values[i], 10, 64)
			out[n] = v
		}
	}
	return out
}

// checkCodes: every reply starts with a named code the script binds and
// Go declares with the same value, and every code Go declares is
// returned.
func checkCodes(t *testing.T, s *luascript.Script, libConsts map[string]int64) {
	consts := Consts(t, s.Body)
	for n, v := range libConsts {
		if _, own := consts[n]; !own {
			consts[n] = v
		}
	}
	returned := map[string]bool{}
	for _, m := range luaReturn.FindAllStringSubmatch(StripComments(s.Body), -1) {
		name := m[1]
		if _, err := strconv.Atoi(name); err == nil {
			t.Errorf("returns the bare number %s: name it (local NAME = %s) and declare it in Go", name, name)
			continue
		}
		returned[name] = true
		v, bound := consts[name]
		switch goV, declared := s.Codes[name]; {
		case !bound:
			t.Errorf("returns %s, which it never binds", name)
		case !declared:
			t.Errorf("returns %s (%d), which Go does not declare for it", name, v)
		case goV != v:
			t.Errorf("returns %s = %d, which Go declares as %d", name, v, goV)
		}
	}
	for name := range s.Codes {
		if !returned[name] {
			t.Errorf("Go declares %s, which the script never returns", name)
		}
	}
}

var (
	luaNumber = regexp.MustCompile(`^-?\d+$`)
	luaString = regexp.MustCompile(`^'.*'$`)
)

// checkReplies: no table a script returns (or starts its reply with) has
// more elements than its reply struct has fields, nor a literal where the
// struct reads another kind (a string where it reads an integer, a number
// where it reads a string).
func checkReplies(t *testing.T, s *luascript.Script) {
	code := StripComments(s.Body)
	for _, loc := range luaTable.FindAllStringIndex(code, -1) {
		line := strings.Count(code[:loc[0]], "\n") + 1
		elems, ok := tableElems(code[loc[1]:])
		if !ok {
			t.Errorf("line %d: a table without its end", line)
			continue
		}
		if s.ReplyFields >= 0 && len(elems) > s.ReplyFields {
			t.Errorf("line %d returns %d elements; Go's %s reads %d", line, len(elems), s.ReplyType, s.ReplyFields)
		}
		for i, e := range elems {
			if i >= len(s.ReplyKinds) {
				break
			}
			switch kind := s.ReplyKinds[i]; {
			case luaString.MatchString(e) && kind != "string":
				t.Errorf("line %d: element %d is %s; Go's %s reads it as %s", line, i+1, e, s.ReplyType, kind)
			case luaNumber.MatchString(e) && kind == "string":
				t.Errorf("line %d: element %d is %s; Go's %s reads it as string", line, i+1, e, s.ReplyType)
			}
		}
	}
}

// tableElems are the elements of the Lua table whose text follows its
// opening brace, as written: split at the commas outside brackets and
// strings.
func tableElems(src string) ([]string, bool) {
	var out []string
	depth, start := 0, 0
	add := func(end int) {
		if e := strings.TrimSpace(src[start:end]); e != "" {
			out = append(out, e)
		}
	}
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '\'':
			for i++; i < len(src) && src[i] != '\''; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case '(', '{', '[':
			depth++
		case ')', ']':
			depth--
		case '}':
			if depth == 0 {
				add(i)
				return out, true
			}
			depth--
		case ',':
			if depth == 0 {
				add(i)
				start = i + 1
			}
		}
	}
	return nil, false
}

func checkNames(t *testing.T, file, src string, names Names) {
	code := StripComments(src)
	if strings.Contains(code, `"`) {
		t.Errorf("%s: quote strings with ' only", file)
	}
	commands := map[string]bool{}
	for _, m := range luaCall.FindAllStringSubmatch(code, -1) {
		commands[m[1]] = true
		if !slices.Contains(names.Commands, m[1]) {
			t.Errorf("%s calls %s: add it to the package's commands if it is meant", file, m[1])
		}
	}
	for _, m := range luaQuoted.FindAllStringSubmatch(code, -1) {
		if _, ok := names.Allowed[m[1]]; !ok && !commands[m[1]] {
			t.Errorf("%s names %q, which Go declares as no field or value", file, m[1])
		}
	}
}

// StripComments is Lua text without its comments.
func StripComments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
