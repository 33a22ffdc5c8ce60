package egress

import (
	"errors"
	"net"
	"net/http"
	"time"
)

// ClientOptions configure NewClient. Zero fields take the defaults.
type ClientOptions struct {
	// Timeout bounds a whole exchange (every hop of it, with the body) and
	// the wait for the response headers; default 30 s.
	Timeout time.Duration
	// ConnectTimeout bounds a connection and its TLS handshake; default
	// the smaller of 5 s and Timeout.
	ConnectTimeout time.Duration
	// MaxIdleConns bounds the idle connections kept, across hosts;
	// default 100. At most 4 are kept per host, for 30 s.
	MaxIdleConns int
	// MaxRedirects is how many redirects are followed. 0 follows none: a
	// redirect is returned as the response. Above 0, each hop must be
	// http or https (else ErrRedirectScheme), and its connection goes
	// through the policy like the first; one more hop than MaxRedirects
	// fails with ErrTooManyRedirects.
	MaxRedirects int
}

// Defaults of ClientOptions.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultMaxIdleConns   = 100

	maxIdleConnsPerHost = 4
	idleConnTimeout     = 30 * time.Second
)

// Redirect errors of a client from NewClient (in the *url.Error of Do).
var (
	ErrTooManyRedirects = errors.New("too many redirects")
	ErrRedirectScheme   = errors.New("redirect to a scheme other than http or https")
)

// NewClient returns the HTTP client for requests to URLs users give
// (source images, webhook callbacks): every connection, redirects included,
// goes through p on the address actually dialled, and never through a proxy
// (which would hide the real destination from the policy, so the
// environment's proxy settings are ignored).
func NewClient(p Policy, o ClientOptions) *http.Client {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = min(DefaultConnectTimeout, o.Timeout)
	}
	if o.MaxIdleConns <= 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	dialer := p.Dialer(&net.Dialer{Timeout: o.ConnectTimeout})
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   o.ConnectTimeout,
		ResponseHeaderTimeout: o.Timeout,
		MaxIdleConns:          o.MaxIdleConns,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
		IdleConnTimeout:       idleConnTimeout,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport:     transport,
		Timeout:       o.Timeout,
		CheckRedirect: checkRedirect(o.MaxRedirects),
	}
}

// checkRedirect is the redirect policy of a client following at most n
// redirects.
func checkRedirect(n int) func(*http.Request, []*http.Request) error {
	if n <= 0 {
		return func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > n {
			return ErrTooManyRedirects
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return ErrRedirectScheme
		}
		return nil
	}
}
