package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// A start-up step is tried again while Redis does not answer, and only
// then: any other error, or the time up, ends it.
func TestRetry(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: &timeoutErr{}}
	refused := errors.New("ERR wrong number of arguments")
	tests := []struct {
		name      string
		fails     []error // the step's errors, in order; then it succeeds
		within    time.Duration
		wantTries int
		wantErr   string // "" for success
	}{
		{"answers at once", nil, time.Second, 1, ""},
		{"a read timeout, then an answer", []error{timeout}, 5 * time.Second, 2, ""},
		{"a full pool and a deadline, then an answer", []error{redis.ErrPoolTimeout, context.DeadlineExceeded}, 5 * time.Second, 3, ""},
		{"an error of the request is not tried again", []error{refused, nil}, 5 * time.Second, 1, "wrong number of arguments"},
		{"Redis down past the timeout", []error{timeout, timeout, timeout, timeout, timeout, timeout, timeout, timeout}, 250 * time.Millisecond, 0, "seed: Redis did not answer within 250ms (EASEL_REDIS_START_TIMEOUT)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tries := 0
			err := Retry(context.Background(), tt.within, zap.NewNop(), "seed", func(context.Context) error {
				tries++
				if tries <= len(tt.fails) {
					return tt.fails[tries-1]
				}
				return nil
			})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err %v; want %q", err, tt.wantErr)
			}
			if tt.wantTries > 0 && tries != tt.wantTries {
				t.Errorf("%d tries; want %d", tries, tt.wantTries)
			}
			if tt.wantTries == 0 && (tries < 2 || tries >= len(tt.fails)) {
				t.Errorf("%d tries within %v; want a few, backing off from 100 ms", tries, tt.within)
			}
		})
	}
}

func TestDown(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("store: index account: %w", &net.OpError{Op: "read", Net: "tcp", Err: &timeoutErr{}}), true},
		{redis.ErrPoolTimeout, true},
		{redis.ErrClosed, true},
		{errors.New("NOSCRIPT No matching script"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := Down(tt.err); got != tt.want {
			t.Errorf("Down(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}

type timeoutErr struct{}

func (*timeoutErr) Error() string   { return "i/o timeout" }
func (*timeoutErr) Timeout() bool   { return true }
func (*timeoutErr) Temporary() bool { return true }
