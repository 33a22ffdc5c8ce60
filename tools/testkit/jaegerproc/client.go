package jaegerproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// ErrNotFound: the query API has no trace of that id (yet: spans arrive
// in batches, so a test polls).
var ErrNotFound = errors.New("jaeger: trace not found")

// Client reads traces from a Jaeger query API (/api/traces, JSON).
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client of the query API at base (http://host:port).
func NewClient(base string) *Client {
	return &Client{base: base, http: &http.Client{Timeout: 10 * time.Second}}
}

// Trace is one trace, its spans ordered by start time.
type Trace struct {
	TraceID string
	Spans   []Span
}

// Span is what a test asserts of one span.
type Span struct {
	TraceID  string
	SpanID   string
	ParentID string // "" for a root span
	Name     string
	Service  string
	Kind     string // server, client, producer, consumer, internal
	Start    time.Time
	Duration time.Duration
	// Attributes are the span's tags: strings, bools, int64s and float64s.
	Attributes map[string]any
	Events     []Event
	// Error is the span's status Error (with StatusMessage, its
	// description).
	Error         bool
	StatusMessage string
}

// Event is an event of a span (a Jaeger log).
type Event struct {
	Name       string
	Time       time.Time
	Attributes map[string]any
}

// Named returns the trace's spans of that name, in start order.
func (t *Trace) Named(name string) []Span {
	var out []Span
	for _, s := range t.Spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Span returns the span of that id.
func (t *Trace) Span(id string) (Span, bool) {
	for _, s := range t.Spans {
		if s.SpanID == id {
			return s, true
		}
	}
	return Span{}, false
}

// Services lists the services with spans in the trace.
func (t *Trace) Services() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range t.Spans {
		if !seen[s.Service] {
			seen[s.Service] = true
			out = append(out, s.Service)
		}
	}
	sort.Strings(out)
	return out
}

// Trace reads the trace of id (32 hex digits); ErrNotFound when Jaeger has
// no span of it.
func (c *Client) Trace(ctx context.Context, id string) (*Trace, error) {
	var resp apiResponse
	if err := c.get(ctx, "/api/traces/"+url.PathEscape(id), &resp); err != nil {
		return nil, err
	}
	if len(resp.Data) == 0 {
		return nil, ErrNotFound
	}
	return resp.Data[0].trace(), nil
}

// Find returns the traces with spans of service, the newest first, at most
// limit of them, within lookback of now.
func (c *Client) Find(ctx context.Context, service string, lookback time.Duration, limit int) ([]*Trace, error) {
	q := url.Values{}
	q.Set("service", service)
	q.Set("limit", strconv.Itoa(limit))
	q.Set("lookback", lookback.String())
	q.Set("start", strconv.FormatInt(time.Now().Add(-lookback).UnixMicro(), 10))
	q.Set("end", strconv.FormatInt(time.Now().UnixMicro(), 10))
	var resp apiResponse
	if err := c.get(ctx, "/api/traces?"+q.Encode(), &resp); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	out := make([]*Trace, 0, len(resp.Data))
	for _, t := range resp.Data {
		out = append(out, t.trace())
	}
	return out, nil
}

// Services lists the services Jaeger has spans of.
func (c *Client) Services(ctx context.Context) ([]string, error) {
	var resp struct {
		Data []string `json:"data"`
	}
	if err := c.get(ctx, "/api/services", &resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("jaeger %s: %s: %s", path, resp.Status, b)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // int64 tags exactly
	if err := d.Decode(out); err != nil {
		return fmt.Errorf("jaeger %s: %w: %s", path, err, b)
	}
	return nil
}

// The query API's JSON (Jaeger's UI model).
type apiResponse struct {
	Data []apiTrace `json:"data"`
}

type apiTrace struct {
	TraceID   string                `json:"traceID"`
	Spans     []apiSpan             `json:"spans"`
	Processes map[string]apiProcess `json:"processes"`
}

type apiProcess struct {
	ServiceName string `json:"serviceName"`
}

type apiSpan struct {
	TraceID       string   `json:"traceID"`
	SpanID        string   `json:"spanID"`
	OperationName string   `json:"operationName"`
	References    []apiRef `json:"references"`
	StartTime     int64    `json:"startTime"` // µs since the epoch
	Duration      int64    `json:"duration"`  // µs
	Tags          []apiKV  `json:"tags"`
	Logs          []apiLog `json:"logs"`
	ProcessID     string   `json:"processID"`
}

type apiRef struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

type apiKV struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type apiLog struct {
	Timestamp int64   `json:"timestamp"`
	Fields    []apiKV `json:"fields"`
}

func (t apiTrace) trace() *Trace {
	out := &Trace{TraceID: t.TraceID}
	for _, s := range t.Spans {
		sp := Span{
			TraceID:    s.TraceID,
			SpanID:     s.SpanID,
			Name:       s.OperationName,
			Service:    t.Processes[s.ProcessID].ServiceName,
			Start:      time.UnixMicro(s.StartTime),
			Duration:   time.Duration(s.Duration) * time.Microsecond,
			Attributes: map[string]any{},
		}
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID {
				sp.ParentID = r.SpanID
				break
			}
		}
		// The OTLP span's kind and status, which Jaeger keeps as tags.
		for _, kv := range s.Tags {
			switch kv.Key {
			case "span.kind":
				sp.Kind, _ = kv.Value.(string)
			case "otel.status_code":
				sp.Error = kv.Value == "ERROR"
			case "otel.status_description":
				sp.StatusMessage, _ = kv.Value.(string)
			case "error":
				if kv.Value == true {
					sp.Error = true
				}
			default:
				sp.Attributes[kv.Key] = value(kv)
			}
		}
		if sp.Kind == "" {
			sp.Kind = "internal"
		}
		for _, l := range s.Logs {
			ev := Event{Time: time.UnixMicro(l.Timestamp), Attributes: map[string]any{}}
			for _, kv := range l.Fields {
				if kv.Key == "event" {
					ev.Name, _ = kv.Value.(string)
					continue
				}
				ev.Attributes[kv.Key] = value(kv)
			}
			sp.Events = append(sp.Events, ev)
		}
		out.Spans = append(out.Spans, sp)
	}
	sort.SliceStable(out.Spans, func(i, j int) bool { return out.Spans[i].Start.Before(out.Spans[j].Start) })
	return out
}

// value is a tag's value as Go: int64 or float64 for a number.
func value(kv apiKV) any {
	n, ok := kv.Value.(json.Number)
	if !ok {
		return kv.Value
	}
	if i, err := n.Int64(); err == nil && kv.Type == "int64" {
		return i
	}
	f, _ := n.Float64()
	return f
}
