// Package store keeps everything Easel holds in Redis: accounts, their API
// keys, credit ledgers and task records, and the few coordination keys the
// services share. It is the only package that knows a Redis key name or a
// hash field name: every Lua script sits beside the Go code that names its
// fields, and the edges ask the store for anything that lives in Redis.
//
// Key layout. Every key an account owns carries the account's hash tag
// "{a:<account id>}", so on Redis Cluster they share a slot and one script
// may touch the account and its tasks together (a debit, a task record and a
// ledger entry):
//
//	easel:{a:<account>}:acct           hash    the account record (status, credits, limits)
//	easel:{a:<account>}:t:<task id>    hash    a task record (24-hour TTL)
//	easel:{a:<account>}:inflight       zset    the account's unfinished tasks, scored by when they stop counting
//	easel:{a:<account>}:unqueued       zset    pending tasks whose job is to be checked for, by when (QueueChecks)
//	easel:{a:<account>}:ledger         stream  credit movements (debit, refund, credit)
//	easel:{a:<account>}:keys           set     hashes of the account's API keys
//	easel:{a:<account>}:hooks          zset    final webhook events ("<task id>|<event>") not yet queued, by when they became due (HooksDue)
//	easel:{a:<account>}:wh:<task id>   hash    a task's webhook deliveries: state, attempts, the message while retried (48-hour TTL)
//	easel:{a:<account>}:whsec          hash    the account's webhook signing secret, and the one it replaced while still valid
//	easel:key:<sha256 of the API key>  hash    an API key record: account, prefix, revoked
//	easel:keyprefix:<visible prefix>   set     hashes of the keys with that prefix
//	easel:accounts                     zset    every account id, by creation time
//	easel:lock:<name>                  string  a lease one process holds (the sweeper's)
//	easel:probe:<instance>             string  a process's readiness write (30 s TTL)
//	rate:easel:<class>:<key hash>      string  a rate-limit bucket (go-redis/redis_rate adds "rate:")
//
// Asynq keeps its own keys under "asynq:{<queue>}:...".
//
// State changes are Lua scripts, so each is atomic and the rules hold
// whatever the number of gateways and workers:
//
//   - creating a task checks the account (active, model allowed, tasks in
//     flight, balance), debits its price, writes the record and a ledger
//     entry, all at once: the balance never goes below zero and a task is
//     never charged twice;
//   - a task moves pending → processing → completed | failed, and a final
//     state never changes;
//   - a task that fails is refunded exactly once (the refund is part of the
//     one transition to failed); a completed task never is;
//   - progress never goes back and reaches 100 only on completion;
//   - one run owns a task at a time: the record names it (run), and only
//     that run may change the task's progress or finish it, so a worker that
//     lost a task (its lease ran out, another run took over) cannot;
//   - a run that starts again without having let go (its worker died) counts
//     as a crash; a task that crashed its workers twice fails, refunded,
//     instead of running a third time;
//   - a record that has expired or been removed is never brought back by a
//     late worker.
//
// Errors: refusals are the typed errors of package apperr (insufficient
// credits with price and balance, a disabled account, a model not allowed,
// the in-flight limit, not found); a Redis failure is returned as it is, for
// the caller to call unavailable.
package store
