package createreq

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/task"
)

// withTop returns a valid create body with extra top-level members (a JSON
// fragment, "" for none).
func withTop(extra string) string {
	body := `{"model":"` + std + `","task_type":"image","input":{"prompt":"p"}`
	if extra != "" {
		body += "," + extra
	}
	return body + "}"
}

func TestDecodeCallback(t *testing.T) {
	const hook = "https://hooks.example.com/easel?token=abc"
	tests := []struct {
		name       string
		extra      string
		wantURL    string
		wantEvents []string
	}{
		{"none", ``, "", nil},
		{"null", `"callback_url":null,"callback_events":null`, "", nil},
		{"empty string is absent", `"callback_url":""`, "", nil},
		{"callback_url, default events", `"callback_url":"` + hook + `"`, hook, task.DefaultEvents},
		{"kie.ai's callBackUrl", `"callBackUrl":"` + hook + `"`, hook, task.DefaultEvents},
		{"both spellings, the same", `"callback_url":"` + hook + `","callBackUrl":"` + hook + `"`, hook, task.DefaultEvents},
		{"one spelling empty", `"callback_url":"","callBackUrl":"` + hook + `"`, hook, task.DefaultEvents},
		{"http", `"callback_url":"http://hooks.example.com/x"`, "http://hooks.example.com/x", task.DefaultEvents},
		{"events named", `"callback_url":"` + hook + `","callback_events":["task.completed","task.progress"]`, hook, []string{task.EventCompleted, task.EventProgress}},
		{"every event", `"callback_url":"` + hook + `","callback_events":["task.progress","task.canceled","task.failed","task.completed"]`, hook, []string{task.EventProgress, task.EventCanceled, task.EventFailed, task.EventCompleted}},
		{"null events: the default", `"callback_url":"` + hook + `","callback_events":null`, hook, task.DefaultEvents},
		{"url of 2048 characters", `"callback_url":"https://example.com/` + strings.Repeat("a", MaxURLLen-len("https://example.com/")) + `"`, "https://example.com/" + strings.Repeat("a", MaxURLLen-len("https://example.com/")), task.DefaultEvents},
	}
	d := newDecoder(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := d.Decode([]byte(withTop(tt.extra)))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if r.Callback.URL != tt.wantURL || !slices.Equal(r.Callback.Events, tt.wantEvents) {
				t.Errorf("callback %+v; want %q %v", r.Callback, tt.wantURL, tt.wantEvents)
			}
			if r.Prompt != "p" || r.Model.ID != std {
				t.Errorf("the rest of the request: %+v", r)
			}
		})
	}
	// The default is a copy: changing one task's events changes no other's.
	r, _ := d.Decode([]byte(withTop(`"callback_url":"` + hook + `"`)))
	r.Callback.Events[0] = "x"
	if task.DefaultEvents[0] != task.EventCompleted {
		t.Fatal("Decode handed out task.DefaultEvents itself")
	}
}

func TestDecodeCallbackInvalid(t *testing.T) {
	const hook = `"callback_url":"https://hooks.example.com/easel"`
	tests := []struct {
		name    string
		extra   string
		wantMsg string
	}{
		{"spellings differ", `"callback_url":"https://a.example.com/","callBackUrl":"https://b.example.com/"`, "callback_url and callBackUrl are two spellings of one field and differ"},
		{"not a string", `"callback_url":5`, "callback_url must be a string"},
		{"callBackUrl not a string", `"callBackUrl":["https://a.example.com/"]`, "callBackUrl must be a string"},
		{"not http", `"callback_url":"ftp://example.com/x"`, "callback_url must be an absolute http or https URL"},
		{"callBackUrl named as sent", `"callBackUrl":"javascript:alert(1)"`, "callBackUrl must be an absolute http or https URL"},
		{"relative", `"callback_url":"/hook"`, "callback_url must be an absolute"},
		{"no host", `"callback_url":"https:///hook"`, "callback_url must be an absolute"},
		{"too long", `"callback_url":"https://example.com/` + strings.Repeat("a", MaxURLLen) + `"`, "callback_url is longer than 2048 characters"},
		{"loopback", `"callback_url":"http://127.0.0.1:80/hook"`, "callback_url points to a loopback address"},
		{"loopback, another form", `"callback_url":"http://0x7f000001/hook"`, "callback_url points to a loopback address"},
		{"ipv6 loopback", `"callback_url":"http://[::1]/hook"`, "callback_url points to a loopback address"},
		{"private", `"callback_url":"https://10.0.0.8/hook"`, "callback_url points to a private address"},
		{"metadata", `"callBackUrl":"http://169.254.169.254/latest"`, "callBackUrl points to a link-local address"},
		{"port", `"callback_url":"https://hooks.example.com:8443/hook"`, "callback_url uses port 8443"},
		{"events without a url", `"callback_events":["task.completed"]`, "callback_events needs a callback_url"},
		{"events with an empty url", `"callback_url":"","callback_events":["task.completed"]`, "callback_events needs a callback_url"},
		{"no events", hook + `,"callback_events":[]`, "callback_events must name at least one event"},
		{"unknown event", hook + `,"callback_events":["task.completed","task.started"]`, `callback_events[1] "task.started" is not an event`},
		{"event case matters", hook + `,"callback_events":["Task.Completed"]`, `callback_events[0] "Task.Completed" is not an event`},
		{"duplicate event", hook + `,"callback_events":["task.failed","task.completed","task.failed"]`, `callback_events lists "task.failed" twice`},
		{"events not an array", hook + `,"callback_events":"task.completed"`, "callback_events must be an array of strings"},
		{"event not a string", hook + `,"callback_events":[1]`, "callback_events must be an array of strings"},
	}
	d := newDecoder(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.Decode([]byte(withTop(tt.extra)))
			e, ok := apperr.As(err)
			if !ok || e.Code != apperr.Invalid {
				t.Fatalf("Decode = %v; want a 400", err)
			}
			if !strings.Contains(e.Message, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", e.Message, tt.wantMsg)
			}
		})
	}
}

// The deployment's egress policy decides, as for image_urls: a range or a
// port it allows is accepted, and AllowPrivate (local development, the
// tests) accepts a loopback receiver.
func TestDecodeCallbackEgressPolicy(t *testing.T) {
	tests := []struct {
		name   string
		policy egress.Policy
		url    string
		ok     bool
	}{
		{"loopback refused by default", egress.Policy{}, "http://127.0.0.1:8099/hook", false},
		{"loopback with AllowPrivate", egress.Policy{AllowPrivate: true}, "http://127.0.0.1:8099/hook", true},
		{"an allowed port", egress.Policy{Ports: []int{443, 8443}}, "https://hooks.example.com:8443/hook", true},
		{"a port not allowed", egress.Policy{Ports: []int{443, 8443}}, "http://hooks.example.com/hook", false},
		{"an allowed range", egress.Policy{Allow: mustPrefixes(t, "10.20.0.0/16")}, "https://10.20.3.4/hook", true},
		{"outside the allowed range", egress.Policy{Allow: mustPrefixes(t, "10.20.0.0/16")}, "https://10.21.3.4/hook", false},
		{"a name is left to the worker's dial-time check", egress.Policy{}, "https://hooks.internal.example/hook", true},
		{"but localhost always means this machine", egress.Policy{}, "https://localhost/hook", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDecoder(t)
			d.Egress = tt.policy
			r, err := d.Decode([]byte(withTop(`"callback_url":"` + tt.url + `"`)))
			if (err == nil) != tt.ok {
				t.Fatalf("Decode = %+v, %v; want accepted %v", r.Callback, err, tt.ok)
			}
			if tt.ok && r.Callback.URL != tt.url {
				t.Errorf("callback URL %q", r.Callback.URL)
			}
		})
	}
}

func mustPrefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	p, err := egress.ParsePrefixes(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
