package webhook

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/tools/testkit/localnet"
)

// receiver is a test endpoint that records what it got and answers with
// handle.
type receiver struct {
	srv      *httptest.Server
	hits     atomic.Int32
	header   atomic.Value // http.Header
	body     atomic.Value // []byte
	redirect atomic.Int32 // hits on /elsewhere
}

func newReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			rc.redirect.Add(1)
			return
		}
		rc.hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		rc.header.Store(r.Header.Clone())
		rc.body.Store(b)
		handle(w, r)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func status(code int, hdr ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, strings.Repeat("x", 100))
	}
}

func message(t *testing.T, secret string) Message {
	t.Helper()
	m, err := NewMessage([]string{secret}, "msg_task_1_completed", time.Now(), []byte(`{"type":"task.completed"}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSendOutcomes(t *testing.T) {
	secret, _ := NewSecret()
	tests := []struct {
		name       string
		handle     func(http.ResponseWriter, *http.Request)
		outcome    Outcome
		code       int
		errHas     string
		retryAfter time.Duration
	}{
		{"200", status(200), Delivered, 200, "", 0},
		{"204", status(204), Delivered, 204, "", 0},
		{"202", status(202), Delivered, 202, "", 0},
		{"500", status(500), Retry, 500, "HTTP 500", 0},
		{"502", status(502), Retry, 502, "HTTP 502", 0},
		{"503 with Retry-After", status(503, "Retry-After", "30"), Retry, 503, "HTTP 503", 30 * time.Second},
		{"429 with Retry-After", status(429, "Retry-After", "7"), Retry, 429, "HTTP 429", 7 * time.Second},
		{"429 asking for days", status(429, "Retry-After", "999999999999"), Retry, 429, "HTTP 429", DefaultMax},
		{"429 with a date", status(429, "Retry-After", "garbage"), Retry, 429, "HTTP 429", 0},
		{"400", status(400), GiveUp, 400, "HTTP 400", 0},
		{"401", status(401), GiveUp, 401, "HTTP 401", 0},
		{"404", status(404), GiveUp, 404, "HTTP 404", 0},
		{"408 is another 4xx", status(408), GiveUp, 408, "HTTP 408", 0},
		{"410", status(410), GiveUp, 410, "HTTP 410", 0},
		{"301 not followed", status(301), GiveUp, 301, "redirects are not followed", 0},
		{"307 not followed", status(307), GiveUp, 307, "redirects are not followed", 0},
		{"no answer in time", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}, Retry, 0, "no response within 200ms", 0},
	}
	c := NewClient(Options{Policy: egress.Policy{AllowPrivate: true}, Timeout: 200 * time.Millisecond})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, tt.handle)
			m := message(t, secret)
			r := c.Send(context.Background(), rc.srv.URL+"/hook?a=1", m)
			if r.Outcome != tt.outcome || r.StatusCode != tt.code || !strings.Contains(r.Error, tt.errHas) || (tt.errHas == "" && r.Error != "") || r.RetryAfter != tt.retryAfter {
				t.Errorf("Send = %+v; want outcome %v, status %d, error with %q, retry after %v", r, tt.outcome, tt.code, tt.errHas, tt.retryAfter)
			}
			if r.Latency <= 0 {
				t.Errorf("latency %v", r.Latency)
			}
			if n := rc.hits.Load(); n != 1 {
				t.Fatalf("%d requests reached the receiver; want 1", n)
			}
			if n := rc.redirect.Load(); n != 0 {
				t.Errorf("the redirect was followed (%d requests)", n)
			}
			h := rc.header.Load().(http.Header)
			if h.Get("Content-Type") != "application/json" || h.Get("User-Agent") != UserAgent || h.Get(HeaderID) != m.ID {
				t.Errorf("headers %v", h)
			}
			if err := Verify(secret, h, rc.body.Load().([]byte), time.Now()); err != nil {
				t.Errorf("the delivery does not verify: %v", err)
			}
		})
	}
}

func TestRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := retryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now); got != 90*time.Second {
		t.Errorf("retryAfter(date) = %v", got)
	}
	if got := retryAfter(now.Add(-time.Hour).Format(http.TimeFormat), now); got != 0 {
		t.Errorf("retryAfter(past date) = %v", got)
	}
}

// The egress policy applies to the address dialled: a loopback receiver
// is refused (and never reached) unless the policy allows it, and such a
// refusal is not retried.
func TestSendEgress(t *testing.T) {
	secret, _ := NewSecret()
	rc := newReceiver(t, status(200))
	_, port, _ := net.SplitHostPort(rc.srv.Listener.Addr().String())
	tests := []struct {
		name    string
		policy  egress.Policy
		url     string
		outcome Outcome
		errHas  string
	}{
		{"loopback refused", egress.Policy{Ports: []int{80, 443, atoi(port)}}, rc.srv.URL, GiveUp, "not allowed (a loopback address)"},
		{"a name resolving to loopback refused", egress.Policy{Ports: []int{80, 443, atoi(port)}}, "http://localhost:" + port + "/", GiveUp, "not allowed (a loopback address)"},
		{"port refused", egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, rc.srv.URL, GiveUp, "port " + port},
		{"loopback allowed by a range", egress.Policy{Ports: []int{atoi(port)}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, rc.srv.URL, Delivered, ""},
		{"not http", egress.Policy{AllowPrivate: true}, "ftp://example.com/x", GiveUp, "not an http or https URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := rc.hits.Load()
			r := NewClient(Options{Policy: tt.policy, Timeout: time.Second}).Send(context.Background(), tt.url, message(t, secret))
			if r.Outcome != tt.outcome || !strings.Contains(r.Error, tt.errHas) {
				t.Errorf("Send = %+v; want %v with %q", r, tt.outcome, tt.errHas)
			}
			reached := rc.hits.Load() - before
			if (tt.outcome == Delivered) != (reached == 1) {
				t.Errorf("%d requests reached the receiver", reached)
			}
		})
	}
}

func TestSendConnectionRefused(t *testing.T) {
	addr := localnet.ClosedAddr(t)
	secret, _ := NewSecret()
	r := NewClient(Options{Policy: egress.Policy{AllowPrivate: true}, Timeout: time.Second}).Send(context.Background(), "http://"+addr+"/", message(t, secret))
	if r.Outcome != Retry || r.StatusCode != 0 || r.Error != "the connection failed" {
		t.Errorf("Send = %+v; want a retry for a refused connection", r)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
