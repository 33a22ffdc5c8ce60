package api_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/easelhq/easel/pkg/jobs"
)

// The access line of every request carries the status the client received,
// at warn for server errors: wrong keys, wrong admin tokens, disabled
// accounts, 404s and 503s were all logged as 200.
func TestAccessLogStatus(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	queueDown := false
	e := newEnvLogged(t, queueFunc(func(ctx context.Context, j jobs.Ref, run string) error {
		if queueDown {
			return errors.New("connection refused")
		}
		return nil
	}), zap.New(core))
	tests := []struct {
		name   string
		do     func() reply
		status int
		level  zapcore.Level
	}{
		{"created", func() reply { return e.Create(e.KeyA, okBody) }, 200, zapcore.InfoLevel},
		{"wrong key", func() reply { return e.Create("esk_wrongwrongwrongwrongwrongwrongwrongwrong", okBody) }, 401, zapcore.InfoLevel},
		{"no key", func() reply { return e.Do("GET", "/v1/task/query?task_id=task_lumen_1", nil, "") }, 401, zapcore.InfoLevel},
		{"disabled account", func() reply { return e.Create(e.KeyOff, okBody) }, 403, zapcore.InfoLevel},
		{"unknown task", func() reply { return e.Query(e.KeyA, "task_lumen_1") }, 404, zapcore.InfoLevel},
		{"unknown route", func() reply { return e.Do("GET", "/v2/nothing", nil, "") }, 404, zapcore.InfoLevel},
		{"wrong admin token", func() reply {
			return e.Do("GET", "/admin/v1/accounts", map[string]string{"Authorization": "Bearer not-the-token-0123456789abcdef0123"}, "")
		}, 401, zapcore.InfoLevel},
		{"queue down", func() reply { queueDown = true; defer func() { queueDown = false }(); return e.Create(e.KeyA, okBody) }, 503, zapcore.WarnLevel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs.TakeAll()
			r := tt.do()
			if r.Status != tt.status {
				t.Fatalf("status %d; want %d (%s)", r.Status, tt.status, r.Body)
			}
			var lines []observer.LoggedEntry
			for _, l := range logs.TakeAll() {
				if l.Message == "request" {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 {
				t.Fatalf("%d access lines; want 1", len(lines))
			}
			got := lines[0].ContextMap()
			if got["status"] != int64(tt.status) || lines[0].Level != tt.level {
				t.Errorf("access line status %v at %s; want %d at %s", got["status"], lines[0].Level, tt.status, tt.level)
			}
			if got["request_id"] != r.Header.Get("X-Request-Id") || got["request_id"] == "" { // no client id sent
				t.Errorf("access line request_id %v; X-Request-Id %q", got["request_id"], r.Header.Get("X-Request-Id"))
			}
		})
	}
}

// A client's X-Request-Id is accepted (echoed, and logged beside the
// server's own id) only if it is short and of safe characters; otherwise the
// response carries the server's id and the client's is neither echoed nor
// logged.
func TestClientRequestID(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	e := newEnvLogged(t, nil, zap.New(core))
	tests := []struct {
		name, sent string
		logged     bool
	}{
		{"a short safe id", "client-req_42:abc.7", true},
		{"too long", strings.Repeat("a", 60_000), false},
		{"unsafe characters", `abc"}<script>`, false},
		{"spaces", "a b", false},
		{"none", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs.TakeAll()
			hdr := map[string]string{"Authorization": "Bearer " + e.KeyA}
			if tt.sent != "" {
				hdr["X-Request-Id"] = tt.sent
			}
			r := e.Do("GET", "/v1/task/query?task_id=task_lumen_1", hdr, "")
			echoed := r.Header.Get("X-Request-Id")
			if tt.logged && echoed != tt.sent || !tt.logged && len(echoed) != 24 {
				t.Errorf("X-Request-Id %.80q; want the client's if accepted, else the server's 24-hex id", echoed)
			}
			var line map[string]any
			for _, l := range logs.TakeAll() {
				if l.Message == "request" {
					line = l.ContextMap()
				}
			}
			if line == nil {
				t.Fatal("no access line")
			}
			if sid, _ := line["request_id"].(string); len(sid) != 24 || sid == tt.sent {
				t.Errorf("request_id %v; want the server's own id, always", line["request_id"])
			}
			if !tt.logged && line["request_id"] != echoed {
				t.Errorf("request_id %v; want the echoed %s", line["request_id"], echoed)
			}
			cid, has := line["client_request_id"]
			if has != tt.logged || (has && cid != tt.sent) {
				t.Errorf("client_request_id %v (logged %v); want logged %v", cid, has, tt.logged)
			}
		})
	}
}
