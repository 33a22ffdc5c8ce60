// Package luascript loads Easel's Redis Lua scripts and calls them
// through typed Go structs, so that the two sides of each script cannot
// drift apart unseen.
//
// A script is a file of its package's embedded files that opens with its
// contract, one line per key and argument in order,
//
//	-- KEYS[1] -> task: the task record
//	-- ARGV[1] -> now: Unix ms
//
// which it then binds to named locals, and ends in a reply whose first
// element is one of the codes it names (local NAME = value; never a bare
// number). A package may give a library file: each of its scripts runs
// with the library's top-level statements it uses put before it (libFor).
//
// On the Go side a script is loaded once (Load) with three struct types:
// its keys, its arguments and its reply, each field tagged `lua:"name"`.
// The keys' and arguments' tags are the header's names in its order; the
// reply's fields are the reply's elements in order (the first the code),
// a last field of a slice of structs taking the rest of the reply in rows.
// How a struct maps onto a script is worked out once per type, when the
// script is loaded; a struct that disagrees with the header stops the
// program there. A reply may be shorter than its struct (a refusal says
// less than a success; the rest stay zero), but a reply longer than its
// struct, or with an element of another type than its field's, is an
// error, never read shifted. Package scripttest checks the rest of the
// contract in each package's tests: the codes, the length and kinds of
// the replies a script writes out, the names it quotes.
package luascript

import (
	"context"
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Library is a package's scripts: the files they are read from, and the
// library whose parts are put before them.
type Library struct {
	// Pkg names the package in errors ("store").
	Pkg   string
	FS    fs.FS
	Dir   string // of the scripts in FS ("." for the top)
	Lib   string // the library's file name under Dir; "" for none
	lib   string
	parts []libPart // lib's top-level statements (splitLib)
	defs  []*Script
}

// NewLibrary returns the scripts of package pkg, read from dir of fsys,
// with lib (a file name there; "" for none), the part of it each uses put
// before it.
func NewLibrary(pkg string, fsys fs.FS, dir, lib string) *Library {
	l := &Library{Pkg: pkg, FS: fsys, Dir: dir, Lib: lib}
	if lib != "" {
		b, err := fs.ReadFile(fsys, l.path(lib))
		if err != nil {
			panic(err)
		}
		l.lib = string(b)
		l.parts = splitLib(l.lib)
	}
	return l
}

func (l *Library) path(file string) string {
	if l.Dir == "." || l.Dir == "" {
		return file
	}
	return l.Dir + "/" + file
}

// LibText is the library's text ("" for none).
func (l *Library) LibText() string { return l.lib }

// Scripts are the scripts loaded from the library, in their order.
func (l *Library) Scripts() []*Script { return slices.Clone(l.defs) }

// Script is a loaded script, whatever its Go types: what the contract
// checks read.
type Script struct {
	lib  *Library
	Name string
	// Keys and Argv are the names of KEYS and ARGV, in order, from the
	// header.
	Keys, Argv []string
	// Codes are the reply codes Go declares for it, by their Lua names.
	Codes map[string]int64
	// Body is the script's own text, the library not included.
	Body string
	// KeysType, ArgsType and ReplyType are its Go structs.
	KeysType, ArgsType, ReplyType string
	// ReplyFields is how many elements a reply has at most, the code
	// included; -1 when a last field takes rows of any number.
	ReplyFields int
	// ReplyKinds are what the reply's elements before any rows are read
	// as, in order: "integer", "flag" or "string".
	ReplyKinds []string
	rs         *redis.Script
	src        string
}

// Redis is the script as go-redis runs it (its Source).
func (s *Script) Redis() *redis.Script { return s.rs }

// Source is the text Redis runs: the part of the library the body uses
// (libFor), then the body.
func (s *Script) Source() string { return s.src }

// File is the script's file name.
func (s *Script) File() string { return s.Name + ".lua" }

var headerLine = regexp.MustCompile(`^-- (KEYS|ARGV)\[(\d+)\] -> ([a-z_]+)(?::|$)`)

// Def is a script with its Go types: K its keys, A its arguments, R its
// reply.
type Def[K, A, R any] struct {
	*Script
	keys  *argPlan
	args  *argPlan
	reply *replyPlan
}

// Load loads name.lua of the library with its Go types and the reply
// codes Go declares for it. It panics on a file that is missing, a header
// out of order, or a type that disagrees with the header: the package
// would not work at all, and every test of it says so at once.
func Load[K, A, R any](l *Library, name string, codes map[string]int64) *Def[K, A, R] {
	body, err := fs.ReadFile(l.FS, l.path(name+".lua"))
	if err != nil {
		panic(err)
	}
	s := &Script{lib: l, Name: name, Codes: codes, Body: string(body)}
	for _, line := range strings.Split(s.Body, "\n") {
		if !strings.HasPrefix(line, "-- KEYS[") && !strings.HasPrefix(line, "-- ARGV[") {
			continue
		}
		m := headerLine.FindStringSubmatch(line)
		if m == nil {
			panic(fmt.Sprintf("%s: %s.lua: malformed header line %q", l.Pkg, name, line))
		}
		n, _ := strconv.Atoi(m[2])
		list := &s.Keys
		if m[1] == "ARGV" {
			list = &s.Argv
		}
		if n != len(*list)+1 {
			panic(fmt.Sprintf("%s: %s.lua: %s[%d] out of order", l.Pkg, name, m[1], n))
		}
		*list = append(*list, m[3])
	}
	d := &Def[K, A, R]{Script: s}
	d.keys = planOf[K](true)
	d.args = planOf[A](false)
	d.reply = replyPlanOf[R]()
	if err := d.keys.check("KEYS", s.Keys); err != nil {
		panic(fmt.Sprintf("%s: %s.lua: %v", l.Pkg, name, err))
	}
	if err := d.args.check("ARGV", s.Argv); err != nil {
		panic(fmt.Sprintf("%s: %s.lua: %v", l.Pkg, name, err))
	}
	s.KeysType, s.ArgsType, s.ReplyType = d.keys.typ.String(), d.args.typ.String(), d.reply.typ.String()
	s.ReplyFields = d.reply.max()
	s.ReplyKinds = d.reply.kinds()
	s.src = s.Body
	if l.lib != "" {
		s.src = libFor(l.parts, s.Body) + "\n" + s.Body
	}
	s.rs = redis.NewScript(s.src)
	l.defs = append(l.defs, s)
	return d
}

// Keys are k's keys, in the header's order.
func (d *Def[K, A, R]) Keys(k K) []string { return d.keys.keys(reflect.ValueOf(k)) }

// Argv are a's arguments, in the header's order.
func (d *Def[K, A, R]) Argv(a A) []any { return d.args.argv(reflect.ValueOf(a)) }

// Decode reads a reply: its code, which must be one the script declares,
// then its other elements.
func (d *Def[K, A, R]) Decode(res []any) (R, error) {
	var r R
	if len(res) == 0 {
		return r, fmt.Errorf("%s: %s.lua: empty reply", d.lib.Pkg, d.Name)
	}
	c, ok := res[0].(int64)
	if !ok {
		return r, fmt.Errorf("%s: %s.lua: reply %v", d.lib.Pkg, d.Name, res)
	}
	if !d.declares(c) {
		return r, fmt.Errorf("%s: %s.lua: undeclared reply code %d", d.lib.Pkg, d.Name, c)
	}
	if err := d.reply.decode(&r, res); err != nil {
		return r, fmt.Errorf("%s: %s.lua: %w", d.lib.Pkg, d.Name, err)
	}
	return r, nil
}

func (s *Script) declares(c int64) bool {
	for _, v := range s.Codes {
		if v == c {
			return true
		}
	}
	return false
}

// Call runs the script on c (EVALSHA, EVAL when the server has not loaded
// it) and decodes its reply.
func (d *Def[K, A, R]) Call(ctx context.Context, c redis.Scripter, k K, a A) (R, error) {
	res, err := d.rs.Run(ctx, c, d.Keys(k), d.Argv(a)...).Slice()
	if err != nil {
		var r R
		return r, err
	}
	return d.Decode(res)
}
