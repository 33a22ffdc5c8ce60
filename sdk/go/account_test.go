package easel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
)

func TestAccountWebhookCalls(t *testing.T) {
	ctx := context.Background()
	endpoint := `{"code":200,"msg":"success","data":{"callback_url":"https://hooks.example.com/e","callback_events":["task.completed"]}}`
	tests := []struct {
		name         string
		reply        reply
		do           func(c *Client) (any, error)
		want         any
		method, path string
		body         string
		kind         error
	}{
		{"get", reply{status: 200, body: endpoint}, func(c *Client) (any, error) { return c.AccountWebhook(ctx) },
			WebhookEndpoint{URL: "https://hooks.example.com/e", Events: []string{"task.completed"}}, "GET", "/v1/account/webhook", "", nil},
		{"set with events", reply{status: 200, body: endpoint}, func(c *Client) (any, error) {
			return c.SetAccountWebhook(ctx, "https://hooks.example.com/e", []string{"task.completed"})
		}, WebhookEndpoint{URL: "https://hooks.example.com/e", Events: []string{"task.completed"}}, "PUT", "/v1/account/webhook",
			`{"callback_url":"https://hooks.example.com/e","callback_events":["task.completed"]}`, nil},
		{"set with the default events", reply{status: 200, body: endpoint}, func(c *Client) (any, error) {
			return c.SetAccountWebhook(ctx, "https://hooks.example.com/e", nil)
		}, WebhookEndpoint{URL: "https://hooks.example.com/e", Events: []string{"task.completed"}}, "PUT", "/v1/account/webhook",
			`{"callback_url":"https://hooks.example.com/e"}`, nil},
		{"delete", reply{status: 200, body: `{"code":200,"msg":"success","data":{"callback_events":[]}}`}, func(c *Client) (any, error) {
			return nil, c.DeleteAccountWebhook(ctx)
		}, nil, "DELETE", "/v1/account/webhook", "", nil},
		{"test", reply{status: 200, body: `{"code":200,"msg":"success","data":{"webhook_id":"msg_test_1","delivered":true,"status_code":204,"latency_ms":3,"error":""}}`},
			func(c *Client) (any, error) { return c.TestAccountWebhook(ctx) },
			WebhookSend{WebhookID: "msg_test_1", Delivered: true, StatusCode: 204, LatencyMs: 3}, "POST", "/v1/account/webhook/test", "{}", nil},
		{"test without an endpoint", reply{status: 409, body: `{"code":409,"msg":"the account has no webhook endpoint","data":null}`},
			func(c *Client) (any, error) { return c.TestAccountWebhook(ctx) }, nil, "POST", "/v1/account/webhook/test", "{}", ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: []reply{tt.reply}}
			c, _ := newTestClient(t, srv)
			got, err := tt.do(c)
			switch {
			case tt.kind != nil:
				if !errors.Is(err, tt.kind) {
					t.Fatalf("error %v; want %v", err, tt.kind)
				}
			case err != nil:
				t.Fatal(err)
			case tt.want != nil:
				if s := deref(got); !equalJSON(t, s, tt.want) {
					t.Errorf("got %+v; want %+v", s, tt.want)
				}
			}
			r := srv.requests()[0]
			if r.method != tt.method || r.path != tt.path || r.body != tt.body {
				t.Errorf("request %s %s %q; want %s %s %q", r.method, r.path, r.body, tt.method, tt.path, tt.body)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	srv := &scripted{replies: []reply{{status: 200, body: `{"code":200,"msg":"success","data":{"days":[{"date":"2026-11-27",` +
		`"models":{"m":{"tasks":2,"credits":8,"refunds":1,"refunded_credits":4}},"keys":{"esk_AbCd1234":{"m":{"tasks":1,"credits":4,"refunds":0,"refunded_credits":0}}}}],` +
		`"models":["m"],"keys":["esk_AbCd1234"]}}`}}}
	c, _ := newTestClient(t, srv)
	u, err := c.Usage(context.Background(), UsageOptions{Days: 7, Key: "esk_AbCd1234"})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Days) != 1 || u.Days[0].Models["m"] != (UsageCount{Tasks: 2, Credits: 8, Refunds: 1, RefundedCredits: 4}) ||
		u.Days[0].Keys["esk_AbCd1234"]["m"] != (UsageCount{Tasks: 1, Credits: 4}) || len(u.Keys) != 1 {
		t.Errorf("usage %+v", u)
	}
	if r := srv.requests()[0]; r.method != "GET" || r.path != "/v1/account/usage" || r.query != "days=7&key=esk_AbCd1234" {
		t.Errorf("request %+v", r)
	}
}

func TestUsageCSV(t *testing.T) {
	const csv = "date,model,key,tasks,credits,refunds,refunded_credits\n2026-11-27,m,esk_AbCd1234,1,4,0,0\n2026-11-27,m,,1,4,1,4\n"
	ok := reply{status: 200, header: map[string]string{"Content-Type": "text/csv; charset=utf-8"}, body: csv}
	tests := []struct {
		name     string
		replies  []reply
		o        UsageOptions
		query    string
		requests int
		want     string
		kind     error
	}{
		{"every key, the default days", []reply{ok}, UsageOptions{}, "", 1, csv, nil},
		{"one key's of 7 days", []reply{ok}, UsageOptions{Days: 7, Key: "esk_AbCd1234"}, "days=7&key=esk_AbCd1234", 1, csv, nil},
		{"days out of range", []reply{{status: 400, body: `{"code":400,"msg":"days must be 1 to 31","data":null}`}}, UsageOptions{Days: 90}, "days=90", 1, "", ErrBadRequest},
		{"unavailable, then the CSV once", []reply{{status: 503, body: `{"code":503,"msg":"try again","data":null}`}, ok}, UsageOptions{}, "", 2, csv, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scripted{replies: tt.replies}
			c, _ := newTestClient(t, srv)
			var out bytes.Buffer
			err := c.UsageCSV(context.Background(), tt.o, &out)
			if tt.kind == nil && err != nil || tt.kind != nil && !errors.Is(err, tt.kind) {
				t.Fatalf("error %v; want %v", err, tt.kind)
			}
			if out.String() != tt.want {
				t.Errorf("wrote %q; want %q", out.String(), tt.want)
			}
			reqs := srv.requests()
			if len(reqs) != tt.requests {
				t.Fatalf("%d requests; want %d", len(reqs), tt.requests)
			}
			if r := reqs[0]; r.method != "GET" || r.path != "/v1/account/usage.csv" || r.query != tt.query || r.header.Get("Authorization") != "Bearer esk_test" {
				t.Errorf("request %s %s?%s (Authorization %q); want GET /v1/account/usage.csv?%s", r.method, r.path, r.query, r.header.Get("Authorization"), tt.query)
			}
		})
	}
}

// deref is the value a call's pointer result points to.
func deref(v any) any {
	switch p := v.(type) {
	case *WebhookEndpoint:
		return *p
	case *WebhookSend:
		return *p
	}
	return v
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return string(ja) == string(jb)
}
