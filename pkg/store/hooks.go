package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

// Hooks keeps what webhook deliveries need: the accounts' signing
// secrets and each task's delivery log. A task's final event is put on its
// shard's due work by the script that ends the task (the outbox), and
// leaves it when its delivery is queued (Queued); what stays is queued by
// the workers' recovery (Tasks.Due, DueHook).
type Hooks struct{ db *DB }

// NewHooks returns the webhook store on db.
func NewHooks(db *DB) *Hooks { return &Hooks{db: db} }

var webhookSecretLua = durableScript[secretKeys, webhookSecretArgs, webhookSecretReply]("webhook_secret", map[string]int64{"FOUND": 1, "NO_ACCOUNT": -1})

type secretKeys struct {
	Account string `lua:"account"`
	Secrets string `lua:"secrets"`
}

type webhookSecretReply struct {
	Code     int64  `lua:"code"`
	Current  string `lua:"current"`
	Previous string `lua:"previous"`
}

type webhookSecretArgs struct {
	Fresh string `lua:"fresh"`
	Now   int64  `lua:"now"`
}

// Secret returns an account's webhook signing secret
// (webhook.NewSecret), made on first use. An unknown account is
// *apperr.NotFoundError.
func (s *Hooks) Secret(ctx context.Context, accountID string) (string, error) {
	secrets, err := s.Secrets(ctx, accountID)
	if err != nil {
		return "", err
	}
	return secrets[0], nil
}

// Secrets returns the secrets an account's deliveries are signed with now:
// the current one (made on first use), then the one it replaced while
// that is still valid (webhook.SecretOverlap after a rotation).
func (s *Hooks) Secrets(ctx context.Context, accountID string) ([]string, error) {
	now := s.db.now()
	v, err := s.db.rdb.HMGet(ctx, webhookSecretKey(accountID), fSecretCurrent, fSecretPrevious, fSecretUntil).Result()
	if err != nil {
		return nil, fmt.Errorf("store: webhook secret of %s: %w", accountID, err)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	if cur := str(0); cur != "" {
		out := []string{cur}
		if until, _ := strconv.ParseInt(str(2), 10, 64); str(1) != "" && until > now.UnixMilli() {
			out = append(out, str(1))
		}
		return out, nil
	}
	// First use: make one (the script keeps a secret another process made
	// meanwhile).
	fresh, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	r, err := webhookSecretLua.run(ctx, s.db, secretKeys{Account: accountKey(accountID), Secrets: webhookSecretKey(accountID)},
		webhookSecretArgs{Fresh: fresh, Now: now.UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("store: webhook secret of %s: %w", accountID, err)
	}
	if r.Code != 1 {
		return nil, &apperr.NotFoundError{Kind: "account", ID: accountID}
	}
	out := []string{r.Current}
	if r.Previous != "" {
		out = append(out, r.Previous)
	}
	return out, nil
}

var rotateSecretLua = durableScript[secretKeys, rotateSecretArgs, rotateSecretReply]("rotate_secret", map[string]int64{"ROTATED": 1, "NO_ACCOUNT": -1})

type rotateSecretReply struct {
	Code  int64 `lua:"code"`
	Until int64 `lua:"until"`
}

type rotateSecretArgs struct {
	Fresh string `lua:"fresh"`
	Now   int64  `lua:"now"`
	Until int64  `lua:"until"`
}

// RotateSecret gives an account a new signing secret and returns it, with
// the time until which the one it replaces still signs deliveries beside
// it (webhook.SecretOverlap from now; now if there was none). A secret
// rotated out earlier stops at once. An unknown account is
// *apperr.NotFoundError.
func (s *Hooks) RotateSecret(ctx context.Context, accountID string) (string, time.Time, error) {
	fresh, err := webhook.NewSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	now := s.db.now()
	r, err := rotateSecretLua.run(ctx, s.db, secretKeys{Account: accountKey(accountID), Secrets: webhookSecretKey(accountID)},
		rotateSecretArgs{Fresh: fresh, Now: now.UnixMilli(), Until: now.Add(webhook.SecretOverlap).UnixMilli()})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("store: rotate the webhook secret of %s: %w", accountID, err)
	}
	if r.Code != 1 {
		return "", time.Time{}, &apperr.NotFoundError{Kind: "account", ID: accountID}
	}
	return fresh, time.UnixMilli(r.Until), nil
}

func hookID(event string, seq int) string { return event + ":" + strconv.Itoa(seq) }

var hookQueuedLua = newScript[hookQueuedKeys, hookQueuedArgs, codeReply]("hook_queued", map[string]int64{"LISTED": 1})

type hookQueuedKeys struct {
	Log    string `lua:"log"`
	Due    string `lua:"due"`
	Recent string `lua:"recent"`
}

type hookQueuedArgs struct {
	Delivery string `lua:"delivery"`
	Now      int64  `lua:"now"`
	TTL      int64  `lua:"ttl"`
	Member   string `lua:"member"`
	Task     string `lua:"task"`
	Keep     int    `lua:"keep"`
}

// RecentDeliveries is how many of an account's newest webhook deliveries
// its account-wide log lists (Recent).
const RecentDeliveries = 100

// Queued records that the delivery of an event of a task is queued: a
// final event leaves the shard's due work, and the delivery is
// listed pending until its first attempt, and on the account's recent
// deliveries. seq tells apart the progress events (their percent; never
// in the outbox), 0 for the others.
func (s *Hooks) Queued(ctx context.Context, accountID, taskID, event string, seq int) error {
	a := hookQueuedArgs{Delivery: hookID(event, seq), Now: s.db.now().UnixMilli(), TTL: webhook.LogTTL.Milliseconds(), Task: taskID, Keep: RecentDeliveries}
	if event != task.EventProgress {
		a.Member = hookDue(accountID, taskID, event)
	}
	k := hookQueuedKeys{Log: webhookLogKey(accountID, taskID), Due: dueOf(accountID), Recent: webhookRecentKey(accountID)}
	if _, err := hookQueuedLua.run(ctx, s.db, k, a); err != nil {
		return fmt.Errorf("store: webhook %s of %s: %w", event, taskID, err)
	}
	return nil
}

var hookAttemptLua = newScript[hookLogKeys, hookAttemptArgs, codeReply]("hook_attempt", map[string]int64{"RECORDED": 1, "ENDED": 0})

type hookLogKeys struct {
	Log string `lua:"log"`
}

type hookAttemptArgs struct {
	Delivery string `lua:"delivery"`
	State    string `lua:"state"`
	Now      int64  `lua:"now"`
	Attempt  string `lua:"attempt"`
	Message  string `lua:"message"`
	TTL      int64  `lua:"ttl"`
	Again    bool   `lua:"again"`
}

// attemptLine is an attempt as the log keeps it.
type attemptLine struct {
	Time    int64  `json:"t"`
	Status  int    `json:"c,omitempty"`
	Latency int64  `json:"l"`
	Error   string `json:"e,omitempty"`
}

// RecordAttempt adds an attempt to a delivery and moves it to state; msg,
// when its URL is set, is kept for the retries (a final state drops it).
// It reports false, recording nothing, when the delivery had ended
// already (another attempt of a duplicate job ended it).
func (s *Hooks) RecordAttempt(ctx context.Context, accountID, taskID, event string, seq int, a webhook.Attempt, state webhook.State, msg webhook.Outgoing) (bool, error) {
	return s.recordAttempt(ctx, accountID, taskID, event, seq, a, state, msg, false)
}

// Redelivered adds the attempt of a redelivery the account asked for to a
// delivery, ended or not, and moves it to state (delivered or failed).
func (s *Hooks) Redelivered(ctx context.Context, accountID, taskID, event string, seq int, a webhook.Attempt, state webhook.State) error {
	_, err := s.recordAttempt(ctx, accountID, taskID, event, seq, a, state, webhook.Outgoing{}, true)
	return err
}

func (s *Hooks) recordAttempt(ctx context.Context, accountID, taskID, event string, seq int, a webhook.Attempt, state webhook.State, msg webhook.Outgoing, again bool) (bool, error) {
	line, err := json.Marshal(attemptLine{Time: a.Time.UnixMilli(), Status: a.StatusCode, Latency: a.Latency.Milliseconds(), Error: a.Error})
	if err != nil {
		return false, err
	}
	var m string
	if msg.URL != "" {
		m = msg.URL + "\n" + string(msg.Body)
	}
	r, err := hookAttemptLua.run(ctx, s.db, hookLogKeys{Log: webhookLogKey(accountID, taskID)}, hookAttemptArgs{
		Delivery: hookID(event, seq), State: string(state), Now: s.db.now().UnixMilli(), Attempt: string(line) + "\n",
		Message: m, TTL: webhook.LogTTL.Milliseconds(), Again: again,
	})
	if err != nil {
		return false, fmt.Errorf("store: webhook %s of %s: %w", event, taskID, err)
	}
	return r.Code == 1, nil
}

// Outgoing returns a delivery's state ("" if it was never listed) and the
// message kept for its retries (empty before its first attempt and once
// it has ended).
func (s *Hooks) Outgoing(ctx context.Context, accountID, taskID, event string, seq int) (webhook.State, webhook.Outgoing, error) {
	id := hookID(event, seq)
	v, err := s.db.rdb.HMGet(ctx, webhookLogKey(accountID, taskID), fHookState+id, fHookMessage+id).Result()
	if err != nil {
		return "", webhook.Outgoing{}, fmt.Errorf("store: webhook %s of %s: %w", event, taskID, err)
	}
	st, _ := v[0].(string)
	state, _, _ := strings.Cut(st, " ")
	var msg webhook.Outgoing
	if m, _ := v[1].(string); m != "" {
		u, body, _ := strings.Cut(m, "\n")
		msg = webhook.Outgoing{URL: u, Body: []byte(body)}
	}
	return webhook.State(state), msg, nil
}

// Deliveries returns the deliveries of a task's events, oldest first:
// those recorded, and the final events still waiting on the due work to
// be queued (pending).
func (s *Hooks) Deliveries(ctx context.Context, accountID, taskID string) ([]webhook.Delivery, error) {
	finals := []string{task.EventCompleted, task.EventFailed, task.EventCanceled}
	var log *redis.MapStringStringCmd
	outbox := make([]*redis.FloatCmd, len(finals))
	if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		log = p.HGetAll(ctx, webhookLogKey(accountID, taskID))
		for i, ev := range finals {
			outbox[i] = p.ZScore(ctx, dueOf(accountID), hookDue(accountID, taskID, ev))
		}
		return nil
	}); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("store: webhooks of %s: %w", taskID, err)
	}
	byID := map[string]*webhook.Delivery{}
	for field, v := range log.Val() {
		kind, id, ok := strings.Cut(field, ":")
		if !ok {
			continue
		}
		event, seqText, _ := strings.Cut(id, ":")
		seq, err := strconv.Atoi(seqText)
		if err != nil {
			continue
		}
		d := byID[id]
		if d == nil {
			d = &webhook.Delivery{Event: event, Seq: seq, State: webhook.StatePending}
			byID[id] = d
		}
		switch kind + ":" {
		case fHookState:
			d.State, d.Created = parseHookState(v)
		case fHookAttempts:
			d.Attempts = parseAttempts(v)
		}
	}
	for i, ev := range finals {
		id := hookID(ev, 0)
		if score, err := outbox[i].Result(); err == nil && byID[id] == nil {
			// Due HookGrace after the task ended (unless the recovery moved
			// it on since: then its creation is not known closer).
			byID[id] = &webhook.Delivery{Event: ev, State: webhook.StatePending, Created: time.UnixMilli(int64(score)).Add(-HookGrace)}
		}
	}
	out := make([]webhook.Delivery, 0, len(byID))
	for _, d := range byID {
		if d.Created.IsZero() && len(d.Attempts) > 0 {
			d.Created = d.Attempts[0].Time
		}
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		if ai, bi := slices.Index(task.Events, a.Event), slices.Index(task.Events, b.Event); ai != bi {
			return ai > bi // progress before the end
		}
		return a.Seq < b.Seq
	})
	return out, nil
}

// parseHookState reads a delivery's state field: its state and when it
// was listed.
func parseHookState(v string) (webhook.State, time.Time) {
	st, ms, _ := strings.Cut(v, " ")
	var created time.Time
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		created = time.UnixMilli(n)
	}
	return webhook.State(st), created
}

// parseAttempts reads a delivery's attempts field, oldest first.
func parseAttempts(v string) []webhook.Attempt {
	var out []webhook.Attempt
	for _, line := range strings.Split(strings.TrimSuffix(v, "\n"), "\n") {
		var a attemptLine
		if json.Unmarshal([]byte(line), &a) != nil {
			continue
		}
		out = append(out, webhook.Attempt{Time: time.UnixMilli(a.Time), StatusCode: a.Status, Latency: time.Duration(a.Latency) * time.Millisecond, Error: a.Error})
	}
	return out
}

// Recent returns an account's newest webhook deliveries, newest first, at
// most limit (and RecentDeliveries), each with its task, state and
// attempts. A delivery whose task's log has expired is left out. It reads
// the list and then the deliveries' logs, pipelined: two round trips.
func (s *Hooks) Recent(ctx context.Context, accountID string, limit int) ([]webhook.Delivery, error) {
	limit = min(max(limit, 1), RecentDeliveries)
	entries, err := s.db.rdb.ZRevRangeWithScores(ctx, webhookRecentKey(accountID), 0, int64(limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: recent webhooks of %s: %w", accountID, err)
	}
	type row struct {
		d   webhook.Delivery
		cmd *redis.SliceCmd
	}
	rows := make([]row, 0, len(entries))
	for _, e := range entries {
		m, _ := e.Member.(string)
		taskID, id, ok := strings.Cut(m, "|")
		event, seqText, _ := strings.Cut(id, ":")
		seq, err := strconv.Atoi(seqText)
		if !ok || err != nil {
			continue
		}
		rows = append(rows, row{d: webhook.Delivery{TaskID: taskID, Event: event, Seq: seq, State: webhook.StatePending, Created: time.UnixMilli(int64(e.Score))}})
	}
	if len(rows) == 0 {
		return []webhook.Delivery{}, nil
	}
	if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range rows {
			id := hookID(rows[i].d.Event, rows[i].d.Seq)
			rows[i].cmd = p.HMGet(ctx, webhookLogKey(accountID, rows[i].d.TaskID), fHookState+id, fHookAttempts+id)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: recent webhooks of %s: %w", accountID, err)
	}
	out := make([]webhook.Delivery, 0, len(rows))
	for _, r := range rows {
		v := r.cmd.Val()
		st, _ := v[0].(string)
		if st == "" {
			continue // its task's log expired
		}
		d := r.d
		d.State, _ = parseHookState(st)
		if a, _ := v[1].(string); a != "" {
			d.Attempts = parseAttempts(a)
		}
		out = append(out, d)
	}
	return out, nil
}

var accountWebhookLua = newScript[accountWebhookKeys, accountWebhookArgs, codeReply]("account_webhook", map[string]int64{"SET": 1, "NO_ACCOUNT": 0})

type accountWebhookKeys struct {
	Account string `lua:"account"`
}

type accountWebhookArgs struct {
	URL    string `lua:"url"`
	Events string `lua:"events"`
}

// SetEndpoint sets an account's default webhook endpoint, where the events
// of its tasks without a callback go (validated by the caller); an empty
// URL clears it. A task takes the endpoint of its first event that wants
// delivering. An unknown account is *apperr.NotFoundError.
func (s *Hooks) SetEndpoint(ctx context.Context, accountID string, cb task.Callback) error {
	a := accountWebhookArgs{URL: cb.URL}
	if cb.URL != "" {
		a.Events = strings.Join(cb.Events, ",")
	}
	r, err := accountWebhookLua.run(ctx, s.db, accountWebhookKeys{Account: accountKey(accountID)}, a)
	if err != nil {
		return fmt.Errorf("store: webhook endpoint of %s: %w", accountID, err)
	}
	if r.Code != 1 {
		return &apperr.NotFoundError{Kind: "account", ID: accountID}
	}
	return nil
}

// Endpoint returns an account's default webhook endpoint (its URL "" when
// none is set). It reads the account record once.
func (s *Hooks) Endpoint(ctx context.Context, accountID string) (task.Callback, error) {
	m, err := s.db.rdb.HGetAll(ctx, accountKey(accountID)).Result()
	if err != nil {
		return task.Callback{}, fmt.Errorf("store: webhook endpoint of %s: %w", accountID, err)
	}
	if len(m) == 0 {
		return task.Callback{}, &apperr.NotFoundError{Kind: "account", ID: accountID}
	}
	u := longField(m, fAcctHookURL)
	if u == "" {
		return task.Callback{}, nil
	}
	return task.Callback{URL: u, Events: strings.Split(m[fAcctHookEvents], ",")}, nil
}
