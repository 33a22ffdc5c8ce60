package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// request is one request the fake API received.
type request struct {
	method, path, query, body string
}

type webhookEndpoint struct {
	URL    string   `json:"callback_url,omitempty"`
	Events []string `json:"callback_events"`
}

// fakeUsage is the account's usage on its last two days: one model on
// each, by a key and by the console (no key).
var fakeUsage = []struct {
	date, model, key                  string
	tasks, credits, refunds, refunded int
}{
	{"2026-11-26", "lumen-2.5-flash-image", "esk_AbCd1234", 2, 8, 1, 4},
	{"2026-11-26", "lumen-2.5-flash-image", "", 1, 4, 0, 0},
	{"2026-11-27", "lumen-3-pro-image-preview", "esk_EfGh5678", 1, 18, 0, 0},
}

// serveAccount answers the account's routes: the default webhook endpoint
// (a URL with "fail" in it answers its test event 500) and the usage.
func (f *fakeAPI) serveAccount(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.account = append(f.account, request{r.Method, r.URL.Path, r.URL.RawQuery, string(b)})
	ok := func(data any) {
		_ = json.NewEncoder(w).Encode(map[string]any{"code": 200, "msg": "success", "data": data})
	}
	endpoint := func() any {
		if f.hook == nil {
			return webhookEndpoint{Events: []string{}}
		}
		return f.hook
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/account/webhook":
		ok(endpoint())
	case "PUT /v1/account/webhook":
		var e webhookEndpoint
		if err := json.Unmarshal(b, &e); err != nil {
			f.fail(w, 400, "malformed JSON")
			return
		}
		if !strings.HasPrefix(e.URL, "https://") {
			f.fail(w, 400, "callback_url must be an https URL")
			return
		}
		if e.Events == nil {
			e.Events = []string{"task.completed", "task.failed", "task.canceled"}
		}
		f.hook = &e
		ok(endpoint())
	case "DELETE /v1/account/webhook":
		f.hook = nil
		ok(endpoint())
	case "POST /v1/account/webhook/test":
		switch {
		case f.hook == nil:
			f.fail(w, 409, "the account has no webhook endpoint")
		case strings.Contains(f.hook.URL, "fail"):
			ok(map[string]any{"webhook_id": "msg_test_2", "delivered": false, "status_code": 500, "latency_ms": 7, "error": "the receiver answered HTTP 500"})
		default:
			ok(map[string]any{"webhook_id": "msg_test_1", "delivered": true, "status_code": 204, "latency_ms": 3, "error": ""})
		}
	case "GET /v1/account/usage", "GET /v1/account/usage.csv":
		f.serveUsage(w, r, ok)
	default:
		f.fail(w, 405, "method not allowed")
	}
}

// serveUsage answers the usage of the last days= days (default 30) as
// the API does, in JSON or CSV, of every key or of key= alone.
func (f *fakeAPI) serveUsage(w http.ResponseWriter, r *http.Request, ok func(any)) {
	days := 30
	if s := r.URL.Query().Get("days"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 31 {
			f.fail(w, 400, "days must be 1 to 31")
			return
		}
		days = n
	}
	only := r.URL.Query().Get("key")
	if strings.HasSuffix(r.URL.Path, ".csv") {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		fmt.Fprintln(w, "date,model,key,tasks,credits,refunds,refunded_credits")
		for _, u := range fakeUsage {
			if (only == "" || u.key == only) && u.date >= fmt.Sprintf("2026-11-%02d", 28-days) {
				fmt.Fprintf(w, "%s,%s,%s,%d,%d,%d,%d\n", u.date, u.model, u.key, u.tasks, u.credits, u.refunds, u.refunded)
			}
		}
		return
	}
	type count struct {
		Tasks    int `json:"tasks"`
		Credits  int `json:"credits"`
		Refunds  int `json:"refunds"`
		Refunded int `json:"refunded_credits"`
	}
	type day struct {
		Date   string                      `json:"date"`
		Models map[string]count            `json:"models"`
		Keys   map[string]map[string]count `json:"keys"`
	}
	list := []day{}
	models, keys := []string{}, []string{}
	for i := 28 - days; i <= 27; i++ {
		d := day{Date: fmt.Sprintf("2026-11-%02d", i), Models: map[string]count{}, Keys: map[string]map[string]count{}}
		for _, u := range fakeUsage {
			if u.date != d.Date {
				continue
			}
			if u.key != "" && !slices.Contains(keys, u.key) {
				keys = append(keys, u.key) // every key's, as the API lists them
			}
			if only != "" && u.key != only {
				continue
			}
			c := d.Models[u.model]
			d.Models[u.model] = count{c.Tasks + u.tasks, c.Credits + u.credits, c.Refunds + u.refunds, c.Refunded + u.refunded}
			if !slices.Contains(models, u.model) {
				models = append(models, u.model)
			}
			if u.key != "" {
				d.Keys[u.key] = map[string]count{u.model: {u.tasks, u.credits, u.refunds, u.refunded}}
			}
		}
		list = append(list, d)
	}
	ok(map[string]any{"days": list, "models": models, "keys": keys})
}

func TestWebhookCommands(t *testing.T) {
	f := newFakeAPI(t)
	const url = "https://hooks.example.com/easel"
	tests := []struct {
		name string
		args []string
		// req is the request expected ("METHOD path body"); "" none.
		req    string
		stdout string // all of it, when err is ""
		err    string // a substring of the error; "" none
	}{
		{"get, none set", []string{"webhook", "get"}, "GET /v1/account/webhook ", "no webhook endpoint (easel webhook set URL sets one)\n", ""},
		{"get, none set, JSON", []string{"webhook", "get", "--json"}, "GET /v1/account/webhook ", "{\n  \"callback_events\": []\n}\n", ""},
		{"test, none set", []string{"webhook", "test"}, "POST /v1/account/webhook/test {}", "", "409 Conflict: the account has no webhook endpoint"},
		{"set, the default events", []string{"webhook", "set", url}, `PUT /v1/account/webhook {"callback_url":"` + url + `"}`,
			"endpoint  " + url + "\nevents    task.completed, task.failed, task.canceled\n", ""},
		{"set, events chosen", []string{"webhook", "set", url, "--events", "task.completed,task.progress"},
			`PUT /v1/account/webhook {"callback_url":"` + url + `","callback_events":["task.completed","task.progress"]}`,
			"endpoint  " + url + "\nevents    task.completed, task.progress\n", ""},
		{"get", []string{"webhook", "get"}, "GET /v1/account/webhook ", "endpoint  " + url + "\nevents    task.completed, task.progress\n", ""},
		{"get, JSON", []string{"webhook", "get", "--json"}, "GET /v1/account/webhook ",
			"{\n  \"callback_url\": \"" + url + "\",\n  \"callback_events\": [\n    \"task.completed\",\n    \"task.progress\"\n  ]\n}\n", ""},
		{"test", []string{"webhook", "test"}, "POST /v1/account/webhook/test {}", "msg_test_1  delivered  HTTP 204  3ms\n", ""},
		{"test, JSON", []string{"webhook", "test", "--json"}, "POST /v1/account/webhook/test {}",
			"{\n  \"webhook_id\": \"msg_test_1\",\n  \"delivered\": true,\n  \"status_code\": 204,\n  \"latency_ms\": 3,\n  \"error\": \"\"\n}\n", ""},
		{"set a receiver that refuses", []string{"webhook", "set", "https://hooks.example.com/fail"}, `PUT /v1/account/webhook {"callback_url":"https://hooks.example.com/fail"}`,
			"endpoint  https://hooks.example.com/fail\nevents    task.completed, task.failed, task.canceled\n", ""},
		{"test, not delivered", []string{"webhook", "test"}, "POST /v1/account/webhook/test {}", "msg_test_2  not delivered  HTTP 500  7ms\n",
			"the test event was not delivered: the receiver answered HTTP 500"},
		{"set a refused URL", []string{"webhook", "set", "http://hooks.example.com/"}, `PUT /v1/account/webhook {"callback_url":"http://hooks.example.com/"}`,
			"", "400 Bad Request: callback_url must be an https URL"},
		{"set without a URL", []string{"webhook", "set"}, "", "", "accepts 1 arg(s), received 0"},
		{"get with an argument", []string{"webhook", "get", "x"}, "", "", `unknown command "x" for "easel webhook get"`},
		{"delete", []string{"webhook", "delete"}, "DELETE /v1/account/webhook ", "deleted the webhook endpoint\n", ""},
		{"delete, JSON", []string{"webhook", "delete", "--json"}, "DELETE /v1/account/webhook ", "{\n  \"callback_events\": []\n}\n", ""},
		{"get, deleted", []string{"webhook", "get"}, "GET /v1/account/webhook ", "no webhook endpoint (easel webhook set URL sets one)\n", ""},
		{"a wrong key", []string{"webhook", "get", "--api-key", "esk_wrong"}, "", "", "401 Unauthorized: invalid API key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.account)
			stdout, _, err := f.run(t, nil, false, tt.args...)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v; want %q", err, tt.err)
			}
			if stdout != tt.stdout {
				t.Errorf("stdout %q; want %q", stdout, tt.stdout)
			}
			var got []string
			for _, r := range f.account[before:] {
				got = append(got, r.method+" "+r.path+" "+r.body)
			}
			if want := []string{tt.req}; tt.req == "" && len(got) != 0 || tt.req != "" && strings.Join(got, "\n") != tt.req {
				t.Errorf("requests %q; want %q", got, want)
			}
		})
	}
}

func TestUsageCommand(t *testing.T) {
	const csvAll = "date,model,key,tasks,credits,refunds,refunded_credits\n" +
		"2026-11-26,lumen-2.5-flash-image,esk_AbCd1234,2,8,1,4\n" +
		"2026-11-26,lumen-2.5-flash-image,,1,4,0,0\n" +
		"2026-11-27,lumen-3-pro-image-preview,esk_EfGh5678,1,18,0,0\n"
	tests := []struct {
		name  string
		args  []string
		path  string // "" no request
		query string
		// stdout is all of it; with err, what was written before it.
		stdout string
		err    string
	}{
		{"text", []string{"usage"}, "/v1/account/usage", "", `DATE        MODEL                      TASKS  CREDITS  REFUNDS  REFUNDED CREDITS
2026-11-26  lumen-2.5-flash-image      3      12       1        4
2026-11-27  lumen-3-pro-image-preview  1      18       0        0
total                                  4      30       1        4

KEY           TASKS  CREDITS  REFUNDS  REFUNDED CREDITS
esk_AbCd1234  2      8        1        4
esk_EfGh5678  1      18       0        0
`, ""},
		{"one key's of 7 days", []string{"usage", "--days", "7", "--key", "esk_EfGh5678"}, "/v1/account/usage", "days=7&key=esk_EfGh5678", `DATE        MODEL                      TASKS  CREDITS  REFUNDS  REFUNDED CREDITS
2026-11-27  lumen-3-pro-image-preview  1      18       0        0
total                                  1      18       0        0

KEY           TASKS  CREDITS  REFUNDS  REFUNDED CREDITS
esk_EfGh5678  1      18       0        0
`, ""},
		{"none in the days", []string{"usage", "--days", "1", "--key", "esk_AbCd1234"}, "/v1/account/usage", "days=1&key=esk_AbCd1234", "no usage from 2026-11-27 to 2026-11-27\n", ""},
		{"CSV", []string{"usage", "--csv"}, "/v1/account/usage.csv", "", csvAll, ""},
		{"CSV of one key", []string{"usage", "--csv", "--key", "esk_AbCd1234", "--days", "2"}, "/v1/account/usage.csv", "days=2&key=esk_AbCd1234",
			"date,model,key,tasks,credits,refunds,refunded_credits\n2026-11-26,lumen-2.5-flash-image,esk_AbCd1234,2,8,1,4\n", ""},
		{"JSON", []string{"usage", "--days", "1", "--json"}, "/v1/account/usage", "days=1", `{
  "days": [
    {
      "date": "2026-11-27",
      "models": {
        "lumen-3-pro-image-preview": {
          "tasks": 1,
          "credits": 18,
          "refunds": 0,
          "refunded_credits": 0
        }
      },
      "keys": {
        "esk_EfGh5678": {
          "lumen-3-pro-image-preview": {
            "tasks": 1,
            "credits": 18,
            "refunds": 0,
            "refunded_credits": 0
          }
        }
      }
    }
  ],
  "models": [
    "lumen-3-pro-image-preview"
  ],
  "keys": [
    "esk_EfGh5678"
  ]
}
`, ""},
		{"days out of range", []string{"usage", "--days", "90"}, "/v1/account/usage", "days=90", "", "400 Bad Request: days must be 1 to 31"},
		{"days out of range, CSV", []string{"usage", "--csv", "--days", "32"}, "/v1/account/usage.csv", "days=32", "", "400 Bad Request: days must be 1 to 31"},
		{"CSV and JSON", []string{"usage", "--csv", "--json"}, "", "", "", "--csv and --json: choose one"},
		{"an argument", []string{"usage", "today"}, "", "", "", `unknown command "today" for "easel usage"`},
		{"not a number", []string{"usage", "--days", "week"}, "", "", "", `invalid argument "week" for "--days" flag`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t)
			stdout, _, err := f.run(t, nil, false, tt.args...)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v; want %q", err, tt.err)
			}
			if stdout != tt.stdout {
				t.Errorf("stdout\n%s; want\n%s", stdout, tt.stdout)
			}
			switch {
			case tt.path == "" && len(f.account) != 0:
				t.Errorf("requests %v; want none", f.account)
			case tt.path != "" && (len(f.account) != 1 || f.account[0] != request{"GET", tt.path, tt.query, ""}):
				t.Errorf("requests %v; want GET %s?%s", f.account, tt.path, tt.query)
			}
		})
	}
}

// The account's commands exit 1 with one line on stderr when the API or
// the receiver refuses, as every command does.
func TestAccountExitCodes(t *testing.T) {
	f := newFakeAPI(t)
	f.mu.Lock()
	f.hook = &webhookEndpoint{URL: "https://hooks.example.com/fail", Events: []string{"task.completed"}}
	f.mu.Unlock()
	env := []string{"EASEL_URL=" + f.url, "EASEL_API_KEY=esk_test"}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"delivered nowhere", []string{"webhook", "test"}, 1, "msg_test_2  not delivered  HTTP 500  7ms\n", "easel: the test event was not delivered: the receiver answered HTTP 500\n"},
		{"a refused URL", []string{"webhook", "set", "ftp://x"}, 1, "", "easel: 400 Bad Request: callback_url must be an https URL\n"},
		{"a refused CSV", []string{"usage", "--csv", "--days", "40"}, 1, "", "easel: 400 Bad Request: days must be 1 to 31\n"},
		{"a wrong key", []string{"usage", "--api-key", "esk_wrong"}, 1, "", "easel: 401 Unauthorized: invalid API key\n"},
		{"the CSV", []string{"usage", "--csv", "--days", "1"}, 0, "date,model,key,tasks,credits,refunds,refunded_credits\n2026-11-27,lumen-3-pro-image-preview,esk_EfGh5678,1,18,0,0\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runMain(t, env, tt.args...)
			if code != tt.code || stdout != tt.stdout || stderr != tt.stderr {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}
