package jaegerproc

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A trace sent over OTLP/HTTP (JSON, as the collector accepts it) is read
// back from the query API into Span: parent, service, kind, times,
// attributes, events and an error status; and found by its service.
func TestReceiveAndQuery(t *testing.T) {
	if _, ok := Built(); !ok && testing.Short() {
		t.Skip("Jaeger is not built and -short builds nothing (make test builds it: go run ./tools/testkit/cmd/jaeger-install)")
	}
	ctx := context.Background()
	p, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		rootID  = "00f067aa0ba902b7"
		childID = "00f067aa0ba902b8"
	)
	start := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	ns := func(d time.Duration) string { return fmt.Sprint(start.Add(d).UnixNano()) }
	body := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"easel-test"}}]},
	"scopeSpans":[{"scope":{"name":"test"},"spans":[
	{"traceId":"` + traceID + `","spanId":"` + rootID + `","name":"POST /v1/task/create","kind":2,
	 "startTimeUnixNano":"` + ns(0) + `","endTimeUnixNano":"` + ns(50*time.Millisecond) + `",
	 "attributes":[{"key":"easel.task_id","value":{"stringValue":"task_1"}},{"key":"http.response.status_code","value":{"intValue":"200"}}]},
	{"traceId":"` + traceID + `","spanId":"` + childID + `","parentSpanId":"` + rootID + `","name":"upstream.call","kind":1,
	 "startTimeUnixNano":"` + ns(10*time.Millisecond) + `","endTimeUnixNano":"` + ns(20*time.Millisecond) + `",
	 "events":[{"timeUnixNano":"` + ns(15*time.Millisecond) + `","name":"failover","attributes":[{"key":"easel.upstream","value":{"stringValue":"b"}}]}],
	 "status":{"code":2,"message":"500 from a"}}]}]}]}`
	resp, err := http.Post(p.OTLPEndpoint+"/v1/traces", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("OTLP export: %s", resp.Status)
	}

	c := p.Client()
	var tr *Trace
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for tr == nil || len(tr.Spans) < 2 {
		if tr, err = c.Trace(ctx, traceID); err != nil && err != ErrNotFound {
			t.Fatal(err)
		}
		select {
		case <-deadline:
			t.Fatalf("the trace is not in Jaeger after 10s: %+v\n%s", tr, p.Output())
		case <-tick.C:
		}
	}
	if _, err := c.Trace(ctx, "0000000000000000000000000000beef"); err != ErrNotFound {
		t.Errorf("an unknown trace: %v; want ErrNotFound", err)
	}

	root, child := tr.Spans[0], tr.Spans[1]
	tests := []struct {
		what      string
		got, want any
	}{
		{"trace id", tr.TraceID, traceID},
		{"root name", root.Name, "POST /v1/task/create"},
		{"root service", root.Service, "easel-test"},
		{"root kind", root.Kind, "server"},
		{"root parent", root.ParentID, ""},
		{"root start", root.Start.UnixMicro(), start.UnixMicro()},
		{"root duration", root.Duration, 50 * time.Millisecond},
		{"root task id", root.Attributes["easel.task_id"], "task_1"},
		{"root int attribute", root.Attributes["http.response.status_code"], int64(200)},
		{"root error", root.Error, false},
		{"child name", child.Name, "upstream.call"},
		{"child parent", child.ParentID, rootID},
		{"child kind", child.Kind, "internal"},
		{"child error", child.Error, true},
		{"child status message", child.StatusMessage, "500 from a"},
		{"child events", len(child.Events), 1},
		{"services", strings.Join(tr.Services(), ","), "easel-test"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v; want %v", tt.what, tt.got, tt.want)
		}
	}
	if len(child.Events) == 1 && (child.Events[0].Name != "failover" || child.Events[0].Attributes["easel.upstream"] != "b") {
		t.Errorf("event %+v; want failover to b", child.Events[0])
	}

	found, err := c.Find(ctx, "easel-test", time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].TraceID != traceID {
		t.Errorf("traces of easel-test: %+v; want the one sent", found)
	}
	if found, err := c.Find(ctx, "nobody", time.Hour, 10); err != nil || len(found) != 0 {
		t.Errorf("traces of an unknown service: %v, %v; want none", found, err)
	}
}
