package store

import (
	"context"
	"errors"
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
}

// NewDB returns a DB on rdb, which the caller keeps and closes.
func NewDB(rdb redis.UniversalClient, o Options) *DB {
	db := &DB{rdb: rdb, ttl: task.ResultTTL, now: o.Now, minReplicas: o.MinReplicas, waitFor: o.ReplicaWait,
		share: max(o.Share, 0), ledgerKeep: max(o.LedgerRetention, 0)}
	if db.now == nil {
		db.now = time.Now
	}
	return db
}

// ErrNotReplicated: a change was made on the primary but not confirmed by
// enough replicas in time (Options.MinReplicas).
var ErrNotReplicated = apperr.Transient(errors.New("store: not confirmed by enough replicas"), apperr.Unavailable,
	"Redis could not confirm the change on enough replicas; try again")

// eval runs a script on keys; with durability on, on the node of keys[0]
// followed by WAIT on the same connection.
func (db *DB) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if db.minReplicas <= 0 {
		return script.Run(ctx, db.rdb, keys, args...)
	}
	fail := func(err error) *redis.Cmd {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	var node redis.Cmdable = db.rdb
	nodeAddr := ""
	if cc, ok := db.rdb.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return fail(err)
		}
		node, nodeAddr = n, n.Options().Addr
	}
	// A script is loaded before its first run, not run in full on a
	// NOSCRIPT reply: that reply would come after a WAIT that, with the
	// replicas missing, waits its whole timeout for nothing.
	loadedKey := nodeAddr + "/" + script.Hash()
	if _, ok := db.loaded.Load(loadedKey); !ok {
		if err := script.Load(ctx, node).Err(); err != nil {
			return fail(err)
		}
		db.loaded.Store(loadedKey, true)
	}
	run := func() (*redis.Cmd, *redis.Cmd, error) {
		var res, wait *redis.Cmd
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			res = script.EvalSha(ctx, p, keys, args...)
			wait = p.Do(ctx, "WAIT", db.minReplicas, db.waitFor.Milliseconds())
			return nil
		})
		return res, wait, err
	}
	res, wait, err := run()
	if err != nil && redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
		// A failover, a restart or SCRIPT FLUSH emptied the cache.
		if err := script.Load(ctx, node).Err(); err != nil {
			return fail(err)
		}
		res, wait, err = run()
	}
	if err != nil && res.Err() != nil {
		return res
	}
	if n, werr := wait.Int(); werr != nil || n < db.minReplicas {
		return fail(ErrNotReplicated)
	}
	return res
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
