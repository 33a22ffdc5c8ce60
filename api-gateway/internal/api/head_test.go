package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestHeadWhereverGet: every route served to GET answers HEAD with the
// status and headers GET gives and no body (review item 13: they answered
// 405).
func TestHeadWhereverGet(t *testing.T) {
	e := newEnv(t, nil)
	r := e.create(e.keyA, okBody)
	if r.status != http.StatusOK {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := r.json(t)["data"].(map[string]any)["task_id"].(string)
	bearer := map[string]string{"Authorization": "Bearer " + e.keyA}
	tok := map[string]string{"Authorization": "Bearer " + adminToken}
	cases := []struct {
		path string
		hdr  map[string]string
	}{
		{"/healthz", nil},
		{"/readyz", nil},
		{"/openapi.json", nil},
		{"/playground", nil},
		{"/v1/task/query?task_id=" + id, bearer},
		{"/v1/task/query?task_id=" + id + "&wait=30", bearer},
		{"/v1/task/list", bearer},
		{"/v1/task/webhooks?task_id=" + id, bearer},
		{"/v1/task/query?task_id=" + id, nil}, // 401 as GET
		{"/admin/v1/accounts", tok},
		{"/admin/v1/accounts/" + e.acctA, tok},
		{"/admin/v1/accounts/" + e.acctA + "/keys", tok},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			g := e.do("GET", strings.Replace(c.path, "&wait=30", "", 1), c.hdr, "")
			h := e.do("HEAD", c.path, c.hdr, "")
			if h.status != g.status || h.status == http.StatusMethodNotAllowed {
				t.Fatalf("HEAD %s: %d, GET: %d", c.path, h.status, g.status)
			}
			if len(h.body) != 0 {
				t.Fatalf("HEAD %s has a body: %q", c.path, h.body)
			}
			if h.header.Get("Content-Type") != g.header.Get("Content-Type") {
				t.Fatalf("HEAD %s: Content-Type %q, GET: %q", c.path, h.header.Get("Content-Type"), g.header.Get("Content-Type"))
			}
			if cl := h.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(g.body)) && c.path != "/readyz" {
				t.Fatalf("HEAD %s: Content-Length %s, GET body %d bytes", c.path, cl, len(g.body))
			}
		})
	}
	// A stream's GET never ends while its task is pending: its HEAD sends
	// the stream's headers, and ends.
	if h := e.do("HEAD", "/v1/task/stream?task_id="+id, bearer, ""); h.status != http.StatusOK || len(h.body) != 0 ||
		!strings.HasPrefix(h.header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("HEAD stream: %d, Content-Type %q, %d bytes of body", h.status, h.header.Get("Content-Type"), len(h.body))
	}
	if r := e.do("POST", "/healthz", nil, ""); r.status != http.StatusMethodNotAllowed || !strings.Contains(r.header.Get("Allow"), "HEAD") {
		t.Fatalf("POST /healthz: %d, Allow %q", r.status, r.header.Get("Allow"))
	}
}
