package luascript

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

type testKeys struct {
	A string `lua:"a"`
	B string `lua:"b"`
}

type testArgs struct {
	Now   int64  `lua:"now"`
	N     int    `lua:"n"`
	On    bool   `lua:"on"`
	Name  string `lua:"name"`
	Input []byte `lua:"input"`
}

type testRow struct {
	ID       string `lua:"id"`
	Deadline int64  `lua:"deadline"`
}

type testReply struct {
	Code  int64     `lua:"code"`
	Count int64     `lua:"count"`
	Flag  bool      `lua:"flag"`
	Name  string    `lua:"name"`
	Rows  []testRow `lua:"rows"`
}

type fixedReply struct {
	Code int64  `lua:"code"`
	Name string `lua:"name"`
}

var testFS = fstest.MapFS{
	"lua/lib.lua": {Data: []byte("local LIB = 1\n")},
	"lua/t.lua": {Data: []byte("-- KEYS[1] -> a: one\n-- KEYS[2] -> b\n-- ARGV[1] -> now: ms\n-- ARGV[2] -> n\n-- ARGV[3] -> on\n" +
		"-- ARGV[4] -> name\n-- ARGV[5] -> input\nlocal OK = 1\nreturn {OK}\n")},
	"lua/f.lua":    {Data: []byte("-- KEYS[1] -> a\n-- KEYS[2] -> b\n-- ARGV[1] -> now\nlocal OK = 1\nreturn {OK, 'x'}\n")},
	"lua/list.lua": {Data: []byte("-- KEYS[1] -> a\n-- KEYS[2] -> b\n-- ARGV[1] -> fields\nlocal OK = 1\nreturn {OK, 'x'}\n")},
	"lua/ints.lua": {Data: []byte("-- KEYS[1] -> a\n-- KEYS[2] -> b\n-- ARGV[1] -> a\n-- ARGV[2] -> b\nlocal OK = 1\nreturn {OK}\n")},
}

type listArgs struct {
	Fields []any `lua:"fields"`
}

type nowArgs struct {
	Now int64 `lua:"now"`
}

func TestArgumentsFollowTheHeader(t *testing.T) {
	l := NewLibrary("test", testFS, "lua", "lib.lua")
	d := Load[testKeys, testArgs, testReply](l, "t", map[string]int64{"OK": 1})
	if got := d.Keys(testKeys{A: "ka", B: "kb"}); !slices.Equal(got, []string{"ka", "kb"}) {
		t.Errorf("Keys = %v", got)
	}
	got := d.Argv(testArgs{Now: 7, N: 3, On: true, Name: "x", Input: []byte("in")})
	want := []any{int64(7), int64(3), int64(1), "x", []byte("in")}
	if len(got) != len(want) {
		t.Fatalf("Argv = %v", got)
	}
	for i := range want {
		if b, ok := want[i].([]byte); ok {
			if string(got[i].([]byte)) != string(b) {
				t.Errorf("Argv[%d] = %v", i, got[i])
			}
		} else if got[i] != want[i] {
			t.Errorf("Argv[%d] = %#v; want %#v", i, got[i], want[i])
		}
	}
	if !strings.HasPrefix(d.Redis().Hash(), "") || l.Scripts()[0] != d.Script {
		t.Error("the library does not list its script")
	}
	list := Load[testKeys, listArgs, fixedReply](l, "list", map[string]int64{"OK": 1})
	if got := list.Argv(listArgs{Fields: []any{"f", 1, "g", "v"}}); len(got) != 4 || got[0] != "f" || got[3] != "v" {
		t.Errorf("a list's Argv = %v", got)
	}
}

func TestAStructThatDisagreesWithTheHeaderStopsTheLoad(t *testing.T) {
	type swapped struct {
		B string `lua:"b"`
		A string `lua:"a"`
	}
	type intKey struct {
		A int `lua:"a"`
		B int `lua:"b"`
	}
	for name, load := range map[string]func(l *Library){
		"keys out of order":  func(l *Library) { Load[swapped, nowArgs, fixedReply](l, "f", nil) },
		"a key not a string": func(l *Library) { Load[intKey, nowArgs, fixedReply](l, "f", nil) },
		"keys of a type loaded as arguments before": func(l *Library) {
			Load[testKeys, intKey, fixedReply](l, "ints", nil)
			Load[intKey, nowArgs, fixedReply](l, "f", nil)
		},
		"arguments missing": func(l *Library) { Load[testKeys, struct{}, fixedReply](l, "f", nil) },
		"a reply without its code": func(l *Library) {
			Load[testKeys, nowArgs, struct {
				Name string `lua:"name"`
			}](l, "f", nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("loaded")
				}
			}()
			load(NewLibrary("test", testFS, "lua", ""))
		})
	}
}

func TestRepliesAreReadWholeOrRefused(t *testing.T) {
	l := NewLibrary("test", testFS, "lua", "")
	d := Load[testKeys, testArgs, testReply](l, "t", map[string]int64{"OK": 1})
	r, err := d.Decode([]any{int64(1), int64(5), int64(1), "n", "t1", int64(10), "t2", int64(20)})
	if err != nil || r.Count != 5 || !r.Flag || r.Name != "n" || len(r.Rows) != 2 || r.Rows[1] != (testRow{"t2", 20}) {
		t.Errorf("Decode = %+v, %v", r, err)
	}
	if r, err := d.Decode([]any{int64(1), int64(5)}); err != nil || r.Count != 5 || r.Name != "" || r.Rows != nil {
		t.Errorf("a short reply: %+v, %v", r, err)
	}
	if r, err := d.Decode([]any{int64(1), nil, int64(0), "n"}); err != nil || r.Count != 0 {
		t.Errorf("a nil element: %+v, %v", r, err)
	}
	for name, res := range map[string][]any{
		"empty":                                {},
		"no code":                              {"x"},
		"undeclared code":                      {int64(9)},
		"a string shifted where an integer is": {int64(1), "x"},
		"an integer where a string is":         {int64(1), int64(5), int64(1), int64(3)},
		"part of a row":                        {int64(1), int64(5), int64(1), "n", "t1"},
		"a row's element of another type":      {int64(1), int64(5), int64(1), "n", "t1", "t2"},
	} {
		if _, err := d.Decode(res); err == nil {
			t.Errorf("%s: %v decoded", name, res)
		}
	}
	f := Load[testKeys, nowArgs, fixedReply](l, "f", map[string]int64{"OK": 1})
	if _, err := f.Decode([]any{int64(1), "x", "one more"}); err == nil {
		t.Error("a reply longer than its struct decoded")
	}
}

// Every script is loaded here: no Go file elsewhere makes one of its own.
// Tests may (redisconn's test a batcher's EVALSHA with a script of its
// own: a transport's fixture, not one of Easel's scripts).
func TestNoScriptOutsideTheLoader(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no repository root at %s: %v", root, err)
	}
	self, _ := filepath.Abs(".")
	n := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || filepath.Dir(p) == self {
			return nil
		}
		n++
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// A script of its own, or Lua inline (for an EVAL).
		if strings.Contains(string(src), "NewScript"+"(") || strings.Contains(string(src), "redis"+".call(") {
			rel, _ := filepath.Rel(root, p)
			t.Errorf("%s makes a Redis script: put it in a .lua file loaded with luascript.Load", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("found only %d Go files under %s", n, root)
	}
}

var benchArgs = testArgs{Now: 1_700_000_000_000, N: 64, On: true, Name: "task_lumen_00000000000000000001", Input: make([]byte, 100)}

func BenchmarkArgv(b *testing.B) {
	d := Load[testKeys, testArgs, testReply](NewLibrary("test", testFS, "lua", ""), "t", map[string]int64{"OK": 1})
	b.ReportAllocs()
	for b.Loop() {
		_ = d.Argv(benchArgs)
	}
}

func BenchmarkDecode(b *testing.B) {
	d := Load[testKeys, testArgs, testReply](NewLibrary("test", testFS, "lua", ""), "t", map[string]int64{"OK": 1})
	res := []any{int64(1), int64(5), int64(1), "n", "t1", int64(10), "t2", int64(20)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(res); err != nil {
			b.Fatal(err)
		}
	}
}
