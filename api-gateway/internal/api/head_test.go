package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/easelhq/easel/api-gateway/internal/gatewaytest"
)

// TestHeadWhereverGet: every route served to GET, the admin API's too,
// answers HEAD with the status and headers GET gives and no body.
func TestHeadWhereverGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	r := e.Create(e.KeyA, okBody)
	if r.Status != http.StatusOK {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["data"].(map[string]any)["task_id"].(string)
	bearer := map[string]string{"Authorization": "Bearer " + e.KeyA}
	tok := map[string]string{"Authorization": "Bearer " + gatewaytest.AdminToken}
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
		{"/admin/v1/accounts/" + e.AcctA, tok},
		{"/admin/v1/accounts/" + e.AcctA + "/keys", tok},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			g := e.Do("GET", strings.Replace(c.path, "&wait=30", "", 1), c.hdr, "")
			h := e.Do("HEAD", c.path, c.hdr, "")
			if h.Status != g.Status || h.Status == http.StatusMethodNotAllowed {
				t.Fatalf("HEAD %s: %d, GET: %d", c.path, h.Status, g.Status)
			}
			if len(h.Body) != 0 {
				t.Fatalf("HEAD %s has a body: %q", c.path, h.Body)
			}
			if h.Header.Get("Content-Type") != g.Header.Get("Content-Type") {
				t.Fatalf("HEAD %s: Content-Type %q, GET: %q", c.path, h.Header.Get("Content-Type"), g.Header.Get("Content-Type"))
			}
			if cl := h.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(g.Body)) && c.path != "/readyz" {
				t.Fatalf("HEAD %s: Content-Length %s, GET body %d bytes", c.path, cl, len(g.Body))
			}
		})
	}
	// A stream's GET never ends while its task is pending: its HEAD sends
	// the stream's headers, and ends.
	if h := e.Do("HEAD", "/v1/task/stream?task_id="+id, bearer, ""); h.Status != http.StatusOK || len(h.Body) != 0 ||
		!strings.HasPrefix(h.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("HEAD stream: %d, Content-Type %q, %d bytes of body", h.Status, h.Header.Get("Content-Type"), len(h.Body))
	}
	if r := e.Do("POST", "/healthz", nil, ""); r.Status != http.StatusMethodNotAllowed || !strings.Contains(r.Header.Get("Allow"), "HEAD") {
		t.Fatalf("POST /healthz: %d, Allow %q", r.Status, r.Header.Get("Allow"))
	}
}
