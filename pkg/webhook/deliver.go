package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/tracing"
)

// Options configure a Client. Zero fields take the defaults.
type Options struct {
	// Policy is the egress policy every connection goes through, on the
	// address actually dialled.
	Policy egress.Policy
	// Timeout bounds an attempt, from dialling to the end of the response
	// headers and the little of the body read; default 10 s.
	Timeout time.Duration
	// ConnectTimeout bounds the connection (and TLS handshake); default
	// the smaller of 5 s and Timeout.
	ConnectTimeout time.Duration
	// Tracing, when on, makes a client span of each attempt and sends the
	// trace context (traceparent) with it; nil: off.
	Tracing *tracing.Tracing
}

// DefaultTimeout is an attempt's default time limit.
const DefaultTimeout = 10 * time.Second

// Client makes delivery attempts. It is safe for concurrent use.
type Client struct {
	http    *http.Client
	timeout time.Duration
	now     func() time.Time
}

// NewClient returns a client whose connections go through o.Policy, and
// which never follows a redirect.
func NewClient(o Options) *Client {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = min(5*time.Second, o.Timeout)
	}
	// MaxRedirects 0: a redirect is the receiver's answer, not a new place
	// to send the event to (and not a way around the egress policy).
	hc := egress.NewClient(o.Policy, egress.ClientOptions{
		Timeout:        o.Timeout,
		ConnectTimeout: o.ConnectTimeout,
		MaxIdleConns:   100,
		MaxRedirects:   0,
	})
	if o.Tracing != nil && o.Tracing.Enabled() {
		// Over the egress transport, whose dialer checks every address.
		hc.Transport = tracing.ChildTransport(hc.Transport, o.Tracing)
	}
	return &Client{http: hc, timeout: o.Timeout, now: time.Now}
}

// Message is a signed delivery: Sign's header for ID, Timestamp and Body.
type Message struct {
	ID        string
	Timestamp time.Time
	Signature string
	Body      []byte
}

// NewMessage signs body as message id at ts with every secret.
func NewMessage(secrets []string, id string, ts time.Time, body []byte) (Message, error) {
	sig, err := Sign(secrets, id, ts, body)
	if err != nil {
		return Message{}, err
	}
	return Message{ID: id, Timestamp: ts, Signature: sig, Body: body}, nil
}

// Outcome is what an attempt's result means for the delivery.
type Outcome int

// Outcomes.
const (
	// Delivered: the receiver answered 2xx.
	Delivered Outcome = iota
	// Retry: no answer in time, no connection, 429 or 5xx; try again
	// later.
	Retry
	// GiveUp: an answer that another attempt would not change (3xx, other
	// 4xx), or a URL that cannot be delivered to (an address the egress
	// policy refuses).
	GiveUp
)

func (o Outcome) String() string {
	switch o {
	case Delivered:
		return "delivered"
	case Retry:
		return "retry"
	case GiveUp:
		return "give_up"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is one attempt.
type Result struct {
	Outcome Outcome
	// StatusCode is the receiver's HTTP status; 0 when there was none.
	StatusCode int
	// Latency is from the start of the attempt to the response headers
	// (or the failure).
	Latency time.Duration
	// Error says why the attempt did not deliver, for the task's owner;
	// "" when it did.
	Error string
	// RetryAfter is the receiver's Retry-After (429, 503), 0 if none.
	RetryAfter time.Duration
}

// maxBody is the most of a response's body read (and thrown away), so the
// connection can be used again.
const maxBody = 64 << 10

// Send posts m to rawURL once.
func (c *Client) Send(ctx context.Context, rawURL string, m Message) Result {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Result{Outcome: GiveUp, Error: "the callback URL is not an http or https URL"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(m.Body))
	if err != nil {
		return Result{Outcome: GiveUp, Error: "the callback URL is not valid"}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", UserAgent)
	h.Set(HeaderID, m.ID)
	h.Set(HeaderTimestamp, strconv.FormatInt(m.Timestamp.Unix(), 10))
	h.Set(HeaderSignature, m.Signature)
	start := c.now()
	resp, err := c.http.Do(req)
	latency := c.now().Sub(start)
	if err != nil {
		out, why := c.describe(err)
		return Result{Outcome: out, Latency: latency, Error: why}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	_ = resp.Body.Close()
	r := Result{StatusCode: resp.StatusCode, Latency: latency}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		r.Outcome = Delivered
	case code == http.StatusTooManyRequests || code >= 500:
		r.Outcome, r.Error = Retry, fmt.Sprintf("the receiver answered HTTP %d", code)
		r.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), c.now())
	case code >= 300 && code < 400:
		r.Outcome, r.Error = GiveUp, fmt.Sprintf("the receiver answered HTTP %d (redirects are not followed)", code)
	default:
		r.Outcome, r.Error = GiveUp, fmt.Sprintf("the receiver answered HTTP %d", code)
	}
	return r
}

// describe classifies a failed exchange and says why it failed, without
// internal detail.
func (c *Client) describe(err error) (Outcome, string) {
	var refused *egress.RefusedError
	var netErr net.Error
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &refused):
		return GiveUp, "the callback URL's address is not allowed (" + refused.Why + ")"
	case errors.Is(err, context.Canceled):
		return Retry, "the attempt was interrupted"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return Retry, fmt.Sprintf("no response within %s", c.timeout)
	case errors.As(err, &dnsErr):
		return Retry, "the callback URL's host name could not be resolved"
	}
	return Retry, "the connection failed"
}

// maxRetryAfter bounds the Retry-After a receiver may ask for.
const maxRetryAfter = DefaultMax

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		switch {
		case n <= 0:
			return 0
		case n >= int(maxRetryAfter/time.Second):
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}
