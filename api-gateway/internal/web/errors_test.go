package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/redisconn"
)

// A dependency that does not answer in time, or at all, is 503 (its
// Retry-After set by the error handler), never 500, whichever layer the
// error came up through uncoded; a bug stays 500.
func TestClassifyDependencyFailures(t *testing.T) {
	for _, tt := range []struct {
		name   string
		err    error
		status int
	}{
		{"a deadline, wrapped", fmt.Errorf("save session: %w", context.DeadlineExceeded), http.StatusServiceUnavailable},
		{"a network timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, http.StatusServiceUnavailable},
		{"a refused connection", fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), http.StatusServiceUnavailable},
		{"a full connection pool", fmt.Errorf("users: %w", redis.ErrPoolTimeout), http.StatusServiceUnavailable},
		{"a reply not awaited", redisconn.ErrAbandoned, http.StatusServiceUnavailable},
		{"a coded error keeps its code", apperr.New(apperr.Invalid, "bad"), http.StatusBadRequest},
		{"a bug", errors.New("nil map"), http.StatusInternalServerError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := Classify(tt.err)
			if status != tt.status {
				t.Errorf("Classify(%v) = %d %q; want %d", tt.err, status, msg, tt.status)
			}
			if status == http.StatusServiceUnavailable && msg != "the service is busy, try again" {
				t.Errorf("message %q", msg)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
