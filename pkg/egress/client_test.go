package egress

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A client from NewClient connects only where the policy allows, on the
// address actually dialled (a name resolving to loopback included), on every
// hop of a redirect, and follows redirects as MaxRedirects says.
func TestNewClient(t *testing.T) {
	var okHits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			okHits.Add(1)
			w.WriteHeader(http.StatusOK)
		case "/to-ok":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/to-to-ok":
			http.Redirect(w, r, "/to-ok", http.StatusFound)
		case "/to-ftp":
			http.Redirect(w, r, "ftp://example.com/a.png", http.StatusFound)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/to-private":
			http.Redirect(w, r, "http://10.0.0.1/", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	// strict allows the test server's port, not its loopback address.
	strict := Policy{Ports: []int{80, 443, port}}
	// open allows the test server (its address and port) and port 80, so a
	// refusal of another address is for the address alone.
	open := Policy{Ports: []int{80, port}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	local := "http://localhost:" + u.Port()

	tests := []struct {
		name         string
		policy       Policy
		maxRedirects int
		url          string
		refused      string // substring of RefusedError.Why; "" for none
		err          error  // a redirect error; nil for none
		status       int    // the response's status, when no error
		okHits       int64  // requests /ok gets
	}{
		// Refused addresses, literal or after DNS, redirects or not.
		{"loopback", strict, 0, srv.URL + "/ok", "loopback", nil, 0, 0},
		{"loopback, following redirects", strict, 3, srv.URL + "/ok", "loopback", nil, 0, 0},
		{"a name resolving to loopback", strict, 0, local + "/ok", "loopback", nil, 0, 0},
		{"a name resolving to loopback, following redirects", strict, 3, local + "/ok", "loopback", nil, 0, 0},
		{"IPv6 loopback", strict, 0, "http://[::1]:" + u.Port() + "/ok", "loopback", nil, 0, 0},
		{"unspecified", strict, 0, "http://0.0.0.0:" + u.Port() + "/ok", "unspecified", nil, 0, 0},
		{"metadata", strict, 0, "http://169.254.169.254/latest/meta-data/", "link-local", nil, 0, 0},
		{"metadata, IPv4-mapped", strict, 0, "http://[::ffff:169.254.169.254]/latest/meta-data/", "link-local", nil, 0, 0},
		{"private", strict, 3, "http://10.0.0.1/", "private", nil, 0, 0},
		{"port", Policy{Allow: open.Allow}, 0, srv.URL + "/ok", "port " + u.Port(), nil, 0, 0},
		// Allowed, and the redirect policy.
		{"allowed", open, 0, srv.URL + "/ok", "", nil, http.StatusOK, 1},
		{"allowed by AllowPrivate, by name", Policy{AllowPrivate: true}, 0, local + "/ok", "", nil, http.StatusOK, 1},
		{"no redirects: the redirect is the answer", open, 0, srv.URL + "/to-ok", "", nil, http.StatusFound, 0},
		{"no redirects: a redirect to metadata is not followed", open, 0, srv.URL + "/to-metadata", "", nil, http.StatusFound, 0},
		{"one redirect followed", open, 1, srv.URL + "/to-ok", "", nil, http.StatusOK, 1},
		{"two redirects followed", open, 2, srv.URL + "/to-to-ok", "", nil, http.StatusOK, 1},
		{"too many redirects", open, 1, srv.URL + "/to-to-ok", "", ErrTooManyRedirects, 0, 0},
		{"redirect to ftp", open, 3, srv.URL + "/to-ftp", "", ErrRedirectScheme, 0, 0},
		{"redirect to metadata: checked on the hop", open, 3, srv.URL + "/to-metadata", "link-local", nil, 0, 0},
		{"redirect to private: checked on the hop", open, 3, srv.URL + "/to-private", "private", nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			okHits.Store(0)
			c := NewClient(tt.policy, ClientOptions{Timeout: 5 * time.Second, MaxRedirects: tt.maxRedirects})
			defer c.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, tt.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			var refused *RefusedError
			switch {
			case tt.refused != "":
				if !errors.As(err, &refused) || !strings.Contains(refused.Why, tt.refused) {
					t.Fatalf("GET %s: %v; want refused as %q", tt.url, err, tt.refused)
				}
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("GET %s: %v; want %v", tt.url, err, tt.err)
				}
			case err != nil:
				t.Fatalf("GET %s: %v", tt.url, err)
			case resp.StatusCode != tt.status:
				t.Fatalf("GET %s: HTTP %d; want %d", tt.url, resp.StatusCode, tt.status)
			}
			if got := okHits.Load(); got != tt.okHits {
				t.Errorf("GET %s: /ok got %d requests; want %d", tt.url, got, tt.okHits)
			}
		})
	}
}

// The environment's proxy is never used: a proxy would connect in the
// client's place, out of the policy's sight.
func TestNewClientNoProxy(t *testing.T) {
	var proxied atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	c := NewClient(Policy{AllowPrivate: true}, ClientOptions{Timeout: 5 * time.Second})
	if tr, ok := c.Transport.(*http.Transport); !ok || tr.Proxy != nil {
		t.Fatalf("transport %T with a proxy function; want an *http.Transport without", c.Transport)
	}
	// A name only the proxy could answer for: without the proxy it does
	// not resolve.
	resp, err := c.Get("http://no-such-host.invalid/a.png")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("GET through the environment's proxy: HTTP %d; want a failure to resolve", resp.StatusCode)
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("the proxy got %d requests; want none", n)
	}
}

// The options and their defaults reach the transport and the client.
func TestNewClientOptions(t *testing.T) {
	tests := []struct {
		name                 string
		o                    ClientOptions
		timeout, connect     time.Duration
		maxIdle              int
		followsRedirect      bool
		maxRedirectsFollowed int
	}{
		{"defaults", ClientOptions{}, DefaultTimeout, DefaultConnectTimeout, DefaultMaxIdleConns, false, 0},
		{"connect timeout no longer than the timeout", ClientOptions{Timeout: 2 * time.Second}, 2 * time.Second, 2 * time.Second, DefaultMaxIdleConns, false, 0},
		{"set", ClientOptions{Timeout: 10 * time.Second, ConnectTimeout: time.Second, MaxIdleConns: 64, MaxRedirects: 3}, 10 * time.Second, time.Second, 64, true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewClient(Policy{}, tt.o)
			tr := c.Transport.(*http.Transport)
			if c.Timeout != tt.timeout || tr.ResponseHeaderTimeout != tt.timeout {
				t.Errorf("timeouts %s, %s; want %s", c.Timeout, tr.ResponseHeaderTimeout, tt.timeout)
			}
			if tr.TLSHandshakeTimeout != tt.connect {
				t.Errorf("TLS handshake timeout %s; want %s", tr.TLSHandshakeTimeout, tt.connect)
			}
			if tr.MaxIdleConns != tt.maxIdle || tr.MaxIdleConnsPerHost != maxIdleConnsPerHost || tr.IdleConnTimeout != idleConnTimeout {
				t.Errorf("idle connections %d, %d per host, %s", tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout)
			}
			req := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
			var via []*http.Request
			for i := 0; i < tt.maxRedirectsFollowed; i++ {
				via = append(via, req)
				if err := c.CheckRedirect(req, via); err != nil {
					t.Fatalf("redirect %d: %v; want followed", i+1, err)
				}
			}
			via = append(via, req)
			want := ErrTooManyRedirects
			if !tt.followsRedirect {
				want = http.ErrUseLastResponse
			}
			if err := c.CheckRedirect(req, via); !errors.Is(err, want) {
				t.Errorf("redirect %d: %v; want %v", len(via), err, want)
			}
		})
	}
}
