package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeAPI answers like a gateway: creates succeed unless the body says
// "fail", queries see each task complete on its second look, downloads work.
func fakeAPI(t *testing.T, createStatus *atomic.Int32) *httptest.Server {
	t.Helper()
	var seq atomic.Int64
	var mu sync.Mutex
	looks := map[string]int{}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && !strings.HasPrefix(r.URL.Path, "/files/") {
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"code":401,"msg":"missing Authorization header","data":null}`))
			return
		}
		switch r.URL.Path {
		case "/v1/task/create":
			if st := createStatus.Load(); st != 200 {
				w.WriteHeader(int(st))
				_, _ = w.Write([]byte(`{"code":429,"msg":"rate limit exceeded; retry after 17ms","data":null}`))
				return
			}
			id := "task_x_" + strings.Repeat("1", int(seq.Add(1)%5)+1)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 200, "msg": "success", "data": map[string]string{"task_id": id}})
		case "/v1/task/query":
			id := r.URL.Query().Get("task_id")
			mu.Lock()
			looks[id]++
			n := looks[id]
			mu.Unlock()
			if n < 2 {
				_, _ = w.Write([]byte(`{"status":"processing","results":[]}`))
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "completed", "results": []string{srv.URL + "/files/a.png"}})
		default:
			_, _ = w.Write([]byte("png"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestModes(t *testing.T) {
	t.Parallel()
	var st atomic.Int32
	st.Store(200)
	srv := fakeAPI(t, &st)
	mix, _ := ParseMix("m1=3,m2/2K/16:9=1")
	for _, mode := range []string{ModeCreate, ModeQuery, ModeLifecycle} {
		rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: mode, Concurrency: 1, Requests: 20, Mix: mix, PollInterval: time.Millisecond, QueryTasks: 5})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		main := map[string]string{ModeCreate: OpCreate, ModeQuery: OpQuery, ModeLifecycle: OpCompletion}[mode]
		o := rep.Ops[main]
		if o == nil || o.OK != 20 || o.Errors != 0 || o.Latency.P50 <= 0 || o.Latency.Max < o.Latency.P99 {
			t.Errorf("%s: %+v", mode, o)
		}
		if mode == ModeLifecycle && (rep.Ops[OpDownload].OK != 20 || rep.TaskOutcome["completed"] != 20) {
			t.Errorf("lifecycle downloads %+v outcomes %v", rep.Ops[OpDownload], rep.TaskOutcome)
		}
	}
}

func TestNon2xxIsNeverSuccess(t *testing.T) {
	t.Parallel()
	var st atomic.Int32
	st.Store(429)
	srv := fakeAPI(t, &st)
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeCreate, Concurrency: 2, Requests: 10, Mix: []MixEntry{{Model: "m", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	o := rep.Ops[OpCreate]
	if o.OK != 0 || o.Errors != 10 || o.Status["429"] != 10 || o.ErrorTypes["429 rate limit exceeded; retry after Nms"] != 10 {
		t.Errorf("%+v", o)
	}
	// A query run that cannot create its tasks says why.
	if _, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeQuery, Concurrency: 1, Requests: 1, Mix: []MixEntry{{Model: "m", Weight: 1}}, QueryTasks: 3}); err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Errorf("query setup: %v", err)
	}
}

func TestOpenLoop(t *testing.T) {
	t.Parallel()
	var st atomic.Int32
	st.Store(200)
	srv := fakeAPI(t, &st)
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"a", "b"}, Mode: ModeCreate, Rate: 200, Duration: 500 * time.Millisecond, Mix: []MixEntry{{Model: "m", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	// About 100 arrivals in half a second at 200/s.
	if n := rep.Ops[OpCreate].Count; n < 50 || n > 110 {
		t.Errorf("%d requests at 200/s for 0.5s", n)
	}
}

func TestParseMix(t *testing.T) {
	t.Parallel()
	m, err := ParseMix("lumen-2.5-flash-image/-/16:9=3, lumen-3-pro-image-preview/2K")
	if err != nil || len(m) != 2 || m[0].AspectRatio != "16:9" || m[0].ImageSize != "" || m[0].Weight != 3 || m[1].ImageSize != "2K" || m[1].Weight != 1 {
		t.Errorf("ParseMix = %+v, %v", m, err)
	}
	for _, bad := range []string{"", "a=0", "a=x", "/1K", "a/b/c/d"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}

// TestLifecycleFollowsTasksPastTheDuration: the tasks created before the
// duration ends are followed to their end, so slow tasks are not left out of
// the completion figures; an interrupted run says which tasks it left.
func TestLifecycleFollowsTasksPastTheDuration(t *testing.T) {
	t.Parallel()
	var st atomic.Int32
	st.Store(200)
	srv := fakeAPI(t, &st)
	mix := []MixEntry{{Model: "m", Weight: 1}}
	for _, tc := range []struct {
		name      string
		cfg       Config
		interrupt time.Duration
		outcome   string
	}{
		// Each task ends on its second query, a poll interval (400 ms) or
		// more after its creation: the run outlasts its 250 ms of arrivals
		// by at least 150 ms, however slow the machine (a 200 ms interval
		// left the closed loop's last units ending within 50 ms of the
		// arrivals when creates took 50 ms).
		{"open loop", Config{Rate: 20, Duration: 250 * time.Millisecond, PollInterval: 400 * time.Millisecond}, 0, "completed"},
		{"closed loop", Config{Concurrency: 3, Duration: 250 * time.Millisecond, PollInterval: 400 * time.Millisecond}, 0, "completed"},
		{"interrupted", Config{Concurrency: 3, Requests: 3, PollInterval: 10 * time.Second}, 300 * time.Millisecond, "unfinished"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.BaseURL, cfg.Keys, cfg.Mode, cfg.Mix, cfg.LifecycleTimeout = srv.URL, []string{"k"}, ModeLifecycle, mix, time.Minute
			ctx := context.Background()
			if tc.interrupt > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.interrupt)
				defer cancel()
			}
			rep, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			created := rep.Ops[OpCreate].OK
			if created == 0 || rep.TaskOutcome[tc.outcome] != created || len(rep.TaskOutcome) != 1 {
				t.Errorf("created %d, outcomes %v; want all %s", created, rep.TaskOutcome, tc.outcome)
			}
			if tc.outcome == "completed" {
				if rep.Ops[OpDownload].OK != created {
					t.Errorf("downloads %+v for %d tasks", rep.Ops[OpDownload], created)
				}
				if rep.Arrivals >= rep.Elapsed || time.Duration(rep.Arrivals) != cfg.Duration {
					t.Errorf("arrivals %v, elapsed %v", time.Duration(rep.Arrivals), time.Duration(rep.Elapsed))
				}
				var b strings.Builder
				rep.WriteText(&b)
				if !strings.Contains(b.String(), "0.2s of arrivals") {
					t.Errorf("report header:\n%s", b.String())
				}
			}
		})
	}
}
