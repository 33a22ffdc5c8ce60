package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts: one file each under lua/, lib.lua put before each. A
// script's file opens with its contract, one line per key and argument in
// order,
//
//	-- KEYS[1] -> task: the task record
//	-- ARGV[1] -> now: Unix ms
//
// which it then binds to named locals, and ends in a reply whose first
// element is one of the codes it names (never a bare number). On the Go
// side each script is called through one typed function: a struct of its
// keys and one of its arguments in, in the header's order (their `lua`
// tags are the header's names), a reply struct out. script_test.go holds
// the two sides to each other: headers against structs, the codes a
// script returns against the codes Go declares, every quoted name a
// script uses against the hash fields and values Go declares.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// luaScript is a script loaded from lua/<name>.lua.
type luaScript struct {
	name string
	// keys and argv are the names of KEYS and ARGV, in order, from the
	// header.
	keys, argv []string
	// codes are the reply codes Go declares for it, by their Lua names.
	codes map[string]int64
	// durable: a change that moves credits or ends a task, which waits for
	// the replicas Options.MinReplicas asks for (DB.eval); the others run
	// at once.
	durable bool
	body    string // the script's own text, lib.lua not included
	rs      *redis.Script
}

var headerLine = regexp.MustCompile(`^-- (KEYS|ARGV)\[(\d+)\] -> ([a-z_]+)(?::|$)`)

// newScript loads lua/<name>.lua. It panics on a file that is missing or
// whose header is out of order: the package would not work at all, and
// every test of it says so at once.
func newScript(name string, codes map[string]int64) *luaScript {
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	body, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	s := &luaScript{name: name, codes: codes, body: string(body)}
	for _, line := range strings.Split(s.body, "\n") {
		if !strings.HasPrefix(line, "-- KEYS[") && !strings.HasPrefix(line, "-- ARGV[") {
			continue
		}
		m := headerLine.FindStringSubmatch(line)
		if m == nil {
			panic(fmt.Sprintf("store: %s.lua: malformed header line %q", name, line))
		}
		n, _ := strconv.Atoi(m[2])
		list := &s.keys
		if m[1] == "ARGV" {
			list = &s.argv
		}
		if n != len(*list)+1 {
			panic(fmt.Sprintf("store: %s.lua: %s[%d] out of order", name, m[1], n))
		}
		*list = append(*list, m[3])
	}
	s.rs = redis.NewScript(string(lib) + "\n" + s.body)
	return s
}

// Reply codes of the scripts that change a task's state: the task.Outcome
// values, by their names in lib.lua.
var outcomeCodes = map[string]int64{
	"APPLIED": 0, "FINAL": 1, "MISSING": 2, "SUPERSEDED": 3, "POISONED": 4, "BUSY": 5,
}

// durableScript is newScript for a script that moves credits or ends a
// task: with Options.MinReplicas its changes wait for the replicas.
func durableScript(name string, codes map[string]int64) *luaScript {
	s := newScript(name, codes)
	s.durable = true
	return s
}

// outcomes are the outcome codes a script returns.
func outcomes(names ...string) map[string]int64 {
	out := make(map[string]int64, len(names))
	for _, n := range names {
		v, ok := outcomeCodes[n]
		if !ok {
			panic("store: no outcome " + n)
		}
		out[n] = v
	}
	return out
}

// run runs the script, checking that it was given as many keys and
// arguments as its header names.
func (s *luaScript) run(ctx context.Context, db *DB, keys []string, argv []any) ([]any, error) {
	if len(keys) != len(s.keys) || len(argv) != len(s.argv) {
		return nil, fmt.Errorf("store: %s.lua takes %d keys and %d arguments, given %d and %d", s.name, len(s.keys), len(s.argv), len(keys), len(argv))
	}
	var cmd interface{ Slice() ([]any, error) }
	if s.durable {
		cmd = db.eval(ctx, s.rs, keys, argv...)
	} else {
		cmd = s.rs.Run(ctx, db.hot, keys, argv...)
	}
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("store: %s.lua: empty reply", s.name)
	}
	return res, nil
}

// reply reads a script's reply: its code, then its other elements.
type reply struct {
	script *luaScript
	v      []any
}

func (s *luaScript) reply(v []any) reply { return reply{s, v} }

// code is the reply's first element, which must be one of the script's
// codes.
func (r reply) code() (int64, error) {
	c, ok := r.v[0].(int64)
	if !ok {
		return 0, fmt.Errorf("store: %s.lua: reply %v", r.script.name, r.v)
	}
	for _, v := range r.script.codes {
		if v == c {
			return c, nil
		}
	}
	return 0, fmt.Errorf("store: %s.lua: undeclared reply code %d", r.script.name, c)
}

func (r reply) int(i int) int64 {
	if i >= len(r.v) {
		return 0
	}
	n, _ := r.v[i].(int64)
	return n
}

func (r reply) str(i int) string {
	if i >= len(r.v) {
		return ""
	}
	s, _ := r.v[i].(string)
	return s
}

// scriptCall is one call of a script in a pipeline.
type scriptCall struct {
	keys []string
	argv []any
}

// runPipelined runs calls of a script in one round trip (one per node on a
// cluster). A call answered NOSCRIPT (a server that restarted, failed over
// or flushed its scripts) is run again once the script is loaded on every
// node. A durable script's calls wait for the replicas as DB.eval's do
// (each node's pipeline followed by WAIT). Each call's own reply or error
// is in its command; the error returned is only for the round trip itself.
func (s *luaScript) runPipelined(ctx context.Context, db *DB, calls []scriptCall) ([]*redis.Cmd, error) {
	for _, c := range calls {
		if len(c.keys) != len(s.keys) || len(c.argv) != len(s.argv) {
			return nil, fmt.Errorf("store: %s.lua takes %d keys and %d arguments, given %d and %d", s.name, len(s.keys), len(s.argv), len(c.keys), len(c.argv))
		}
	}
	if s.durable && db.minReplicas > 0 {
		return s.runWaiting(ctx, db, calls), nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	run := func(idx []int) error {
		_, err := db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				cmds[i] = s.rs.EvalSha(ctx, p, calls[i].keys, calls[i].argv...)
			}
			return nil
		})
		return err
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	err := run(all)
	var again []int
	for i, c := range cmds {
		if c != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, roundTripErr(err, cmds)
	}
	if lerr := s.loadEverywhere(ctx, db); lerr != nil {
		return cmds, lerr
	}
	err = run(again)
	return cmds, roundTripErr(err, cmds)
}

// runWaiting runs calls of a durable script node by node (each node's in
// one pipeline followed by WAIT, the nodes at once), with DB.evalWaiting.
func (s *luaScript) runWaiting(ctx context.Context, db *DB, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	type group struct {
		node redis.Cmdable
		idx  []int
	}
	groups := map[string]*group{}
	for i, c := range calls {
		node, addr, err := db.nodeOf(ctx, c.keys[0])
		if err != nil {
			cmds[i] = failedCmd(ctx, err)
			continue
		}
		g := groups[addr]
		if g == nil {
			g = &group{node: node}
			groups[addr] = g
		}
		g.idx = append(g.idx, i)
	}
	var wg sync.WaitGroup
	for addr, g := range groups {
		wg.Go(func() {
			sub := make([]scriptCall, len(g.idx))
			for j, i := range g.idx {
				sub[j] = calls[i]
			}
			for j, c := range db.evalWaiting(ctx, g.node, addr, s.rs, sub) {
				cmds[g.idx[j]] = c
			}
		})
	}
	wg.Wait()
	return cmds
}

// roundTripErr is a pipeline's error if no command got a reply of its own
// (the connection failed), else nil: the commands carry their errors.
func roundTripErr(err error, cmds []*redis.Cmd) error {
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if c != nil {
			var re redis.Error
			if errors.As(c.Err(), &re) || c.Err() == nil {
				return nil
			}
		}
	}
	return err
}

// loadEverywhere loads the script on the server, or on every master of a
// cluster.
func (s *luaScript) loadEverywhere(ctx context.Context, db *DB) error {
	if cc, ok := db.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return s.rs.Load(ctx, c).Err()
		})
	}
	return s.rs.Load(ctx, db.rdb).Err()
}
