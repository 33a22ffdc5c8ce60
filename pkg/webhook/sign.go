// Package webhook delivers tasks' webhook events as the Standard Webhooks
// specification (https://www.standardwebhooks.com) has them: a signed POST
// of a JSON body, the headers webhook-id, webhook-timestamp and
// webhook-signature ("v1,<base64 HMAC-SHA256>"), retried with exponential
// backoff and jitter on timeouts, connection errors, 429 and 5xx.
//
// It holds the signing (secrets, signatures and their verification), one
// delivery attempt through the egress policy (Client), and the retry
// schedule (Schedule). Where deliveries are queued and recorded is the
// worker's and the store's business.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// Headers of a delivery.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// UserAgent is the User-Agent of every delivery.
const UserAgent = "Easel-Webhooks/1.0"

// SecretPrefix starts every signing secret; the HMAC key is the base64
// after it.
const SecretPrefix = "whsec_"

// secretBytes is the length of a secret's key.
const secretBytes = 32

// NewSecret returns a new signing secret: "whsec_" and the standard base64
// of 32 random bytes.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook: secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// Key returns a secret's HMAC key: the base64 after "whsec_" decoded.
func Key(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New("webhook: a signing secret starts with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return nil, errors.New("webhook: a signing secret is " + SecretPrefix + " and base64")
	}
	return key, nil
}

// signedContent is what a signature covers: "<id>.<timestamp>.<body>".
func signedContent(id string, ts int64, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(body)+22)
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, '.')
	return append(b, body...)
}

func mac(key []byte, content []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(content)
	return h.Sum(nil)
}

// Sign returns the webhook-signature header of a message: one
// "v1,<base64 HMAC-SHA256>" per secret, space-separated (several while a
// rotated-out secret is still valid).
func Sign(secrets []string, id string, ts time.Time, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", errors.New("webhook: no signing secret")
	}
	content := signedContent(id, ts.Unix(), body)
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		key, err := Key(s)
		if err != nil {
			return "", err
		}
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac(key, content))
	}
	return strings.Join(sigs, " "), nil
}

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock (Verify): the specification's replay protection.
const DefaultTolerance = 5 * time.Minute

// Verification errors.
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("webhook: timestamp too old, too new or not a number")
	ErrSignature      = errors.New("webhook: no matching signature")
)

// Verify checks a delivery as a receiver does: its timestamp is within
// DefaultTolerance of now, and one of its v1 signatures is the HMAC of
// "<id>.<timestamp>.<body>" under secret.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	if d := now.Sub(time.Unix(ts, 0)); d > DefaultTolerance || d < -DefaultTolerance {
		return ErrTimestamp
	}
	key, err := Key(secret)
	if err != nil {
		return err
	}
	want := []byte(base64.StdEncoding.EncodeToString(mac(key, signedContent(id, ts, body))))
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if ok && version == "v1" && subtle.ConstantTimeCompare([]byte(sig), want) == 1 {
			return nil
		}
	}
	return ErrSignature
}

// MessageID is the webhook-id of an event of a task: "msg_<task
// id>_<event>", the event without its "task." ("completed", "failed",
// "canceled"), and a progress event's seq after it ("progress_40"). Every
// attempt of one event carries the same id, so a receiver can drop
// repeats.
func MessageID(taskID, event string, seq int) string {
	suffix := strings.TrimPrefix(event, "task.")
	if event == task.EventProgress {
		suffix += "_" + strconv.Itoa(seq)
	}
	return "msg_" + taskID + "_" + suffix
}

// Payload is a delivery's body.
type Payload struct {
	// Type is the event type (task.Event*).
	Type string `json:"type"`
	// Timestamp is when the event happened, RFC 3339.
	Timestamp string `json:"timestamp"`
	// Data is the task record (taskview.Record).
	Data any `json:"data"`
}

// Body returns the body of an event that happened at at.
func Body(event string, at time.Time, data any) ([]byte, error) {
	b, err := json.Marshal(Payload{Type: event, Timestamp: at.UTC().Format(time.RFC3339Nano), Data: data})
	if err != nil {
		return nil, fmt.Errorf("webhook: body: %w", err)
	}
	return b, nil
}
