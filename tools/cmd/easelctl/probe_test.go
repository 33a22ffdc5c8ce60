package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// probe answers a container's health check without Redis: 0 on a 2xx
// answer, 1 on any other answer, none in time, or nothing listening.
func TestProbe(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		case "/slow":
			<-r.Context().Done() // answers only after the client gave up
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tt := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"ready", []string{"probe", srv.URL + "/readyz"}, 0, "200 OK"},
		{"not ready", []string{"probe", srv.URL + "/other"}, 1, "503"},
		{"too slow", []string{"probe", "--timeout", "50ms", srv.URL + "/slow"}, 1, "deadline"},
		{"nothing listening", []string{"probe", closed.URL + "/readyz"}, 1, "connection refused"},
		{"no URL", []string{"probe"}, 2, "accepts 1 arg"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ctl(t, "", tt.args...) // no EASEL_REDIS_URL: probe needs none
			out := r.stdout + r.stderr
			if r.code != tt.code || !strings.Contains(out, tt.msg) {
				t.Errorf("%v: %+v; want exit %d and %q", tt.args, r, tt.code, tt.msg)
			}
		})
	}
}
