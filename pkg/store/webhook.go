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

// webhookSecretKey is the key of an account's webhook signing secrets (a
// hash: the current one, the previous one and until when it is valid).
func webhookSecretKey(accountID string) string { return tag(accountID) + "whsec" }

// Fields of the secrets' hash.
const (
	fSecretCurrent  = "cur"
	fSecretPrevious = "prev"
	fSecretUntil    = "until" // Unix ms
)

// WebhookSecretOverlap is how long a rotated-out secret still signs
// deliveries, beside the new one: time for the receivers to change theirs.
const WebhookSecretOverlap = 24 * time.Hour

// KEYS: account, secrets. ARGV: a new secret, now (Unix ms).
// Returns {-1} for no account, else {1, current[, previous]}.
var webhookSecretScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local v = redis.call('HMGET', KEYS[2], 'cur', 'prev', 'until')
if not v[1] then
  redis.call('HSET', KEYS[2], 'cur', ARGV[1])
  v[1] = ARGV[1]
end
if v[2] and tonumber(v[3] or '0') > tonumber(ARGV[2]) then return {1, v[1], v[2]} end
return {1, v[1]}
`)

// KEYS: account, secrets. ARGV: the new secret, now, until (Unix ms).
// Returns {-1} for no account, else {1, until the previous secret is
// valid}.
var rotateSecretScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local cur = redis.call('HGET', KEYS[2], 'cur')
local untl = ARGV[2]
if cur then
  redis.call('HSET', KEYS[2], 'prev', cur, 'until', ARGV[3])
  untl = ARGV[3]
else
  redis.call('HDEL', KEYS[2], 'prev', 'until')
end
redis.call('HSET', KEYS[2], 'cur', ARGV[1])
return {1, tonumber(untl)}
`)

// WebhookSecret returns an account's webhook signing secret
// (webhook.NewSecret), made on first use. An unknown account is
// *apperr.NotFoundError.
func (s *Store) WebhookSecret(ctx context.Context, accountID string) (string, error) {
	secrets, err := s.webhookSecrets(ctx, accountID)
	if err != nil {
		return "", err
	}
	return secrets[0], nil
}

// WebhookSecrets returns the secrets an account's deliveries are signed
// with now: the current one (made on first use), then the one it replaced
// while that is still valid (WebhookSecretOverlap after a rotation).
func (s *Store) WebhookSecrets(ctx context.Context, accountID string) ([]string, error) {
	return s.webhookSecrets(ctx, accountID)
}

func (s *Store) webhookSecrets(ctx context.Context, accountID string) ([]string, error) {
	now := s.now()
	v, err := s.rdb.HMGet(ctx, webhookSecretKey(accountID), fSecretCurrent, fSecretPrevious, fSecretUntil).Result()
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
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	res, err := s.eval(ctx, webhookSecretScript, []string{accountKey(accountID), webhookSecretKey(accountID)}, secret, now.UnixMilli()).Slice()
	if err != nil {
		return nil, fmt.Errorf("store: webhook secret of %s: %w", accountID, err)
	}
	if code, _ := res[0].(int64); code != 1 {
		return nil, &apperr.NotFoundError{Kind: "account", ID: accountID}
	}
	out := make([]string, 0, 2)
	for _, r := range res[1:] {
		if s, ok := r.(string); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// RotateWebhookSecret gives an account a new signing secret and returns
// it, with the time until which the one it replaces still signs
// deliveries beside it (WebhookSecretOverlap from now; now if there was
// none). A secret rotated out earlier stops at once. An unknown account is
// *apperr.NotFoundError.
func (s *Store) RotateWebhookSecret(ctx context.Context, accountID string) (string, time.Time, error) {
	secret, err := webhook.NewSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	now := s.now()
	res, err := s.eval(ctx, rotateSecretScript, []string{accountKey(accountID), webhookSecretKey(accountID)},
		secret, now.UnixMilli(), now.Add(WebhookSecretOverlap).UnixMilli()).Slice()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("store: rotate the webhook secret of %s: %w", accountID, err)
	}
	if code, _ := res[0].(int64); code != 1 || len(res) != 2 {
		return "", time.Time{}, &apperr.NotFoundError{Kind: "account", ID: accountID}
	}
	until, _ := res[1].(int64)
	return secret, time.UnixMilli(until), nil
}

// HookState is where a webhook delivery stands.
type HookState string

// Delivery states.
const (
	// HookPending: due, not yet attempted.
	HookPending HookState = "pending"
	// HookRetrying: attempted, not delivered, to be tried again.
	HookRetrying HookState = "retrying"
	// HookDelivered: the receiver answered 2xx.
	HookDelivered HookState = "delivered"
	// HookFailed: given up (an answer not worth retrying, or every retry
	// used).
	HookFailed HookState = "failed"
)

// Final reports whether no more attempts follow.
func (s HookState) Final() bool { return s == HookDelivered || s == HookFailed }

// HookAttempt is one delivery attempt.
type HookAttempt struct {
	Time time.Time
	// StatusCode is the receiver's HTTP status, 0 if none (no answer).
	StatusCode int
	Latency    time.Duration
	// Error says why the attempt did not deliver, for the task's owner.
	Error string
}

// HookDelivery is the delivery of one event of a task.
type HookDelivery struct {
	Event string
	// Seq tells apart the progress events (their percent); 0 otherwise.
	Seq     int
	State   HookState
	Created time.Time
	// Attempts, oldest first.
	Attempts []HookAttempt
}

// WebhookLogTTL is how long the record of a task's deliveries is kept
// after its last change: longer than a delivery is retried.
const WebhookLogTTL = 48 * time.Hour

// Fields of a task's delivery log, per delivery ("<event>:<seq>"): its
// state and creation time, its attempts (one JSON object a line), and its
// message ("<url>\n<body>") while it is retried.
const (
	fHookState    = "s:"
	fHookAttempts = "a:"
	fHookMessage  = "m:"
)

func hookID(event string, seq int) string { return event + ":" + strconv.Itoa(seq) }

// outboxMember is a final event's entry in the account's outbox.
func outboxMember(taskID, event string) string { return taskID + "|" + event }

// KEYS: log, outbox. ARGV: delivery id, now, ttl, outbox member ("" for
// none).
var hookPendingScript = redis.NewScript(`
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
redis.call('HSETNX', KEYS[1], 's:' .. ARGV[1], 'pending ' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// HookQueued records that the delivery of a task's final event is queued:
// it leaves the account's outbox (see HooksDue) and is listed pending
// until its first attempt.
func (s *Store) HookQueued(ctx context.Context, accountID, taskID, event string) error {
	return s.hookPending(ctx, accountID, taskID, event, 0, outboxMember(taskID, event))
}

// HookPending lists the delivery of an event (a progress event: those
// never go through the outbox) pending until its first attempt.
func (s *Store) HookPending(ctx context.Context, accountID, taskID, event string, seq int) error {
	return s.hookPending(ctx, accountID, taskID, event, seq, "")
}

func (s *Store) hookPending(ctx context.Context, accountID, taskID, event string, seq int, member string) error {
	keys := []string{webhookLogKey(accountID, taskID), hooksKey(accountID)}
	if err := hookPendingScript.Run(ctx, s.rdb, keys, hookID(event, seq), s.now().UnixMilli(), WebhookLogTTL.Milliseconds(), member).Err(); err != nil {
		return fmt.Errorf("store: webhook %s of %s: %w", event, taskID, err)
	}
	return nil
}

// KEYS: log. ARGV: delivery id, state, now, attempt line, message ("" to
// keep the stored one), ttl. Returns 0 when the delivery had ended
// already (nothing recorded), 1 otherwise.
var hookAttemptScript = redis.NewScript(`
local id = ARGV[1]
local s = redis.call('HGET', KEYS[1], 's:' .. id)
local created = ARGV[3]
if s then
  local st, c = string.match(s, '^(%a+) (%d+)$')
  if st == 'delivered' or st == 'failed' then return 0 end
  if c then created = c end
end
redis.call('HSET', KEYS[1], 's:' .. id, ARGV[2] .. ' ' .. created)
local a = redis.call('HGET', KEYS[1], 'a:' .. id) or ''
redis.call('HSET', KEYS[1], 'a:' .. id, a .. ARGV[4])
if ARGV[2] == 'delivered' or ARGV[2] == 'failed' then
  redis.call('HDEL', KEYS[1], 'm:' .. id)
elseif ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'm:' .. id, ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
`)

// attemptLine is an attempt as the log keeps it.
type attemptLine struct {
	Time    int64  `json:"t"`
	Status  int    `json:"c,omitempty"`
	Latency int64  `json:"l"`
	Error   string `json:"e,omitempty"`
}

// HookMessage is what a delivery sends, kept from its first attempt so
// every retry sends the same message even once the task's record is gone.
type HookMessage struct {
	URL  string
	Body []byte
}

// RecordHookAttempt adds an attempt to a delivery and moves it to state;
// msg, when its URL is set, is kept for the retries (a final state drops
// it). It reports false, recording nothing, when the delivery had ended
// already (another attempt of a duplicate job ended it).
func (s *Store) RecordHookAttempt(ctx context.Context, accountID, taskID, event string, seq int, a HookAttempt, state HookState, msg HookMessage) (bool, error) {
	line, err := json.Marshal(attemptLine{Time: a.Time.UnixMilli(), Status: a.StatusCode, Latency: a.Latency.Milliseconds(), Error: a.Error})
	if err != nil {
		return false, err
	}
	var m string
	if msg.URL != "" {
		m = msg.URL + "\n" + string(msg.Body)
	}
	n, err := hookAttemptScript.Run(ctx, s.rdb, []string{webhookLogKey(accountID, taskID)},
		hookID(event, seq), string(state), s.now().UnixMilli(), string(line)+"\n", m, WebhookLogTTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("store: webhook %s of %s: %w", event, taskID, err)
	}
	return n == 1, nil
}

// HookMessageOf returns a delivery's state ("" if it was never listed)
// and the message kept for its retries (empty before its first attempt
// and once it has ended).
func (s *Store) HookMessageOf(ctx context.Context, accountID, taskID, event string, seq int) (HookState, HookMessage, error) {
	id := hookID(event, seq)
	v, err := s.rdb.HMGet(ctx, webhookLogKey(accountID, taskID), fHookState+id, fHookMessage+id).Result()
	if err != nil {
		return "", HookMessage{}, fmt.Errorf("store: webhook %s of %s: %w", event, taskID, err)
	}
	st, _ := v[0].(string)
	state, _, _ := strings.Cut(st, " ")
	var msg HookMessage
	if m, _ := v[1].(string); m != "" {
		u, body, _ := strings.Cut(m, "\n")
		msg = HookMessage{URL: u, Body: []byte(body)}
	}
	return HookState(state), msg, nil
}

// HookDeliveries returns the deliveries of a task's events, oldest first:
// those recorded, and the final events still waiting in the outbox to be
// queued (pending).
func (s *Store) HookDeliveries(ctx context.Context, accountID, taskID string) ([]HookDelivery, error) {
	finals := []string{task.EventCompleted, task.EventFailed, task.EventCanceled}
	var log *redis.MapStringStringCmd
	outbox := make([]*redis.FloatCmd, len(finals))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		log = p.HGetAll(ctx, webhookLogKey(accountID, taskID))
		for i, ev := range finals {
			outbox[i] = p.ZScore(ctx, hooksKey(accountID), outboxMember(taskID, ev))
		}
		return nil
	}); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("store: webhooks of %s: %w", taskID, err)
	}
	byID := map[string]*HookDelivery{}
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
			d = &HookDelivery{Event: event, Seq: seq, State: HookPending}
			byID[id] = d
		}
		switch kind + ":" {
		case fHookState:
			st, ms, _ := strings.Cut(v, " ")
			d.State = HookState(st)
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
				d.Created = time.UnixMilli(n)
			}
		case fHookAttempts:
			for _, line := range strings.Split(strings.TrimSuffix(v, "\n"), "\n") {
				var a attemptLine
				if json.Unmarshal([]byte(line), &a) != nil {
					continue
				}
				d.Attempts = append(d.Attempts, HookAttempt{Time: time.UnixMilli(a.Time), StatusCode: a.Status, Latency: time.Duration(a.Latency) * time.Millisecond, Error: a.Error})
			}
		}
	}
	for i, ev := range finals {
		id := hookID(ev, 0)
		if score, err := outbox[i].Result(); err == nil && byID[id] == nil {
			byID[id] = &HookDelivery{Event: ev, State: HookPending, Created: time.UnixMilli(int64(score))}
		}
	}
	out := make([]HookDelivery, 0, len(byID))
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

// HookDue is a final event of a task waiting in its account's outbox.
type HookDue struct {
	AccountID, TaskID, Event string
	// Due is when the task ended.
	Due time.Time
}

// HooksDue lists up to limit final events, across all accounts, that
// became due before before and are still in their account's outbox: the
// scripts that end a task put the event there, and queueing its delivery
// takes it off (HookQueued), so what stays there a while is an event whose
// queueing failed or never happened (its worker or gateway stopped).
func (s *Store) HooksDue(ctx context.Context, before time.Time, limit int64) ([]HookDue, error) {
	ids, due, err := s.dueByAccount(ctx, hooksKey, "("+strconv.FormatInt(before.UnixMilli(), 10), limit)
	if err != nil {
		return nil, fmt.Errorf("store: webhooks due: %w", err)
	}
	var out []HookDue
	for i, id := range ids {
		for _, z := range due[i] {
			m, _ := z.Member.(string)
			taskID, event, ok := strings.Cut(m, "|")
			if !ok {
				continue
			}
			out = append(out, HookDue{AccountID: id, TaskID: taskID, Event: event, Due: time.UnixMilli(int64(z.Score))})
			if int64(len(out)) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}
