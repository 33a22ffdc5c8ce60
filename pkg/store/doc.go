// Package store keeps everything Easel holds in Redis: accounts, their API
// keys, credit ledgers and task records, and the few coordination keys the
// services share. It is the only package that knows their Redis key names
// and hash field names (the upstreams' shared state is package upstream's,
// the upstream quota's package quota's): every Lua script sits beside the
// Go code that names its fields (package luascript loads and calls them),
// and the edges ask the store for anything of theirs that lives in Redis.
//
// Key layout. The accounts are spread over Shards shards (ShardOf), and
// every key an account owns carries its shard's hash tag "{s<n>}", so on
// Redis Cluster an account's keys and its shard's due work share a slot and
// one script may touch the account, its tasks and the due work together (a
// debit, a task record, a ledger entry, the task's next check):
//
//	easel:{s<n>}:a:<account>:acct          hash    the account record (status, credits, limits, weight; counters infl and adm)
//	easel:{s<n>}:a:<account>:t:<task id>   hash    a task record (a listpack: every value at most 64 bytes)
//	easel:{s<n>}:a:<account>:j:<task id>   string  a pending task's job payload
//	easel:{s<n>}:a:<account>:parked        zset    the account's tasks waiting for a place, by creation time
//	easel:{s<n>}:a:<account>:tasks         zset    the account's task index, for listing (task id → creation time)
//	easel:{s<n>}:a:<account>:ledger        stream  credit movements (debit, refund, credit) once more than 16, trimmed to the retention (lib.lua's ledger)
//	easel:{s<n>}:a:<account>:ledger:h      hash    a short ledger, before it has a stream: entry id → "kind|amount|balance|task|note", 16 at most, then moved to the stream with the same ids; read with it, merged by id (ledger_read.lua)
//	easel:{s<n>}:a:<account>:keys          set     hashes of the account's API keys
//	easel:{s<n>}:a:<account>:idem:<sha256> hash    an Idempotency-Key's create
//	easel:{s<n>}:a:<account>:wh:<task id>  hash    a task's webhook deliveries: state, attempts, the message while retried (48-hour TTL)
//	easel:{s<n>}:a:<account>:whrecent      zset    the account's newest webhook deliveries ("<task>|<event>:<seq>" → when listed), RecentDeliveries at most (48-hour TTL)
//	easel:{s<n>}:a:<account>:whsec         hash    the account's webhook signing secret, and the one it replaced while still valid
//	easel:{s<n>}:due                       zset    the shard's due work: each unfinished task's next check ("t|<account>|<task>") and final webhook events not yet queued ("h|<account>|<task>|<event>"), by when due
//	easel:{s<n>}:lease                     string  which worker does the shard's due work
//	easel:recovery:workers                 zset    the workers doing the due work, by last heartbeat
//	easel:key:<sha256 of the API key>      hash    an API key record: account, prefix, revoked
//	easel:keyprefix:<visible prefix>       set     hashes of the keys with that prefix
//	easel:accounts                         zset    every account id, by creation time (for listing them; no periodic loop reads it)
//	easel:q:{<queue>}                      hash    a queue's sequence numbers, for queue positions
//	easel:lock:<name>                      string  a lease one process holds (the orphans' recovery)
//	easel:probe:<instance>                 string  a process's readiness write (30 s TTL)
//	rate:easel:<class>:<key hash>          string  a rate-limit bucket (go-redis/redis_rate adds "rate:")
//
// Asynq keeps its own keys under "asynq:{<queue>}:...".
//
// State changes are Lua scripts, so each is atomic and the rules hold
// whatever the number of gateways and workers:
//
//   - creating a task checks the account (active, model allowed, tasks in
//     flight, balance), debits its price, writes the record and a ledger
//     entry, and admits the task into one of the account's places or parks
//     it, all at once: the balance never goes below zero and a task is
//     never charged twice;
//   - an account holds at most Options.Share × its weight places (tasks
//     queued or running); the change that frees one admits the account's
//     oldest parked task in the same step;
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
//     late worker; one that went while its task was unfinished (evicted,
//     or left past its deadline unread) leaves the account's counters and
//     its place at the first change that finds it gone (lib.lua's forget).
//
// Errors: refusals are the typed errors of package apperr (insufficient
// credits with price and balance, a disabled account, a model not allowed,
// the in-flight limit, not found); a Redis failure is returned as it is, for
// the caller to call unavailable.
package store
