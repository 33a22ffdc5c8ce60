package store

import (
	"context"
	"embed"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/luascript"
)

// The Lua scripts: one file each under lua/, lib.lua put before each,
// loaded and called through package luascript: each script's keys,
// arguments and reply are structs tagged `lua:"name"` declared beside its
// caller, and script_test.go holds them to the files (luascript's
// scripttest, and the names the scripts quote against the hash fields
// and values Go declares).
//
//go:embed lua/*.lua
var luaFiles embed.FS

var scripts = luascript.NewLibrary("store", luaFiles, "lua", "lib.lua")

// script is a store script: K its keys, A its arguments, R its reply.
type script[K, A, R any] struct {
	*luascript.Def[K, A, R]
	// durable: a change that moves credits or ends a task, which waits for
	// the replicas Options.MinReplicas asks for (DB.eval); the others run
	// at once.
	durable bool
}

// newScript loads lua/<name>.lua, whose reply codes are codes.
func newScript[K, A, R any](name string, codes map[string]int64) script[K, A, R] {
	return script[K, A, R]{Def: luascript.Load[K, A, R](scripts, name, codes)}
}

// durableScript is newScript for a script that moves credits or ends a
// task: with Options.MinReplicas its changes wait for the replicas.
func durableScript[K, A, R any](name string, codes map[string]int64) script[K, A, R] {
	s := newScript[K, A, R](name, codes)
	s.durable = true
	return s
}

// Reply codes of the scripts that change a task's state: the task.Outcome
// values, by their names in lib.lua.
var outcomeCodes = map[string]int64{
	"APPLIED": 0, "FINAL": 1, "MISSING": 2, "SUPERSEDED": 3, "POISONED": 4, "BUSY": 5,
	// The store's own: a run's worker is to be judged (Pulse.Dead) first.
	"HELD": 6,
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

// run runs the script and reads its reply.
func (s script[K, A, R]) run(ctx context.Context, db *DB, k K, a A) (R, error) {
	keys, argv := s.Keys(k), s.Argv(a)
	var cmd *redis.Cmd
	if s.durable {
		cmd = db.eval(ctx, s.Redis(), keys, argv...)
	} else {
		cmd = s.Redis().Run(ctx, db.hot, keys, argv...)
	}
	res, err := cmd.Slice()
	if err != nil {
		var r R
		return r, err
	}
	return s.Decode(res)
}

// call is one call of a script in a pipeline.
type call[K, A any] struct {
	keys K
	args A
}

// runPipelined runs calls of the script in one round trip (pipelined,
// below) and reads each one's reply, or its error, at its index. The
// error returned is only for the round trip itself.
func (s script[K, A, R]) runPipelined(ctx context.Context, db *DB, calls []call[K, A]) ([]R, []error, error) {
	sc := make([]scriptCall, len(calls))
	for i, c := range calls {
		sc[i] = scriptCall{s.Keys(c.keys), s.Argv(c.args)}
	}
	cmds, err := pipelined(ctx, db, s.Script, s.durable, sc)
	if err != nil {
		return nil, nil, err
	}
	out, errs := make([]R, len(calls)), make([]error, len(calls))
	for i, c := range cmds {
		res, err := c.Slice()
		if err != nil {
			errs[i] = err
			continue
		}
		out[i], errs[i] = s.Decode(res)
	}
	return out, errs, nil
}

// admittedRow is a task a script admitted (lib.lua's promote): the rows
// that end the replies of the scripts that free a place.
type admittedRow struct {
	TaskID   string `lua:"id"`
	Queue    string `lua:"queue"`
	Deadline int64  `lua:"deadline"`
}

// scriptCall is one call of a script in a pipeline.
type scriptCall struct {
	keys []string
	argv []any
}

// pipelined runs calls of a script in one round trip (one per node on a
// cluster). A call answered NOSCRIPT (a server that restarted, failed over
// or flushed its scripts) is run again once the script is loaded on every
// node. A durable script's calls wait for the replicas as DB.eval's do
// (each node's pipeline followed by WAIT). Each call's own reply or error
// is in its command; the error returned is only for the round trip itself.
func pipelined(ctx context.Context, db *DB, s *luascript.Script, durable bool, calls []scriptCall) ([]*redis.Cmd, error) {
	if durable && db.minReplicas > 0 {
		return runWaiting(ctx, db, s.Redis(), calls), nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	run := func(idx []int) error {
		_, err := db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				cmds[i] = s.Redis().EvalSha(ctx, p, calls[i].keys, calls[i].argv...)
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
	if lerr := loadEverywhere(ctx, db, s.Redis()); lerr != nil {
		return cmds, lerr
	}
	err = run(again)
	return cmds, roundTripErr(err, cmds)
}

// runWaiting runs calls of a durable script node by node (each node's in
// one pipeline followed by WAIT, the nodes at once), with DB.evalWaiting.
func runWaiting(ctx context.Context, db *DB, rs *redis.Script, calls []scriptCall) []*redis.Cmd {
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
			for j, c := range db.evalWaiting(ctx, g.node, addr, rs, sub) {
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

// loadEverywhere loads a script on the server, or on every master of a
// cluster.
func loadEverywhere(ctx context.Context, db *DB, rs *redis.Script) error {
	if cc, ok := db.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return rs.Load(ctx, c).Err()
		})
	}
	return rs.Load(ctx, db.rdb).Err()
}

// codeReply is the reply of a script that says only its code.
type codeReply struct {
	Code int64 `lua:"code"`
}
