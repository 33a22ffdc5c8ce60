package store

// Hash fields: every field a record holds, named once here. The Lua
// scripts name them too; script_test.go fails when a script uses a name
// that is not here.

// Task record fields. Short names keep a record small; Redis stores a
// small hash as one compact listpack.
const (
	fTaskType      = "type"
	fTaskModel     = "model"
	fTaskStatus    = "status"
	fTaskProgress  = "progress"
	fTaskCreated   = "ctime"
	fTaskStarted   = "stime"
	fTaskEnded     = "etime"
	fTaskResult    = "r" // r0, r1, ...: the results' blob keys, one a field
	fTaskErrCode   = "ecode"
	fTaskErrMsg    = "emsg"
	fTaskPrice     = "price"
	fTaskRefunded  = "refunded"
	fTaskDeadline  = "dl"      // until the task ends: when it counts no more and fails, Unix ms
	fTaskInput     = "in"      // its input (jobs.EncodeInput), split over in, in+1, ...; shown while the record lives
	fTaskInPieces  = "inn"     // with it: over how many fields (none in a record an older create wrote)
	fTaskAdmitted  = "adm"     // 1 while the task holds one of its account's places
	fTaskRun       = "run"     // the run (jobs.RunID) that owns the unfinished task
	fTaskLive      = "live"    // while the owning run has not let go: the worker that started it (Pulse's id; 1 from one that names none)
	fTaskCrashes   = "crashes" // runs whose worker died holding the unfinished task
	fTaskRuns      = "tkn"     // takeovers: the runs the unfinished task was given to after its first (names the next)
	fTaskCallback  = "cb"      // the webhook URL, if any
	fTaskEvents    = "cbev"    // the webhook event types, comma separated
	fTaskQueue     = "q"       // the queue a pending task waits in
	fTaskQueueSeq  = "qseq"    // its sequence number there
	fTaskVoid      = "void"    // alone in a tombstone: an undo found no task (abort.lua)
	fTaskKey       = "key"     // the hash of the API key that made it, if one did (its spend)
	fTaskTrace     = "tp"      // the W3C traceparent of the create's span, when it was sampled (tracing on)
	fTaskAdmitTime = "atime"   // a traced task that was parked: when it was admitted (Unix ms), until it ends
)

var taskFields = []string{fTaskType, fTaskModel, fTaskStatus, fTaskProgress, fTaskCreated, fTaskStarted, fTaskEnded,
	fTaskResult, fTaskErrCode, fTaskErrMsg, fTaskPrice, fTaskRefunded, fTaskDeadline, fTaskInput, fTaskInPieces, fTaskAdmitted, fTaskRun, fTaskLive,
	fTaskCrashes, fTaskRuns, fTaskCallback, fTaskEvents, fTaskQueue, fTaskQueueSeq, fTaskVoid, fTaskKey, fTaskTrace, fTaskAdmitTime}

// A value longer than pieceLen is kept over several fields, field, field+1,
// field+2... (lib.lua's hset_long), so that every field of a record fits
// Redis's compact listpack whatever the server's hash-max-listpack-value
// (64 by default).
const pieceLen = 64

// Account record fields.
const (
	fAcctName     = "name"
	fAcctStatus   = "status"
	fAcctCreated  = "ctime"
	fAcctCredits  = "credits"
	fAcctModels   = "models" // comma-separated tiers; empty: all
	fAcctRate     = "rate"
	fAcctQRate    = "qrate"
	fAcctInflight = "inflight_max"
	fAcctWeight   = "weight" // its share of the workers is the deployment's share × this (default 1)
	// Counters the task scripts keep: the account's unfinished tasks, and
	// those of them holding a place (queued or running).
	fAcctUnfinished = "infl"
	fAcctAdmitted   = "adm"
	// The default webhook endpoint of the account's tasks without a
	// callback: its URL split over whu, whu+1, ... (at most 64 bytes a
	// field, as a task record's long values), over how many fields, and
	// its event types, comma separated. None while unset.
	fAcctHookURL    = "whu"
	fAcctHookPieces = "whn"
	fAcctHookEvents = "whev"
	// The initial credits: the ledger's first entry (id "<ctime>-0", a
	// credit of this much to this balance, noted "initial credits"), kept
	// here rather than in a ledger key so that an account that moves no
	// credits has none (ledger_read.lua reads it with the rest).
	fAcctOpen = "open"
)

var accountFields = []string{fAcctName, fAcctStatus, fAcctCreated, fAcctCredits, fAcctModels, fAcctRate, fAcctQRate, fAcctInflight,
	fAcctWeight, fAcctUnfinished, fAcctAdmitted, fAcctHookURL, fAcctHookPieces, fAcctHookEvents, fAcctOpen}

// API key record fields.
const (
	fKeyAccount = "acct"
	fKeyHash    = "hash"
	fKeyPrefix  = "prefix"
	fKeyCreated = "ctime"
	fKeyRevoked = "revoked" // 0, or when it was revoked (Unix ms)
	fKeyName    = "name"
	fKeyModels  = "models" // comma-separated tiers; empty: the account's
	fKeyIPs     = "ips"    // comma-separated CIDR prefixes; empty: any
	fKeyExpires = "exp"    // Unix ms; 0: never
	fKeyLimit   = "slimit" // spend limit, credits; 0: none
	fKeyUsed    = "used"   // last looked up, Unix ms (to within keyUsedEvery)
)

var keyFields = []string{fKeyAccount, fKeyHash, fKeyPrefix, fKeyCreated, fKeyRevoked, fKeyName, fKeyModels, fKeyIPs,
	fKeyExpires, fKeyLimit, fKeyUsed}

// Idempotency-Key record fields.
const (
	fIdemBody  = "body"  // the request body's digest
	fIdemTask  = "task"  // the task it created
	fIdemState = "state" // creating, then done
	fIdemAt    = "at"    // when the create began, Unix ms
)

var idemFields = []string{fIdemBody, fIdemTask, fIdemState, fIdemAt}

// Queue numbers' fields.
const (
	fQueueEnq = "enq" // tasks that joined the queue
	fQueueDeq = "deq" // tasks that left it
	// The rate's samples: the dequeued count n1 at t1, and the one before.
	fQueueT0, fQueueN0, fQueueT1, fQueueN1 = "t0", "n0", "t1", "n1"
)

var queueFields = []string{fQueueEnq, fQueueDeq, fQueueT0, fQueueN0, fQueueT1, fQueueN1}

// Ledger entry fields.
const (
	fLedgerKind    = "kind"
	fLedgerAmount  = "amount"
	fLedgerBalance = "balance"
	fLedgerTask    = "task"
	fLedgerNote    = "note"
)

var ledgerFields = []string{fLedgerKind, fLedgerAmount, fLedgerBalance, fLedgerTask, fLedgerNote}

// Webhook secrets' fields.
const (
	fSecretCurrent  = "cur"
	fSecretPrevious = "prev"
	fSecretUntil    = "until" // Unix ms
)

var secretFields = []string{fSecretCurrent, fSecretPrevious, fSecretUntil}

// A task's delivery log holds, per delivery ("<event>:<seq>"), its state
// and creation time ("s:"), its attempts, one JSON object a line ("a:"),
// and its message ("<url>\n<body>", "m:") while it is retried.
const (
	fHookState    = "s:"
	fHookAttempts = "a:"
	fHookMessage  = "m:"
)

var hookLogFields = []string{fHookState, fHookAttempts, fHookMessage}

// Console user record fields.
const (
	fUserEmail    = "email"
	fUserAccount  = "acct"
	fUserPassword = "pw" // argon2id, PHC string (package password)
	fUserAdmin    = "admin"
	fUserStatus   = "status"
	fUserCreated  = "ctime"
	fUserGen      = "gen"
)

// Console session fields.
const (
	fSessUser    = "user"
	fSessAccount = "acct"
	fSessCSRF    = "csrf"
	fSessGen     = "gen"
	fSessCreated = "ctime"
	fSessUntil   = "until" // Unix ms: its absolute end
)
