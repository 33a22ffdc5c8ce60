package store

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// DB is Easel's Redis: the connection and the settings every store on it
// shares (Tasks, Accounts, Hooks, Queues, Leases). It is safe for
// concurrent use.
type DB struct {
	rdb redis.UniversalClient
	// hot: the client of scripts and of the request path's reads
	// (Options.Batched), else rdb.
	hot redis.UniversalClient
	ttl time.Duration // of finished task records
	now func() time.Time
	// durability: see Options.MinReplicas.
	minReplicas int
	waitFor     time.Duration
	share       int
	ledgerKeep  time.Duration
	// loaded: scripts known loaded on a node (node address + SHA), with
	// durability on.
	loaded sync.Map
	probes probeTags
	// counts: tasks out of their queues held to be counted, on a cluster.
	counts queueCounts
}

// Options are a DB's settings; the zero value is a DB that waits for no
// replica, on the wall clock.
type Options struct {
	// MinReplicas makes every change that moves credits or ends a task
	// wait, with Redis WAIT on the same connection, until that many
	// replicas have it, for at most ReplicaWait; if they do not confirm in
	// time the change is reported as ErrNotReplicated (the caller undoes
	// what it can and answers 503). A change a client was told about then
	// survives a failover to any of those replicas. 0 turns it off.
	MinReplicas int
	ReplicaWait time.Duration
	// Share is how many of an account's tasks may hold a place (queued or
	// running) at once, times the account's weight (EASEL_ACCOUNT_MAX_RUNNING):
	// the rest wait parked, costing no worker and no Redis work, and are
	// admitted oldest first as places free. 0: no limit. Every gateway and
	// worker must use the same.
	Share int
	// LedgerRetention is how long ledger entries are kept (trimmed as
	// entries are written; EASEL_LEDGER_RETENTION). 0: for ever.
	LedgerRetention time.Duration
	// Now is the clock (nil: time.Now); tests set it.
	Now func() time.Time
	// Batched, when set, is rdb with its scripts and hot reads batched
	// (redisconn.Batched): what the gateway's requests send goes through
	// it, the rest through rdb.
	Batched redis.UniversalClient
}

// NewDB returns a DB on rdb, which the caller keeps and closes.
func NewDB(rdb redis.UniversalClient, o Options) *DB {
	db := &DB{rdb: rdb, hot: o.Batched, ttl: task.ResultTTL, now: o.Now, minReplicas: o.MinReplicas, waitFor: o.ReplicaWait,
		share: max(o.Share, 0), ledgerKeep: max(o.LedgerRetention, 0)}
	if db.now == nil {
		db.now = time.Now
	}
	if db.hot == nil {
		db.hot = rdb
	}
	return db
}

// ErrNotReplicated: a change was made on the primary but not confirmed by
// enough replicas in time (Options.MinReplicas).
var ErrNotReplicated = apperr.Transient(errors.New("store: not confirmed by enough replicas"), apperr.Unavailable,
	"Redis could not confirm the change on enough replicas; try again")

// NotSent reports whether err says a call never reached Redis: the client
// was closed, no connection could be made or taken from the pool, the
// batcher's queue was full (redisconn.Batcher). Such a call changed
// nothing. Any other failure (a timeout, a connection lost while waiting
// for the reply, a wait given up) may come after Redis ran it.
func NotSent(err error) bool {
	var op *net.OpError
	return errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		errors.Is(err, redis.ErrAutoPipelineQueueFull) || (errors.As(err, &op) && op.Op == "dial")
}

// eval runs a script on keys; with durability on, on the node of keys[0]
// followed by WAIT on the same connection.
func (db *DB) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if db.minReplicas <= 0 {
		return script.Run(ctx, db.hot, keys, args...)
	}
	node, addr, err := db.nodeOf(ctx, keys[0])
	if err != nil {
		return failedCmd(ctx, err)
	}
	return db.evalWaiting(ctx, node, addr, script, []scriptCall{{keys: keys, argv: args}})[0]
}

// nodeOf is the connection a key's writes go through: the server, or on a
// cluster the master of the key's slot (and its address).
func (db *DB) nodeOf(ctx context.Context, key string) (redis.Cmdable, string, error) {
	cc, ok := db.rdb.(*redis.ClusterClient)
	if !ok {
		return db.rdb, "", nil
	}
	n, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return n, n.Options().Addr, nil
}

// failedCmd is a command that failed with err before it was sent.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// evalWaiting runs calls of a script on one node (addr: "" for a single
// server) in one pipeline followed by WAIT on the same connection, and
// returns each call's reply: its own error, or ErrNotReplicated when the
// replicas did not confirm in time.
func (db *DB) evalWaiting(ctx context.Context, node redis.Cmdable, addr string, script *redis.Script, calls []scriptCall) []*redis.Cmd {
	out := make([]*redis.Cmd, len(calls))
	failAll := func(err error) []*redis.Cmd {
		for i := range out {
			out[i] = failedCmd(ctx, err)
		}
		return out
	}
	// A script is loaded before its first run, not run in full on a
	// NOSCRIPT reply: that reply would come after a WAIT that, with the
	// replicas missing, waits its whole timeout for nothing.
	loadedKey := addr + "/" + script.Hash()
	if _, ok := db.loaded.Load(loadedKey); !ok {
		if err := script.Load(ctx, node).Err(); err != nil {
			return failAll(err)
		}
		db.loaded.Store(loadedKey, true)
	}
	run := func(idx []int) *redis.Cmd {
		var wait *redis.Cmd
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				out[i] = script.EvalSha(ctx, p, calls[i].keys, calls[i].argv...)
			}
			wait = p.Do(ctx, "WAIT", db.minReplicas, db.waitFor.Milliseconds())
			return nil
		})
		return wait
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	wait := run(all)
	var again []int
	for i, c := range out {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		// A failover, a restart or SCRIPT FLUSH emptied the cache.
		if err := script.Load(ctx, node).Err(); err != nil {
			for _, i := range again {
				out[i] = failedCmd(ctx, err)
			}
			return out
		}
		wait = run(again)
	}
	if n, err := wait.Int(); err != nil || n < db.minReplicas {
		for i, c := range out {
			if c.Err() == nil {
				out[i] = failedCmd(ctx, ErrNotReplicated)
			}
		}
	}
	return out
}

// hgetAll reads several hashes in one round trip (per slot, on a cluster).
func (db *DB) hgetAll(ctx context.Context, keys []string) ([]map[string]string, error) {
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	if _, err := db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HGetAll(ctx, k)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(keys))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// cluster reports whether the DB is on a Redis Cluster.
func (db *DB) cluster() bool {
	_, ok := db.rdb.(*redis.ClusterClient)
	return ok
}
