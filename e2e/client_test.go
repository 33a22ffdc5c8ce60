package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// client is what a user of the API does with curl.
type client struct {
	t    testing.TB
	base string
	key  string
	http *http.Client
}

type taskRecord struct {
	TaskID       string   `json:"task_id"`
	TaskType     string   `json:"task_type"`
	Model        string   `json:"model"`
	Status       string   `json:"status"`
	Progress     int      `json:"progress"`
	CreateTime   int64    `json:"create_time"`
	CompleteTime int64    `json:"complete_time"`
	Results      []string `json:"results"`
	Error        *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type envelope struct {
	Code int             `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
}

func newClient(t testing.TB, base, key string) *client {
	return &client{t: t, base: base, key: key, http: &http.Client{Timeout: 30 * time.Second}}
}

func (c *client) do(method, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// create returns the task id of a new task, failing the test otherwise.
func (c *client) create(body string) string {
	c.t.Helper()
	status, _, b := c.do("POST", "/v1/task/create", body, nil)
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil || status != 200 || env.Code != 200 || env.Msg != "success" {
		c.t.Fatalf("create: %d %s", status, b)
	}
	var data struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(env.Data, &data)
	return data.TaskID
}

func (c *client) query(id string) (int, taskRecord, []byte) {
	c.t.Helper()
	status, _, b := c.do("GET", "/v1/task/query?task_id="+url.QueryEscape(id), "", nil)
	var rec taskRecord
	if status == 200 {
		if err := json.Unmarshal(b, &rec); err != nil {
			c.t.Fatalf("query body %s: %v", b, err)
		}
	}
	return status, rec, b
}

// poll queries until the task ends, checking on the way that progress never
// goes back, and returns the final record and the statuses and progress
// values seen.
func (c *client) poll(id string, timeout time.Duration) (taskRecord, []string, []int) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var statuses []string
	var progress []int
	for {
		status, rec, b := c.query(id)
		if status != 200 {
			c.t.Fatalf("query %s: %d %s", id, status, b)
		}
		if len(progress) > 0 && rec.Progress < progress[len(progress)-1] {
			c.t.Fatalf("progress went back: %v then %d", progress, rec.Progress)
		}
		if rec.Progress == 100 && rec.Status != "completed" {
			c.t.Fatalf("progress 100 while %s", rec.Status)
		}
		if rec.Status != "completed" && (rec.CompleteTime != 0 && rec.Status != "failed" || len(rec.Results) != 0) {
			c.t.Fatalf("%s task with complete_time %d and %d results", rec.Status, rec.CompleteTime, len(rec.Results))
		}
		if len(statuses) == 0 || statuses[len(statuses)-1] != rec.Status {
			statuses = append(statuses, rec.Status)
		}
		if len(progress) == 0 || progress[len(progress)-1] != rec.Progress {
			progress = append(progress, rec.Progress)
		}
		if rec.Status == "completed" || rec.Status == "failed" {
			return rec, statuses, progress
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s not done after %v: %+v", id, timeout, rec)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// download fetches a result URL without credentials and decodes the image.
func (c *client) download(u string) (image.Config, string, []byte) {
	c.t.Helper()
	resp, err := c.http.Get(u)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		c.t.Fatalf("download %s: %d %s", u, resp.StatusCode, b)
	}
	if resp.Header.Get("Content-Length") != fmt.Sprint(len(b)) || resp.Header.Get("ETag") == "" {
		c.t.Errorf("download headers %v", resp.Header)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		c.t.Fatalf("download is not an image: %v", err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "image/"+format {
		c.t.Errorf("Content-Type %s for a %s", ct, format)
	}
	return cfg, format, b
}

func createBody(model, input string) string {
	return `{"model":"` + model + `","task_type":"image","input":` + input + `}`
}
