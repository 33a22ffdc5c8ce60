package webhook

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

// The specification's published test vector: a receiver's Standard
// Webhooks library must accept what Easel sends.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = 1614265330
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignTestVector(t *testing.T) {
	got, err := Sign([]string{vecSecret}, vecID, time.Unix(vecTS, 0), []byte(vecBody))
	if err != nil || got != vecSig {
		t.Fatalf("Sign = %q, %v; want %q", got, err, vecSig)
	}
}

func TestSignSeveralSecrets(t *testing.T) {
	other, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Sign([]string{other, vecSecret}, vecID, time.Unix(vecTS, 0), []byte(vecBody))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(got, " ")
	if len(parts) != 2 || parts[1] != vecSig || !strings.HasPrefix(parts[0], "v1,") || parts[0] == vecSig {
		t.Errorf("Sign = %q; want two space-separated v1 signatures, the second %q", got, vecSig)
	}
	if _, err := Sign(nil, vecID, time.Now(), nil); err == nil {
		t.Error("Sign with no secret: no error")
	}
	if _, err := Sign([]string{"not-a-secret"}, vecID, time.Now(), nil); err == nil {
		t.Error("Sign with a malformed secret: no error")
	}
}

func TestNewSecret(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSecret()
	if a == b || !strings.HasPrefix(a, SecretPrefix) {
		t.Fatalf("secrets %q, %q", a, b)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, SecretPrefix))
	if err != nil || len(raw) != 32 {
		t.Errorf("secret %q: %d bytes, %v; want 32 bytes of base64", a, len(raw), err)
	}
	key, err := Key(a)
	if err != nil || string(key) != string(raw) {
		t.Errorf("Key(%q) = %x, %v", a, key, err)
	}
	for _, bad := range []string{"", "whsec_", "whsec_***", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		if _, err := Key(bad); err == nil {
			t.Errorf("Key(%q): no error", bad)
		}
	}
}

func headers(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	if id != "" {
		h.Set(HeaderID, id)
	}
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	if sig != "" {
		h.Set(HeaderSignature, sig)
	}
	return h
}

func TestVerify(t *testing.T) {
	now := time.Unix(vecTS, 0)
	rotated, _ := NewSecret()
	both, _ := Sign([]string{rotated, vecSecret}, vecID, now, []byte(vecBody))
	tests := []struct {
		name   string
		secret string
		h      http.Header
		body   string
		now    time.Time
		want   error
	}{
		{"the vector", vecSecret, headers(vecID, vecTS, vecSig), vecBody, now, nil},
		{"one of several signatures", vecSecret, headers(vecID, vecTS, "v1,bm9wZQ== "+vecSig), vecBody, now, nil},
		{"signed with the new and the old secret: the old one verifies", vecSecret, headers(vecID, vecTS, both), vecBody, now, nil},
		{"... and so does the new one", rotated, headers(vecID, vecTS, both), vecBody, now, nil},
		{"within the tolerance", vecSecret, headers(vecID, vecTS, vecSig), vecBody, now.Add(4 * time.Minute), nil},
		{"body changed", vecSecret, headers(vecID, vecTS, vecSig), `{"test": 2432232315}`, now, ErrSignature},
		{"id changed", vecSecret, headers(vecID+"x", vecTS, vecSig), vecBody, now, ErrSignature},
		{"another secret", rotated, headers(vecID, vecTS, vecSig), vecBody, now, ErrSignature},
		{"another version", vecSecret, headers(vecID, vecTS, "v2,"+strings.TrimPrefix(vecSig, "v1,")), vecBody, now, ErrSignature},
		{"too old", vecSecret, headers(vecID, vecTS, vecSig), vecBody, now.Add(6 * time.Minute), ErrTimestamp},
		{"from the future", vecSecret, headers(vecID, vecTS, vecSig), vecBody, now.Add(-6 * time.Minute), ErrTimestamp},
		{"no signature", vecSecret, headers(vecID, vecTS, ""), vecBody, now, ErrMissingHeaders},
		{"no id", vecSecret, headers("", vecTS, vecSig), vecBody, now, ErrMissingHeaders},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Verify(tt.secret, tt.h, []byte(tt.body), tt.now); !errors.Is(err, tt.want) {
				t.Errorf("Verify = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestMessageID(t *testing.T) {
	tests := []struct {
		event string
		seq   int
		want  string
	}{
		{task.EventCompleted, 0, "msg_task_lumen_1_completed"},
		{task.EventFailed, 0, "msg_task_lumen_1_failed"},
		{task.EventCanceled, 0, "msg_task_lumen_1_canceled"},
		{task.EventProgress, 40, "msg_task_lumen_1_progress_40"},
	}
	for _, tt := range tests {
		if got := MessageID("task_lumen_1", tt.event, tt.seq); got != tt.want {
			t.Errorf("MessageID(%s, %d) = %q; want %q", tt.event, tt.seq, got, tt.want)
		}
	}
}

func TestBody(t *testing.T) {
	at := time.Date(2026, 11, 22, 15, 39, 10, 49_000_000, time.FixedZone("x", 3600))
	b, err := Body(task.EventCompleted, at, map[string]any{"task_id": "t1"})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Type      string         `json:"type"`
		Timestamp string         `json:"timestamp"`
		Data      map[string]any `json:"data"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "task.completed" || p.Timestamp != "2026-11-22T14:39:10.049Z" || p.Data["task_id"] != "t1" {
		t.Errorf("body %s", b)
	}
}
